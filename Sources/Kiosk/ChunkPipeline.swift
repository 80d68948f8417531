import Foundation
import KioskAPI
import KioskWire
import NIOConcurrencyHelpers

/// Inflates and checks a download's chunks on every core at once and hands
/// them back in order.
///
/// A download's chunks are independent zlib streams (unlike one gzip stream,
/// which only one core can inflate), so while the caller hashes and writes
/// chunk n, chunks n+1… are inflated on the other cores. When the content
/// service announces each chunk's SHA-256 state, a chunk is also hashed there,
/// from its state, while its bytes are in cache (the caller checks that the
/// states chain: see ``SHA256Hasher``). Each chunk is
/// inflated straight into a buffer from a small pool (no fresh allocation,
/// so no page faults, per chunk) and its CRC-32 checked there. A damaged
/// chunk fails when its turn comes: every chunk before it has been handed
/// back and written first.
///
/// Used by one task (the download's); the inflating runs in child tasks.
struct ChunkPipeline {
    /// A chunk inflated and checked, in memory borrowed from the pool until ``ChunkPipeline/recycle(_:)``.
    struct Inflated: @unchecked Sendable {
        var index: UInt32
        var offset: UInt64
        var buffer: ChunkBuffer
        var count: Int
        /// For a chunk hashed from its announced state: the hasher after its bytes.
        var hashed: SHA256Hasher?
        /// The state it was hashed from (the one the chunk announced).
        var hashedFrom: SHA256Hasher.State?
        var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffer.memory)[0..<count]) }
    }

    /// How many chunks may be inflating at once; the caller consumes when more are in flight.
    let width: Int
    private let pool = Pool()
    private var inFlight: [Task<Inflated, Error>] = []
    private var first = 0

    init(width: Int = max(2, ProcessInfo.processInfo.activeProcessorCount)) {
        self.width = width
    }

    /// Chunks submitted and not yet handed back.
    var count: Int { inFlight.count - first }

    /// Starts inflating and checking `chunk`, and hashing it from `hashFrom`
    /// when given (the chunk's announced state, at its offset).
    mutating func submit(_ chunk: ContentV1.DownloadChunk, hashFrom: SHA256Hasher? = nil) {
        let pool = self.pool
        inFlight.append(Task.detached {
            try Task.checkCancellation()
            let length = Int(chunk.originalLength)
            let buffer = pool.buffer(capacity: length)
            do {
                try chunk.data.withUnsafeBytes { source in
                    let destination = UnsafeMutableRawBufferPointer(rebasing: buffer.memory[0..<length])
                    if chunk.compressed {
                        let inflater = pool.inflater()
                        defer { pool.recycle(inflater) }
                        do {
                            try inflater.inflate(source, into: destination)
                        } catch {
                            throw KioskError(.downloadFailed, "chunk \(chunk.index) does not inflate: \((error as? WireError)?.message ?? "\(error)")")
                        }
                    } else {
                        guard source.count == length else {
                            throw KioskError(.downloadFailed, "chunk \(chunk.index) is damaged (length or CRC-32)")
                        }
                        if length > 0 { destination.copyMemory(from: source) }
                    }
                    guard Zlib.crc32(UnsafeRawBufferPointer(destination)) == chunk.crc32 else {
                        throw KioskError(.downloadFailed, "chunk \(chunk.index) is damaged (length or CRC-32)")
                    }
                }
            } catch {
                pool.recycle(buffer)
                throw error
            }
            var hashed = hashFrom
            hashed?.update(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffer.memory)[0..<length]))
            return Inflated(index: chunk.index, offset: chunk.offset, buffer: buffer, count: length,
                            hashed: hashed, hashedFrom: hashFrom?.state)
        })
    }

    /// The oldest chunk submitted, once inflated and checked; nil when none is left.
    /// - Throws: ``KioskError`` for a chunk that does not inflate or whose CRC-32 differs.
    mutating func next() async throws -> Inflated? {
        guard first < inFlight.count else { return nil }
        let task = inFlight[first]
        first += 1
        if first == inFlight.count {
            inFlight.removeAll(keepingCapacity: true)
            first = 0
        } else if first > 64 {
            inFlight.removeFirst(first)
            first = 0
        }
        return try await task.value
    }

    /// Gives a handed-back chunk's memory back to the pool.
    func recycle(_ chunk: Inflated) {
        pool.recycle(chunk.buffer)
    }

    /// Stops the chunks still inflating (the download failed or was paused).
    mutating func cancelAll() {
        for task in inFlight[first...] { task.cancel() }
        inFlight.removeAll()
        first = 0
    }

    /// Buffers and inflaters, reused from chunk to chunk.
    final class Pool: Sendable {
        private let state = NIOLockedValueBox<(buffers: [ChunkBuffer], inflaters: [UncheckedInflater])>(([], []))

        func buffer(capacity: Int) -> ChunkBuffer {
            let reused = state.withLockedValue { state -> ChunkBuffer? in
                guard let index = state.buffers.lastIndex(where: { $0.memory.count >= capacity }) else { return nil }
                return state.buffers.remove(at: index)
            }
            return reused ?? ChunkBuffer(capacity: capacity)
        }

        func recycle(_ buffer: ChunkBuffer) {
            // A handful is all a pipeline ever has out at once; anything past that is let go.
            state.withLockedValue { if $0.buffers.count < 16 { $0.buffers.append(buffer) } }
        }

        func inflater() -> Zlib.Inflater {
            state.withLockedValue { $0.inflaters.popLast()?.inflater } ?? Zlib.Inflater()
        }

        func recycle(_ inflater: Zlib.Inflater) {
            state.withLockedValue { $0.inflaters.append(UncheckedInflater(inflater: inflater)) }
        }
    }

    /// An inflater resting in the pool: used by one task at a time.
    struct UncheckedInflater: @unchecked Sendable {
        var inflater: Zlib.Inflater
    }
}

/// Memory for one inflated chunk.
final class ChunkBuffer: @unchecked Sendable {
    let memory: UnsafeMutableRawBufferPointer

    init(capacity: Int) {
        memory = .allocate(byteCount: max(capacity, 1), alignment: 64)
    }

    deinit { memory.deallocate() }
}
