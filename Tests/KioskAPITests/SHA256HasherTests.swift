import Crypto
import Testing

@testable import KioskAPI

/// SHA256Hasher: the same digest as Crypto's SHA256, in one piece, in uneven
/// updates, and in pieces hashed apart from the states between them.
@Suite struct SHA256HasherTests {
    func bytes(_ count: Int, seed: UInt64 = 7) -> [UInt8] {
        var generator = seed
        return (0..<count).map { _ in
            generator = generator &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return UInt8(truncatingIfNeeded: generator >> 33)
        }
    }

    @Test func theDigestIsSHA256AtEveryLengthAroundThePadding() {
        for count in [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 65_536 + 17] {
            let input = bytes(count)
            var hasher = SHA256Hasher()
            hasher.update(input)
            #expect(hasher.finalize() == Array(SHA256.hash(data: input)), "length \(count)")
            #expect(hasher.count == UInt64(count))
            // finalize leaves the hasher as it was.
            #expect(hasher.finalize() == Array(SHA256.hash(data: input)))
        }
        // The known answer for "abc" (FIPS 180-4's example).
        var abc = SHA256Hasher()
        abc.update(Array("abc".utf8))
        #expect(abc.finalize().hexString == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    /// The state's wire form, fixed independently of this code: the initial value as FIPS 180-4 writes it, and
    /// the state after the one padded block of "abc", which is that message's digest.
    @Test func theStateIsBigEndianOnTheWire() throws {
        #expect(
            SHA256Hasher.State.initial.bytes.hexString
                == "6a09e667bb67ae853c6ef372a54ff53a510e527f9b05688c1f83d9ab5be0cd19")
        var block = Array("abc".utf8) + [0x80] + [UInt8](repeating: 0, count: 52)
        block += [0, 0, 0, 0, 0, 0, 0, 24]
        var hasher = SHA256Hasher()
        hasher.update(block)
        let state = try #require(hasher.blockState)
        #expect(state.bytes.hexString == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SHA256Hasher.State(bytes: state.bytes) == state)
    }

    /// The Swift block function Apple platforms use gives BoringSSL's states.
    @Test func thePortableBlockFunctionMatchesBoringSSL() {
        let input = bytes(64 * 37, seed: 5)
        var boring = SHA256Hasher()
        boring.update(input)
        var words = SHA256Hasher.State.initial.words
        input.withUnsafeBytes { SHA256Hasher.compressPortably(&words, data: $0.baseAddress!, blocks: 37) }
        #expect(SHA256Hasher.State(words: words) == boring.blockState)
    }

    @Test func unevenUpdatesGiveTheSameDigest() {
        let input = bytes(10_000, seed: 11)
        var hasher = SHA256Hasher()
        var at = 0
        for step in [1, 62, 1, 64, 130, 7, 500, 63, 65] + Array(repeating: 997, count: 20) where at < input.count {
            let end = min(at + step, input.count)
            input[at..<end].withUnsafeBytes { hasher.update($0) }
            at = end
        }
        input[at...].withUnsafeBytes { hasher.update($0) }
        #expect(hasher.finalize() == Array(SHA256.hash(data: input)))
    }

    @Test func piecesHashedApartFromTheirStatesChainToTheWholeDigest() throws {
        let input = bytes(64 * 100 + 33, seed: 3)
        let pieces = [0..<64 * 10, 64 * 10..<64 * 64, 64 * 64..<input.count]
        // The states a content service announces: the chaining value before each piece.
        var serial = SHA256Hasher()
        var announced: [SHA256Hasher.State] = []
        for piece in pieces {
            announced.append(try #require(serial.blockState))
            input[piece].withUnsafeBytes { serial.update($0) }
        }
        #expect(announced[0] == .initial)
        #expect(SHA256Hasher.State(bytes: announced[1].bytes) == announced[1])
        #expect(SHA256Hasher.State(bytes: Array(announced[1].bytes.dropLast())) == nil)
        // Each piece from its own state, as a client's cores would; each must end in the next one's state.
        var ends: [SHA256Hasher] = []
        for (number, piece) in pieces.enumerated() {
            var hasher = try #require(SHA256Hasher(state: announced[number], count: UInt64(piece.lowerBound)))
            input[piece].withUnsafeBytes { hasher.update($0) }
            ends.append(hasher)
        }
        #expect(ends[0].blockState == announced[1])
        #expect(ends[1].blockState == announced[2])
        #expect(ends[2].blockState == nil)
        #expect(ends[2].finalize() == Array(SHA256.hash(data: input)))
        // One changed byte in a piece breaks the chain at that piece's end.
        var damaged = input
        damaged[700] ^= 1
        var hasher = try #require(SHA256Hasher(state: announced[1], count: UInt64(pieces[1].lowerBound)))
        #expect(SHA256Hasher(state: announced[1], count: 65) == nil, "a state lies between whole blocks")
        damaged[pieces[1]].withUnsafeBytes { hasher.update($0) }
        #expect(hasher.blockState != announced[2])
    }

    /// Every lane variant this CPU has (and none: one input at a time) gives each hasher what
    /// `update(_:)` alone gives it: inputs of one length and of several, hashers in the middle of a
    /// block, pieces shorter than a block, more inputs than lanes and fewer than pay for them.
    @Test func inputsHashedInLanesGiveWhatEachGivesAlone() {
        // Every variant the CPU can run, even where the SHA instructions make BoringSSL the one used;
        // and one it cannot (3): nothing is compressed in lanes, every input goes alone.
        let supported = SHA256Hasher.laneVariantsSupported
        let variants: [Int32] = [0, 3] + (supported >= 1 ? [1] : []) + (supported >= 2 ? [2] : [])
        let cases: [[Int]] = [
            Array(repeating: 4096, count: 8),  // one full group
            Array(repeating: 4096, count: 11),  // a group and a tail of 3
            [640, 4096, 64, 63, 0, 8192, 4096 + 17, 1000, 128],  // lengths of every kind
            [4096, 4096],  // fewer than an AVX2 group pays for
            Array(repeating: 256 * 1024, count: 8),  // a download's chunks
        ]
        for variant in variants {
            for (number, lengths) in cases.enumerated() {
                let inputs = lengths.enumerated().map { bytes($1, seed: UInt64(number * 100 + $0)) }
                // Hashers that already hold some bytes: whole blocks (a chunk's announced state), or half a block.
                let starts = lengths.indices.map { bytes($0 % 3 == 2 ? 32 : 64 * ($0 % 3), seed: UInt64(900 + $0)) }
                var alone = starts.map { start -> SHA256Hasher in
                    var hasher = SHA256Hasher()
                    hasher.update(start)
                    return hasher
                }
                var together = alone
                for index in alone.indices { alone[index].update(inputs[index]) }
                let buffers = inputs.map { input -> UnsafeMutableRawBufferPointer in
                    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(input.count, 1), alignment: 64)
                    input.withUnsafeBytes { buffer.copyMemory(from: $0) }
                    return buffer
                }
                defer { for buffer in buffers { buffer.deallocate() } }
                let pieces = zip(buffers, inputs).map {
                    UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer($0)[0..<$1.count])
                }
                SHA256Hasher.update(lanes: &together, with: pieces, variant: variant)
                for index in alone.indices {
                    #expect(
                        together[index].count == alone[index].count,
                        "variant \(variant), case \(number), input \(index)")
                    #expect(
                        together[index].finalize() == alone[index].finalize(),
                        "variant \(variant), case \(number), input \(index)")
                    #expect(together[index].finalize() == Array(SHA256.hash(data: starts[index] + inputs[index])))
                }
            }
        }
        #expect(SHA256Hasher.lanes == (SHA256Hasher.laneVariant > 0 ? 8 : 1))
    }
}
