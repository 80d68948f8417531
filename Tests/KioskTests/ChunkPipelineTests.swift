@testable import Kiosk
import KioskAPI
import KioskWire
import NIOCore
import Testing

/// Chunks inflate in parallel and come back in order; a damaged one fails
/// only when its turn comes, after every chunk before it was handed back.
@Suite struct ChunkPipelineTests {
    func chunk(_ index: Int, _ bytes: [UInt8], compressed: Bool = true, crc: UInt32? = nil, length: Int? = nil) -> ContentV1.DownloadChunk {
        ContentV1.DownloadChunk(
            index: UInt32(index), offset: UInt64(index * 1000), originalLength: UInt32(length ?? bytes.count), compressed: compressed,
            crc32: crc ?? Zlib.crc32(bytes),
            data: compressed ? Array(Zlib.compress(ByteBuffer(bytes: bytes)).readableBytesView) : bytes)
    }

    @Test func chunksComeBackInOrderAndADamagedOneFailsInItsTurn() async throws {
        let pieces = (0..<12).map { i in Array(String(repeating: "chunk \(i) ", count: 100).utf8.prefix(1000)) }
        var pipeline = ChunkPipeline(width: 3)
        for (i, piece) in pieces.enumerated() {
            switch i {
            case 7: pipeline.submit(chunk(i, piece, crc: Zlib.crc32(piece) ^ 1))          // wrong CRC-32
            case 9: pipeline.submit(chunk(i, piece, compressed: false, length: 999))       // wrong length
            case 10: pipeline.submit(chunk(i, piece, length: 1001))                         // inflates short
            case 5: pipeline.submit(chunk(i, piece, compressed: false))                    // stored as is
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
        await #expect(throws: KioskError.self, "chunk 10 inflates to less than it claims") { _ = try await pipeline.next() }
        pipeline.cancelAll()
        #expect(try await pipeline.next() == nil)
    }
}
