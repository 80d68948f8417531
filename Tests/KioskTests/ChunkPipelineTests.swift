import KioskAPI
import KioskWire
import NIOCore
import Testing

@testable import Kiosk

/// Chunks inflate in parallel and come back in order; a damaged one fails
/// only when its turn comes, after every chunk before it was handed back.
@Suite struct ChunkPipelineTests {
    func chunk(
        _ index: Int, _ bytes: [UInt8], compressed: Bool = true, crc: UInt32? = nil, length: Int? = nil
    ) -> ContentV1.DownloadChunk {
        ContentV1.DownloadChunk(
            index: UInt32(index), offset: UInt64(index * 1000), originalLength: UInt32(length ?? bytes.count),
            compressed: compressed,
            crc32: crc ?? Zlib.crc32(bytes),
            data: compressed ? Array(Zlib.compress(ByteBuffer(bytes: bytes)).readableBytesView) : bytes)
    }

    @Test func chunksComeBackInOrderAndADamagedOneFailsInItsTurn() async throws {
        let pieces = (0..<12).map { i in Array(String(repeating: "chunk \(i) ", count: 100).utf8.prefix(1000)) }
        var pipeline = ChunkPipeline(width: 3)
        for (i, piece) in pieces.enumerated() {
            switch i {
            case 7: pipeline.submit(chunk(i, piece, crc: Zlib.crc32(piece) ^ 1))  // wrong CRC-32
            case 9: pipeline.submit(chunk(i, piece, compressed: false, length: 999))  // wrong length
            case 10: pipeline.submit(chunk(i, piece, length: 1001))  // inflates short
            case 5: pipeline.submit(chunk(i, piece, compressed: false))  // stored as is
            default: pipeline.submit(chunk(i, piece))
            }
        }
        #expect(pipeline.count == 12)
        for i in 0..<7 {
            let inflated = try #require(try await pipeline.next())
            #expect(inflated.index == UInt32(i) && Array(inflated.bytes) == pieces[i])
            pipeline.recycle(inflated)
        }
        await #expect(throws: KioskError.self, "chunk 7's CRC-32") { _ = try await pipeline.next() }
        #expect(try await pipeline.next()?.index == 8)
        await #expect(throws: KioskError.self, "chunk 9's length") { _ = try await pipeline.next() }
        await #expect(throws: KioskError.self, "chunk 10 inflates to less than it claims") {
            _ = try await pipeline.next()
        }
        pipeline.cancelAll()
        #expect(try await pipeline.next() == nil)
    }

    /// With states, chunks go to the tasks in groups (8 lanes): they still come back in order, each
    /// hashed from its state to the state of the next, and a damaged one in the middle of a group
    /// fails after the chunks before it.
    @Test func chunksWithStatesAreHashedInGroupsAndComeBackInOrder() async throws {
        let size = 4096
        let file = (0..<(19 * size + 100)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        let count = (file.count + size - 1) / size
        var states: [SHA256Hasher] = []
        var running = SHA256Hasher()
        for index in 0..<count {
            states.append(running)
            running.update(Array(file[(index * size)..<min(file.count, (index + 1) * size)]))
        }
        for lanes in [8, 1] {
            for damaged in [nil, 10] as [Int?] {
                var pipeline = ChunkPipeline(width: 2, lanes: lanes)
                for index in 0..<count {
                    let piece = Array(file[(index * size)..<min(file.count, (index + 1) * size)])
                    var chunk = chunk(index, piece, crc: index == damaged ? Zlib.crc32(piece) ^ 1 : nil)
                    chunk.offset = UInt64(index * size)
                    pipeline.submit(chunk, hashFrom: states[index])
                }
                #expect(pipeline.count == count)
                #expect(pipeline.capacity == 2 * lanes)
                // The stream has ended: the last group (4 chunks) starts beside the others. Without it (the
                // damaged runs), next() starts it once nothing else is left.
                if damaged == nil { pipeline.finish() }
                var hasher = SHA256Hasher()
                for index in 0..<(damaged ?? count) {
                    let inflated = try #require(try await pipeline.next())
                    #expect(inflated.index == UInt32(index) && inflated.hashedFrom == hasher.blockState)
                    hasher.update(inflated.bytes)
                    #expect(
                        inflated.hashed?.state == hasher.state && inflated.hashed?.count == hasher.count,
                        "lanes \(lanes), chunk \(index)")
                    pipeline.recycle(inflated)
                }
                if damaged != nil {
                    await #expect(throws: KioskError.self, "the damaged chunk, after those before it") {
                        _ = try await pipeline.next()
                    }
                    // In groups of 8, the rest of the damaged chunk's group (11…15) is dropped with it.
                    #expect(pipeline.count == (lanes == 8 ? 4 : 9))
                    let after = try #require(try await pipeline.next())
                    #expect(after.index == (lanes == 8 ? 16 : 11))
                    pipeline.recycle(after)
                    pipeline.cancelAll()
                    #expect(pipeline.count == 0)
                } else {
                    #expect(hasher.finalize() == running.finalize())
                }
                #expect(try await pipeline.next() == nil)
            }
        }
    }

    /// However many cores, the groups in flight hold 32 MiB at most, and a group 4 MiB: 1 MiB chunks
    /// go 4 to a group, 8 groups at once on 64 cores (not 64).
    @Test func groupsInFlightAreBoundedByBytes() async throws {
        let piece = [UInt8](repeating: 7, count: 1 << 20)
        var pipeline = ChunkPipeline(width: 64, lanes: 8)
        pipeline.submit(chunk(0, piece), hashFrom: SHA256Hasher())
        #expect(pipeline.capacity == 8 * 4)
        #expect(pipeline.capacity * piece.count <= ChunkPipeline.inFlightBytes)
        pipeline.cancelAll()
        #expect(try await pipeline.next() == nil)
    }
}
