import CBoringSHA256

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
/// instructions or vector units when it has them): the same speed as
/// `Crypto.SHA256`, whose state cannot be read or set.
public struct SHA256Hasher: Sendable {
    /// Bytes per SHA-256 block.
    public static let blockSize = 64

    /// SHA-256's chaining value: eight 32-bit words.
    public struct State: Hashable, Sendable {
        var words: SIMD8<UInt32>

        /// SHA-256's initial value (the state before any byte).
        public static let initial = State(words: SIMD8(
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
                for shift in stride(from: 24, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: words[word] >> UInt32(shift))) }
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
    /// bytes of an input (`count` a multiple of 64).
    public init(state: State, count: UInt64) {
        precondition(count % UInt64(Self.blockSize) == 0, "a SHA-256 state lies between whole blocks")
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
        if rest > 0 { pending.append(contentsOf: UnsafeRawBufferPointer(start: base + blocks * Self.blockSize, count: rest)) }
    }

    /// Hashes `bytes` after those before.
    public mutating func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// The SHA-256 digest of every byte hashed (the hasher itself is left as it was).
    public func finalize() -> [UInt8] {
        // FIPS 180-4 padding: 0x80, zeros to 56 mod 64, the length in bits as 64 bits big-endian.
        var tail = pending
        tail.append(0x80)
        while tail.count % Self.blockSize != 56 { tail.append(0) }
        let bits = count &* 8
        for shift in stride(from: 56, through: 0, by: -8) { tail.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift))) }
        var copy = self
        tail.withUnsafeBytes { copy.compress($0.baseAddress!, blocks: $0.count / Self.blockSize) }
        return copy.state.bytes
    }

    private mutating func compress(_ data: UnsafeRawPointer, blocks: Int) {
        withUnsafeMutableBytes(of: &state.words) { words in
            CCryptoBoringSSL_SHA256_TransformBlocks(
                words.baseAddress!.assumingMemoryBound(to: UInt32.self), data.assumingMemoryBound(to: UInt8.self), blocks)
        }
    }
}
