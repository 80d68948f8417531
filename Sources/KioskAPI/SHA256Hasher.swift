import CSHA256Lanes
import Foundation

#if !canImport(Darwin)
import CBoringSHA256
#endif

/// SHA-256 with its chaining value in the open, so that a long input can be
/// hashed in pieces on several cores and still give the one SHA-256 of the
/// whole.
///
/// SHA-256 compresses its input 64 bytes at a time into a 32-byte state. A
/// piece that starts at a multiple of 64 bytes can be hashed on its own from
/// the state before it (``init(state:count:)``); when every piece, hashed from
/// the state announced for it, ends in the state announced for the next, and
/// the last one finishes with the digest expected, the whole input has that
/// digest exactly as if it had been hashed in one go. The content service
/// announces those states in its download chunks (`DownloadChunk.sha256_state`).
///
/// The blocks are compressed by swift-crypto's BoringSSL (on the CPU's SHA
/// instructions or vector units when it has them): the block function behind
/// `Crypto.SHA256`, whose state cannot be read or set. On Apple platforms,
/// where swift-crypto is CryptoKit and links no BoringSSL, by
/// ``compressPortably(_:data:blocks:)`` (checked against BoringSSL's on Linux).
public struct SHA256Hasher: Sendable {
    /// Bytes per SHA-256 block.
    public static let blockSize = 64

    /// SHA-256's chaining value: eight 32-bit words.
    public struct State: Hashable, Sendable {
        var words: SIMD8<UInt32>

        /// SHA-256's initial value (the state before any byte).
        public static let initial = State(
            words: SIMD8(
                0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19))

        init(words: SIMD8<UInt32>) { self.words = words }

        /// The state from its 32-byte form (each word big-endian); nil for any other length.
        public init?(bytes: [UInt8]) {
            guard bytes.count == 32 else { return nil }
            var words = SIMD8<UInt32>()
            for word in 0..<8 {
                words[word] = (0..<4).reduce(0) { $0 << 8 | UInt32(bytes[word * 4 + $1]) }
            }
            self.words = words
        }

        /// The 32-byte form: each word big-endian (for the initial value, SHA-256's IV as FIPS 180-4 writes it).
        public var bytes: [UInt8] {
            var out = [UInt8]()
            out.reserveCapacity(32)
            for word in 0..<8 {
                for shift in stride(from: 24, through: 0, by: -8) {
                    out.append(UInt8(truncatingIfNeeded: words[word] >> UInt32(shift)))
                }
            }
            return out
        }
    }

    /// The chaining value after the whole blocks hashed so far.
    public private(set) var state: State
    /// Bytes hashed so far.
    public private(set) var count: UInt64
    /// The bytes after the last whole block (fewer than 64).
    private var pending: [UInt8] = []

    /// A hasher at the start of an input.
    public init() {
        state = .initial
        count = 0
    }

    /// A hasher that goes on from `state`, the chaining value after `count`
    /// bytes of an input; nil unless `count` is a multiple of 64 (a state lies
    /// between whole blocks).
    public init?(state: State, count: UInt64) {
        guard count % UInt64(Self.blockSize) == 0 else { return nil }
        self.state = state
        self.count = count
    }

    /// The chaining value when the bytes hashed so far are whole blocks (what a
    /// piece starting here is hashed from); nil in the middle of a block.
    public var blockState: State? { pending.isEmpty ? state : nil }

    /// Hashes `bytes` after those before.
    public mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard var base = bytes.baseAddress, !bytes.isEmpty else { return }
        var left = bytes.count
        count += UInt64(left)
        if !pending.isEmpty {
            let take = min(Self.blockSize - pending.count, left)
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base, count: take))
            base += take
            left -= take
            guard pending.count == Self.blockSize else { return }
            pending.withUnsafeBytes { compress($0.baseAddress!, blocks: 1) }
            pending.removeAll(keepingCapacity: true)
        }
        let blocks = left / Self.blockSize
        if blocks > 0 { compress(base, blocks: blocks) }
        let rest = left - blocks * Self.blockSize
        if rest > 0 {
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base + blocks * Self.blockSize, count: rest))
        }
    }

    /// Hashes `bytes` after those before.
    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// How many inputs ``update(lanes:with:)`` compresses at once on this CPU:
    /// 8 with AVX2 or AVX-512VL and no SHA instructions, in a build with
    /// optimization, else 1 (each input on its own, as ``update(_:)`` does).
    /// `KIOSK_SHA256_LANES=0` in the environment turns the lanes off, `avx2`
    /// keeps them to AVX2 on a CPU with AVX-512VL (to compare).
    public static var lanes: Int { laneVariant > 0 ? 8 : 1 }

    /// What ``update(lanes:with:)`` runs on: "AVX-512VL", "AVX2", or "none" (one input at a time).
    public static var laneImplementation: String {
        switch laneVariant {
        case 2: "AVX-512VL"
        case 1: "AVX2"
        default: "none"
        }
    }

    /// The best variant the CPU can run, wanted or not (tests check each).
    static var laneVariantsSupported: Int32 { kiosk_sha256_lanes_supported() }

    /// The C variant the lanes run (0: none, 1: AVX2, 2: AVX-512VL).
    static let laneVariant: Int32 = {
        switch ProcessInfo.processInfo.environment["KIOSK_SHA256_LANES"] {
        case "0": 0
        case "avx2": min(kiosk_sha256_lanes_variant(), 1)
        default: kiosk_sha256_lanes_variant()
        }
    }()

    /// Hashes several inputs at once: `hashers[i]` takes `pieces[i]` after the
    /// bytes it holds. The same result as ``update(_:)`` on each, but with
    /// ``lanes`` 8 the whole blocks of up to eight hashers that are between
    /// blocks are compressed together on one core, one input per lane of the
    /// vector registers; what is left (a hasher in the middle of a block, the
    /// bytes after a shorter piece's last block) goes one input at a time.
    public static func update(lanes hashers: inout [SHA256Hasher], with pieces: [UnsafeRawBufferPointer]) {
        update(lanes: &hashers, with: pieces, variant: laneVariant)
    }

    /// ``update(lanes:with:)`` with a given C variant (tests run each the CPU has).
    static func update(lanes hashers: inout [SHA256Hasher], with pieces: [UnsafeRawBufferPointer], variant: Int32) {
        precondition(hashers.count == pieces.count, "one piece per hasher")
        var done = [Int](repeating: 0, count: pieces.count)
        if variant > 0 {
            // Fewer inputs go one stream each: the 8 lanes cost the same however many are idle (hashing a copy).
            let fewest = variant == 2 ? 2 : 3
            // The inputs that start on a block boundary, longest first: inputs of one length share a group.
            let ready = hashers.indices.filter { hashers[$0].pending.isEmpty && pieces[$0].count >= blockSize }
                .sorted { pieces[$0].count > pieces[$1].count }
            var start = 0
            while ready.count - start >= fewest {
                let group = ready[start..<min(start + 8, ready.count)]
                start = group.endIndex
                let blocks = group.map { pieces[$0].count / blockSize }.min()!
                var words = [UInt32](repeating: 0, count: 64)
                var data = [UnsafePointer<UInt8>?](repeating: nil, count: 8)
                for lane in 0..<8 {
                    // An idle lane hashes the first input again, into a state that is thrown away.
                    let index = lane < group.count ? group[group.startIndex + lane] : group.first!
                    for word in 0..<8 { words[lane * 8 + word] = hashers[index].state.words[word] }
                    data[lane] = pieces[index].baseAddress!.assumingMemoryBound(to: UInt8.self)
                }
                // A variant the CPU cannot run compresses nothing: every input then goes one at a time.
                guard kiosk_sha256_lanes_x8(variant, &words, data, blocks) == 0 else { break }
                for (lane, index) in group.enumerated() {
                    for word in 0..<8 { hashers[index].state.words[word] = words[lane * 8 + word] }
                    hashers[index].count += UInt64(blocks * blockSize)
                    done[index] = blocks * blockSize
                }
            }
        }
        for index in hashers.indices where done[index] < pieces[index].count {
            hashers[index].update(UnsafeRawBufferPointer(rebasing: pieces[index][done[index]...]))
        }
    }

    /// The SHA-256 digest of every byte hashed (the hasher itself is left as it was).
    public func finalize() -> [UInt8] {
        // FIPS 180-4 padding: 0x80, zeros to 56 mod 64, the length in bits as 64 bits big-endian.
        var tail = pending
        tail.append(0x80)
        while tail.count % Self.blockSize != 56 { tail.append(0) }
        let bits = count &* 8
        for shift in stride(from: 56, through: 0, by: -8) {
            tail.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift)))
        }
        var copy = self
        tail.withUnsafeBytes { copy.compress($0.baseAddress!, blocks: $0.count / Self.blockSize) }
        return copy.state.bytes
    }

    private mutating func compress(_ data: UnsafeRawPointer, blocks: Int) {
        #if canImport(Darwin)
        Self.compressPortably(&state.words, data: data, blocks: blocks)
        #else
        withUnsafeMutablePointer(to: &state.words) { pointer in
            pointer.withMemoryRebound(to: UInt32.self, capacity: 8) { words in
                CNIOBoringSSL_SHA256_TransformBlocks(words, data.assumingMemoryBound(to: UInt8.self), blocks)
            }
        }
        #endif
    }

    /// SHA-256's block function in Swift (FIPS 180-4, 6.2.2), for platforms
    /// without BoringSSL: compresses `blocks` 64-byte blocks at `data` into `words`.
    static func compressPortably(_ words: inout SIMD8<UInt32>, data: UnsafeRawPointer, blocks: Int) {
        @inline(__always) func rotate(_ x: UInt32, _ n: UInt32) -> UInt32 { x >> n | x << (32 - n) }
        var schedule = [UInt32](repeating: 0, count: 64)
        for block in 0..<blocks {
            let base = data + block * blockSize
            for t in 0..<16 {
                schedule[t] = (0..<4).reduce(0) {
                    $0 << 8 | UInt32(base.load(fromByteOffset: t * 4 + $1, as: UInt8.self))
                }
            }
            for t in 16..<64 {
                let s0 = rotate(schedule[t - 15], 7) ^ rotate(schedule[t - 15], 18) ^ schedule[t - 15] >> 3
                let s1 = rotate(schedule[t - 2], 17) ^ rotate(schedule[t - 2], 19) ^ schedule[t - 2] >> 10
                schedule[t] = schedule[t - 16] &+ s0 &+ schedule[t - 7] &+ s1
            }
            var (a, b, c, d, e, f, g, h) = (
                words[0], words[1], words[2], words[3], words[4], words[5], words[6], words[7]
            )
            for t in 0..<64 {
                let t1 =
                    h &+ (rotate(e, 6) ^ rotate(e, 11) ^ rotate(e, 25)) &+ (e & f ^ ~e & g) &+ roundConstants[t]
                    &+ schedule[t]
                let t2 = (rotate(a, 2) ^ rotate(a, 13) ^ rotate(a, 22)) &+ (a & b ^ a & c ^ b & c)
                (h, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
            }
            words &+= SIMD8(a, b, c, d, e, f, g, h)
        }
    }

    private static let roundConstants: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]
}
