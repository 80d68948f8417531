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
/// states chain: see ``SHA256Hasher``). On a CPU whose vector units hash 8
/// inputs at once (``SHA256Hasher/lanes``), a task takes a group of up to 8
/// chunks (4 MiB at most), inflates them, then hashes them together; the
/// groups in flight hold 32 MiB at most, whatever the number of cores. Each chunk is
/// inflated straight into a buffer from a small pool (no fresh allocation,
/// so no page faults, per chunk) and its CRC-32 checked there. A damaged
/// chunk fails when its turn comes: every chunk before it has been handed
/// back and written first (the chunks after it in its group are dropped:
/// after a failure the caller cancels the rest).
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
        var bytes: UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buffer.memory)[0..<count])
        }
    }

    /// What one task made of its group: the chunks inflated and checked, in order, up to the first
    /// that failed (`failure`), which the caller meets after the chunks before it.
    struct Batch: @unchecked Sendable {
        var chunks: [Inflated] = []
        var failure: Error?
        /// The chunks after the failed one, never inflated.
        var skipped = 0
    }

    /// A chunk handed in and not yet given to a task, with the state it is hashed from.
    private struct Waiting: @unchecked Sendable {
        var chunk: ContentV1.DownloadChunk
        var hashFrom: SHA256Hasher?
    }

    /// How many tasks may be inflating at once; the caller consumes when more are in flight.
    let width: Int
    /// Chunks a task takes at most: 8 when the CPU hashes 8 inputs at once, else 1.
    private let lanes: Int
    /// The most chunk bytes a group holds.
    static let groupBytes = 4 << 20
    /// The most chunk bytes the groups in flight hold, together.
    static let inFlightBytes = 32 << 20
    private let pool = Pool()
    private var inFlight: [Task<Batch, Never>] = []
    private var first = 0
    private var waiting: [Waiting] = []
    private var waitingBytes = 0
    /// The chunks of the oldest task, being handed back.
    private var ready = Batch()
    private var readyIndex = 0
    /// Chunks handed in and not yet handed back.
    private(set) var count = 0
    /// The size of a group (from the latest chunk's length), and how many may be in flight.
    private var groupSize = 1
    private var tasks: Int

    init(width: Int = max(2, ProcessInfo.processInfo.activeProcessorCount), lanes: Int = SHA256Hasher.lanes) {
        self.width = width
        self.lanes = max(1, lanes)
        self.tasks = width
    }

    /// How many chunks may be handed in and not back before the caller should take one: a group per task.
    var capacity: Int { tasks * groupSize }

    /// Starts inflating and checking `chunk`, and hashing it from `hashFrom`
    /// when given (the chunk's announced state, at its offset); chunks with
    /// states wait until their group is full (or ``next()`` needs them).
    mutating func submit(_ chunk: ContentV1.DownloadChunk, hashFrom: SHA256Hasher? = nil) {
        count += 1
        waiting.append(Waiting(chunk: chunk, hashFrom: hashFrom))
        let length = max(Int(chunk.originalLength), 1)
        waitingBytes += length
        groupSize = hashFrom == nil ? 1 : min(lanes, max(1, Self.groupBytes / length))
        tasks = max(1, min(width, Self.inFlightBytes / (groupSize * length)))
        pool.keep((tasks + 2) * groupSize)
        if waiting.count >= groupSize || waitingBytes >= Self.groupBytes { startWaiting() }
    }

    /// The stream has ended: the last group, however small, starts now (beside those still in flight).
    mutating func finish() {
        startWaiting()
    }

    /// The oldest chunk submitted, once inflated and checked; nil when none is left.
    /// - Throws: ``KioskError`` for a chunk that does not inflate or whose CRC-32 differs.
    mutating func next() async throws -> Inflated? {
        while true {
            if readyIndex < ready.chunks.count {
                readyIndex += 1
                count -= 1
                return ready.chunks[readyIndex - 1]
            }
            if let failure = ready.failure {
                ready.failure = nil
                count -= 1 + ready.skipped
                throw failure
            }
            if first == inFlight.count {
                guard !waiting.isEmpty else { return nil }
                startWaiting()
            }
            let task = inFlight[first]
            first += 1
            if first == inFlight.count {
                inFlight.removeAll(keepingCapacity: true)
                first = 0
            } else if first > 64 {
                inFlight.removeFirst(first)
                first = 0
            }
            ready = await task.value
            readyIndex = 0
        }
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
        waiting.removeAll()
        waitingBytes = 0
        for chunk in ready.chunks[readyIndex...] { pool.recycle(chunk.buffer) }
        ready = Batch()
        readyIndex = 0
        count = 0
    }

    /// Hands the waiting chunks to a task of their own.
    private mutating func startWaiting() {
        guard !waiting.isEmpty else { return }
        let group = waiting
        waiting.removeAll(keepingCapacity: true)
        waitingBytes = 0
        let pool = self.pool
        inFlight.append(Task.detached { Self.run(group, pool: pool) })
    }

    /// Inflates and checks `group`'s chunks in order, up to the first that fails, then hashes those with states together.
    private static func run(_ group: [Waiting], pool: Pool) -> Batch {
        var batch = Batch()
        batch.chunks.reserveCapacity(group.count)
        for (position, waiting) in group.enumerated() {
            do {
                try Task.checkCancellation()
                batch.chunks.append(try inflate(waiting.chunk, hashFrom: waiting.hashFrom, pool: pool))
            } catch {
                batch.failure = error
                batch.skipped = group.count - position - 1
                break
            }
        }
        let stated = batch.chunks.indices.filter { batch.chunks[$0].hashed != nil }
        if !stated.isEmpty {
            var hashers = stated.map { batch.chunks[$0].hashed! }
            SHA256Hasher.update(lanes: &hashers, with: stated.map { batch.chunks[$0].bytes })
            for (hasher, index) in zip(hashers, stated) { batch.chunks[index].hashed = hasher }
        }
        return batch
    }

    /// `chunk` inflated and checked, in a buffer from the pool (`hashed`: still `hashFrom`, before its bytes).
    private static func inflate(
        _ chunk: ContentV1.DownloadChunk, hashFrom: SHA256Hasher?, pool: Pool
    ) throws -> Inflated {
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
                        throw KioskError(
                            .downloadFailed,
                            "chunk \(chunk.index) does not inflate: \((error as? WireError)?.message ?? "\(error)")")
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
        return Inflated(
            index: chunk.index, offset: chunk.offset, buffer: buffer, count: length,
            hashed: hashFrom, hashedFrom: hashFrom?.state)
    }

    /// Buffers and inflaters, reused from chunk to chunk.
    final class Pool: Sendable {
        private let state = NIOLockedValueBox<(buffers: [ChunkBuffer], inflaters: [UncheckedInflater], limit: Int)>(
            ([], [], 16))

        /// Keeps up to `limit` buffers for reuse (what the pipeline has out at once, at most).
        func keep(_ limit: Int) {
            state.withLockedValue { $0.limit = max(limit, 4) }
        }

        func buffer(capacity: Int) -> ChunkBuffer {
            let reused = state.withLockedValue { state -> ChunkBuffer? in
                guard let index = state.buffers.lastIndex(where: { $0.memory.count >= capacity }) else { return nil }
                return state.buffers.remove(at: index)
            }
            return reused ?? ChunkBuffer(capacity: capacity)
        }

        func recycle(_ buffer: ChunkBuffer) {
            // Anything past what the pipeline has out at once (``keep(_:)``) is let go.
            state.withLockedValue { if $0.buffers.count < $0.limit { $0.buffers.append(buffer) } }
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
