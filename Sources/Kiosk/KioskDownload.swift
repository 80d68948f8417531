import Foundation
import KioskAPI
import KioskRPC
import KioskWire
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// The state of a download, as StoreKit's `SKDownload` states.
public enum DownloadState: Hashable, Sendable {
    /// Not started yet.
    case waiting
    /// Bytes are arriving.
    case active
    /// Stopped by ``KioskDownload/pause()``; ``KioskDownload/resume()`` goes on.
    case paused
    /// Done: the file is in place at `path`, its SHA-256 checked.
    case finished(path: String)
    /// Stopped by an error (the events end); what was downloaded is kept, and a
    /// new download of the same product resumes from it.
    case failed(KioskError)
    /// Stopped by ``KioskDownload/cancel()``; the partial file is removed.
    case cancelled
}

/// One step of a download.
public struct DownloadEvent: Hashable, Sendable {
    /// The state.
    public var state: DownloadState
    /// Bytes of the file downloaded so far.
    public var bytesDone: UInt64
    /// Size of the file (0 until the header arrived).
    public var totalBytes: UInt64
    /// `bytesDone / totalBytes`, 0…1.
    public var progress: Double { totalBytes == 0 ? (isFinished ? 1 : 0) : Double(bytesDone) / Double(totalBytes) }
    /// Time left at the current rate, when there is a rate.
    public var estimatedTimeRemaining: Duration?

    var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }
}

/// Bytes fetched between two saves of a download's progress (or a second, whichever comes first).
private let progressSaveBytes: UInt64 = 8 << 20
/// The largest chunk a download accepts, whatever the content service says (its own limit is 16 MiB).
private let largestChunk: UInt32 = 16 << 20

/// What is remembered beside a partial download, so it resumes after a restart.
private struct PartialState: Codable, Hashable {
    var productID: String
    var version: String
    var sha256: String
    var totalSize: UInt64
    var chunkSize: UInt32
    var bytesDone: UInt64
}

/// A download of a hosted product's file: events, pause, resume, cancel.
///
/// The file is written to a hidden temporary name in the destination
/// directory, checked against the SHA-256 the content service announced, then
/// renamed into place (atomic on one file system). Every few MiB (or every
/// second) the progress is saved beside it — the bytes it claims fsynced
/// first — so a broken download, even one broken by a crash, resumes from
/// its last save with the same receipt.
///
/// What the download writes is private to the user: the partial file, its
/// saved progress and so the finished file are 0600, a destination directory
/// it has to create is 0700, and each rename or removal is followed by an
/// fsync of the directory.
public final class KioskDownload: Sendable {
    /// The product.
    public let productID: String
    /// Where the finished file goes.
    public let destination: URL
    /// The download's events, from `waiting` to `finished`, `failed` or `cancelled`.
    public let events: AsyncStream<DownloadEvent>

    private let continuation: AsyncStream<DownloadEvent>.Continuation
    private let client: KioskClient
    private let receipt: [UInt8]
    private let partialURL: URL
    private let stateURL: URL
    private struct State {
        /// The running fetch.
        var task: Task<Void, Never>?
        /// A paused fetch winding down (it emits `.paused` when it has); a resume waits for it.
        var stopping: Task<Void, Never>?
        var last = DownloadEvent(state: .waiting, bytesDone: 0, totalBytes: 0)
        var done = false
        /// Set by ``cancel()``: nothing starts again.
        var cancelled = false
        /// Callers of `result()`, resumed when the download ends.
        var waiters: [CheckedContinuation<URL, Error>] = []
    }

    private let state = NIOLockedValueBox(State())

    init(client: KioskClient, productID: String, receipt: [UInt8], directory: URL) {
        self.client = client
        self.productID = productID
        self.receipt = receipt
        // Product ids hold only letters, digits, '.', '_' and '-'; keep them off hidden names.
        let name = productID.hasPrefix(".") || productID.isEmpty ? "product-" + productID : productID
        self.destination = directory.appendingPathComponent(name)
        self.partialURL = directory.appendingPathComponent(".\(name).kiosk-partial")
        self.stateURL = directory.appendingPathComponent(".\(name).kiosk-partial.json")
        (events, continuation) = AsyncStream.makeStream(of: DownloadEvent.self)
        continuation.yield(DownloadEvent(state: .waiting, bytesDone: 0, totalBytes: 0))
        start()
    }

    /// Stops fetching and keeps what was downloaded; ``resume()`` goes on from there.
    public func pause() {
        state.withLockedValue { state in
            guard !state.done, let task = state.task else { return }
            state.task = nil
            task.cancel()
            state.stopping = Task {
                await task.value
                emit(.paused)
            }
        }
    }

    /// Goes on after ``pause()``, from the last complete chunk.
    public func resume() {
        let paused = state.withLockedValue { !$0.done && !$0.cancelled && $0.task == nil }
        if paused { start() }
    }

    /// Stops and removes the partial file.
    public func cancel() {
        let (task, stopping) = state.withLockedValue { state in
            defer {
                state.task = nil
                state.cancelled = true
            }
            return (state.task, state.stopping)
        }
        Task {
            task?.cancel()
            await task?.value
            await stopping?.value
            _ = try? PrivateFiles.remove(partialURL.path)
            _ = try? PrivateFiles.remove(stateURL.path)
            finishAll(.cancelled, result: .failure(KioskError(.downloadFailed, "the download was cancelled")))
        }
    }

    /// Waits until the download finishes; returns the file's location.
    /// - Returns: the file URL of the whole, checked file: `directory/productID` in the directory the download was
    ///   started with (every chunk's hash and the file's were checked against what the content service signed).
    /// - Throws: ``KioskError`` when it fails or is cancelled.
    public func result() async throws -> URL {
        try await withCheckedThrowingContinuation { continuation in
            // Checking `done` and queueing happen under one lock: the end cannot slip between them.
            let finished = state.withLockedValue { state -> DownloadEvent? in
                if state.done { return state.last }
                state.waiters.append(continuation)
                return nil
            }
            guard let finished else { return }
            switch finished.state {
            case .finished(let path): continuation.resume(returning: URL(fileURLWithPath: path))
            case .failed(let error): continuation.resume(throwing: error)
            default: continuation.resume(throwing: KioskError(.downloadFailed, "the download was cancelled"))
            }
        }
    }

    // MARK: Running

    private func start() {
        state.withLockedValue { state in
            let previous = state.stopping
            state.stopping = nil
            // A resumed fetch starts once the paused one has wound down (no two writers of the partial file).
            state.task = Task {
                await previous?.value
                await run()
            }
        }
    }

    private func emit(
        _ downloadState: DownloadState, bytesDone: UInt64? = nil, total: UInt64? = nil, remaining: Duration? = nil
    ) {
        let event = state.withLockedValue { state -> DownloadEvent? in
            guard !state.done else { return nil }
            state.last = DownloadEvent(
                state: downloadState, bytesDone: bytesDone ?? state.last.bytesDone,
                totalBytes: total ?? state.last.totalBytes, estimatedTimeRemaining: remaining)
            return state.last
        }
        if let event { continuation.yield(event) }
    }

    private func finishAll(_ downloadState: DownloadState, result: Result<URL, KioskError>) {
        emit(downloadState)
        let waiters = state.withLockedValue { state -> [CheckedContinuation<URL, Error>] in
            guard !state.done else { return [] }
            state.done = true
            defer { state.waiters.removeAll() }
            return state.waiters
        }
        continuation.finish()
        for waiter in waiters { waiter.resume(with: result.mapError { $0 as Error }) }
    }

    private func run() async {
        do {
            let url = try await fetch()
            finishAll(.finished(path: url.path), result: .success(url))
        } catch is CancellationError {
            // Paused or cancelled: the caller emits the state.
        } catch let error as KioskError {
            // Terminal for this download; what was fetched stays on disk, and a new
            // `download(…)` of the same product resumes from it.
            finishAll(.failed(error), result: .failure(error))
        } catch {
            let failure = KioskError(.downloadFailed, "\(error)")
            finishAll(.failed(failure), result: .failure(failure))
        }
    }

    private func savedState() -> PartialState? {
        guard let data = try? Data(contentsOf: stateURL),
            let saved = try? JSONDecoder().decode(PartialState.self, from: data),
            saved.productID == productID,
            let size = (try? FileManager.default.attributesOfItem(atPath: partialURL.path))?[.size] as? NSNumber,
            size.uint64Value >= saved.bytesDone
        else { return nil }
        return saved
    }

    /// - Parameters:
    ///   - mayRenewToken: a refused access token (expired, or its key retired) is renewed once.
    ///   - failovers: how many times a download broken by a lost connection resumes at once on
    ///     another replica (nil: ``RPCClient/lostConnectionRetries``).
    ///   - notReadyRetries: how many more times a replica's 14 UNAVAILABLE answer (one just started that has not
    ///     reached its store yet) is met by asking again after a pause (100 ms doubling: 3.1 s in all).
    private func fetch(mayRenewToken: Bool = true, failovers: Int? = nil, notReadyRetries: Int = 5) async throws -> URL
    {
        let failovers = failovers ?? client.content.lostConnectionRetries
        try PrivateFiles.makeDirectory(destination.deletingLastPathComponent().path, tighteningExisting: false)
        var saved = savedState()
        var offset = saved?.bytesDone ?? 0
        let resumedFrom = offset
        if saved == nil {
            _ = try? PrivateFiles.remove(partialURL.path)
        }
        let stream = client.content.serverStreaming(
            "/kiosk.content.v1.Content/Download",
            request: ContentV1.DownloadRequest(signedReceipt: receipt, productID: productID, resumeOffset: offset),
            response: ContentV1.DownloadPart.self, options: try await client.contentOptions(timeout: .seconds(3600)))
        var file: FileHandle?
        defer { try? file?.close() }
        let started = ContinuousClock.now
        var fetched: UInt64 = 0
        // Progress is saved every few MiB or every second, not per chunk: the bytes it claims are
        // fsynced first, so a crash resumes from the last save (at most that much is fetched again).
        var savedBytes = offset
        var savedAt = ContinuousClock.now
        // The SHA-256 is taken as the bytes arrive (a resumed download reads back only what it already
        // had), not by reading the whole file again at the end: `hasher` holds the file's bytes up to
        // `offset`. When the content service announces each chunk's SHA-256 state, the chunks are hashed
        // on every core from their states, and each state is checked here against the hash of the bytes
        // before it: the same check of the whole file, without one core hashing it all.
        var hasher = SHA256Hasher()
        var chained: Bool?
        // Chunks inflate on every core at once and come back in order; `received` counts what was
        // handed to the pipeline, `offset` what was checked, hashed and written.
        var pipeline = ChunkPipeline()
        var received = offset
        defer { pipeline.cancelAll() }
        func write(_ inflated: ChunkPipeline.Inflated) throws {
            defer { pipeline.recycle(inflated) }
            guard let handle = file, var progress = saved, inflated.offset == offset else {
                throw KioskError(.downloadFailed, "chunk \(inflated.index) arrived out of order")
            }
            if let hashed = inflated.hashed {
                guard inflated.hashedFrom == hasher.blockState else {
                    // The bytes so far do not hash to the state this chunk starts from: a resumed partial
                    // file that is not what the service has is started over; anything else is a mismatch.
                    if offset == resumedFrom, resumedFrom > 0 { throw RestartFromScratch() }
                    throw HashMismatch(index: inflated.index)
                }
                hasher = hashed
            } else {
                hasher.update(inflated.bytes)
            }
            try Self.write(inflated.bytes, to: handle.fileDescriptor, at: offset)
            offset += UInt64(inflated.count)
            fetched += UInt64(inflated.count)
            progress.bytesDone = offset
            saved = progress
            // (The last chunk needs no save: the file is checked and moved into place next.)
            if offset < progress.totalSize,
                offset - savedBytes >= progressSaveBytes || savedAt.duration(to: .now) >= .seconds(1)
            {
                try saveSoon(progress)
            }
            let elapsed = started.duration(to: .now)
            let rate =
                Double(fetched)
                / max(Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18, 0.001)
            let seconds = Double(progress.totalSize - min(offset, progress.totalSize)) / rate
            let remaining = rate > 0 && seconds < 1e9 ? Duration.milliseconds(Int64(seconds * 1000)) : nil
            emit(.active, bytesDone: offset, total: progress.totalSize, remaining: remaining)
        }
        // Saves in the background (an fsync blocks its thread until the disk has the bytes: not the one
        // hashing and writing), one at a time; a final save waits for the one running.
        let saver = ProgressSaver(stateURL: stateURL)
        defer { saver.settle() }
        func saveSoon(_ progress: PartialState) throws {
            guard let file, progress.bytesDone > savedBytes, try saver.start(progress, syncing: file.fileDescriptor)
            else { return }
            savedBytes = progress.bytesDone
            savedAt = .now
        }
        func persist(_ progress: PartialState) throws {
            try saver.wait()
            guard let file, progress.bytesDone > savedBytes else { return }
            try file.synchronize()
            try PrivateFiles.writeAtomically(JSONEncoder().encode(progress), to: stateURL.path)
            savedBytes = progress.bytesDone
            savedAt = .now
        }
        /// Stops, and removes the partial file and its saved progress.
        func discardPartial() {
            pipeline.cancelAll()
            saver.settle()
            try? file?.close()
            file = nil
            _ = try? PrivateFiles.remove(partialURL.path)
            _ = try? PrivateFiles.remove(stateURL.path)
        }
        do {
            for try await part in stream {
                try Task.checkCancellation()
                if let header = part.header {
                    guard file == nil else {
                        throw KioskError(.downloadFailed, "the content service sent a second header")
                    }
                    let sha = header.sha256.hexString
                    if let previous = saved, previous.version != header.contentVersion || previous.sha256 != sha {
                        // The file changed since the partial download: start over.
                        throw RestartFromScratch()
                    }
                    guard header.startOffset == offset else {
                        throw KioskError(
                            .downloadFailed, "the content service resumed at \(header.startOffset), not \(offset)")
                    }
                    guard header.totalSize >= offset else {
                        throw KioskError(
                            .downloadFailed,
                            "the content service resumed at \(offset) a file it says is \(header.totalSize) bytes")
                    }
                    saved = PartialState(
                        productID: productID, version: header.contentVersion, sha256: sha,
                        totalSize: header.totalSize, chunkSize: header.chunkSize, bytesDone: offset)
                    file = try PrivateFiles.openForWriting(partialURL.path)
                    try file?.truncate(atOffset: offset)
                    if offset > 0 { hasher = try Self.sha256(of: partialURL, upTo: offset) }
                    emit(.active, bytesDone: offset, total: header.totalSize)
                }
                guard let chunk = part.chunk else { continue }
                guard file != nil, saved != nil, chunk.offset == received else {
                    throw KioskError(.downloadFailed, "chunk \(chunk.index) arrived out of order")
                }
                guard chunk.originalLength <= min(max(saved?.chunkSize ?? 0, 1 << 20), largestChunk),
                    UInt64(chunk.originalLength) <= (saved?.totalSize ?? 0) - received
                else {
                    throw KioskError(
                        .downloadFailed,
                        "chunk \(chunk.index) claims \(chunk.originalLength) bytes, more than a chunk holds or the file has left"
                    )
                }
                received += UInt64(chunk.originalLength)
                // Inflated (and hashed, with a state) on the other cores while the chunks before it are written here.
                pipeline.submit(chunk, hashFrom: try Self.hashStart(of: chunk, chained: &chained))
                while pipeline.count > pipeline.capacity, let inflated = try await pipeline.next() {
                    try write(inflated)
                }
            }
            pipeline.finish()
            while let inflated = try await pipeline.next() { try write(inflated) }
        } catch let error
            where error is RestartFromScratch || (resumedFrom > 0 && (error as? RPCError)?.code == .outOfRange)
        {
            // The file changed since the partial download (a new version, or a smaller one the saved
            // offset lies beyond), or the partial is not what it was (it does not hash to the state the
            // first chunk after it announces): start over from 0, once.
            client.configuration.logger.warning(
                "download of \(productID): \(error is RestartFromScratch ? "the partial file is not what the content service has" : "the file shrank below the partial") (resumed at \(resumedFrom) bytes); starting over"
            )
            discardPartial()
            return try await fetch(mayRenewToken: mayRenewToken, failovers: failovers, notReadyRetries: notReadyRetries)
        } catch let mismatch as HashMismatch {
            discardPartial()
            throw KioskError(
                .downloadFailed,
                "the downloaded file's SHA-256 does not match: the bytes before chunk \(mismatch.index) do not hash to the SHA-256 state the content service announced for it; the partial file was removed"
            )
        } catch let error as RPCError {
            // What was fetched and checked is kept for the resume (or the retry below); a save that
            // failed ends the download with its error instead: nothing written after it can be trusted.
            pipeline.cancelAll()
            try saver.wait()
            if let progress = saved { try? persist(progress) }
            if Task.isCancelled { throw CancellationError() }
            if error.code == .unauthenticated, mayRenewToken {
                saver.settle()
                try? file?.close()
                file = nil
                client.dropAccessToken()
                return try await fetch(mayRenewToken: false, failovers: failovers, notReadyRetries: notReadyRetries)
            }
            if failovers > 0, KioskClient.isLostConnection(error) {
                // The replica went away: resume from the last saved chunk on the next one.
                saver.settle()
                try? file?.close()
                file = nil
                return try await fetch(
                    mayRenewToken: mayRenewToken, failovers: failovers - 1, notReadyRetries: notReadyRetries)
            }
            if notReadyRetries > 0, error.code == .unavailable, error.source == .remote {
                // A content service that just (re)started answers 14 until it has reached its store, moments later;
                // a download is safe to ask for again (as gRPC retries UNAVAILABLE).
                saver.settle()
                try? file?.close()
                file = nil
                try await Task.sleep(for: .milliseconds(100 << (5 - notReadyRetries)))
                return try await fetch(
                    mayRenewToken: mayRenewToken, failovers: failovers, notReadyRetries: notReadyRetries - 1)
            }
            switch error.code {
            case .permissionDenied, .failedPrecondition, .invalidArgument, .unauthenticated:
                throw KioskError(error.code == .unauthenticated ? .notAuthenticated : .downloadRefused, error.message)
            case .notFound:
                throw KioskError(.notFound, error.message)
            default:
                throw KioskError.from(error, doing: "downloading \(productID)")
            }
        } catch {
            // Paused, cancelled, or a damaged chunk: the checked chunks before it are kept for the resume
            // (unless a save failed: its error ends the download).
            pipeline.cancelAll()
            try saver.wait()
            if let progress = saved { try? persist(progress) }
            throw error
        }
        try Task.checkCancellation()
        guard let done = saved, done.bytesDone == done.totalSize else {
            throw KioskError(.downloadFailed, "the download of \(productID) ended early; resume it")
        }
        try saver.wait()
        try file?.synchronize()
        try file?.close()
        file = nil
        // Check the whole file against the announced SHA-256 (hashed as it was written), then move it into place.
        guard hasher.finalize().hexString == done.sha256 else {
            _ = try? PrivateFiles.remove(partialURL.path)
            _ = try? PrivateFiles.remove(stateURL.path)
            throw KioskError(.downloadFailed, "the downloaded file's SHA-256 does not match; it was removed")
        }
        do {
            try PrivateFiles.rename(partialURL.path, to: destination.path)
        } catch {
            // In place, but only the directory's fsync failed: still a finished download.
            if FileManager.default.fileExists(atPath: partialURL.path) {
                throw KioskError(.downloadFailed, "cannot move the file to \(destination.path): \(error)")
            }
            client.configuration.logger.warning("download of \(productID): \(error)")
        }
        _ = try? PrivateFiles.remove(stateURL.path)
        return destination
    }

    private struct RestartFromScratch: Error {}

    /// Where `chunk` is hashed from: the SHA-256 state it announces, or nil when the stream's chunks are
    /// hashed in order. A stream's chunks all announce their state or none do; the first one decides
    /// (`chained`, nil before it).
    /// - Throws: ``KioskError`` for a stream that stops announcing states, a state that is not 32 bytes,
    ///   or one at an offset that is not a multiple of 64.
    static func hashStart(of chunk: ContentV1.DownloadChunk, chained: inout Bool?) throws -> SHA256Hasher? {
        switch (chunk.sha256State.count, chained) {
        case (0, nil):
            chained = false
            return nil
        case (0, false?), (32, false?):
            return nil
        case (32, _):
            guard let state = SHA256Hasher.State(bytes: chunk.sha256State),
                let hasher = SHA256Hasher(state: state, count: chunk.offset)
            else {
                throw KioskError(
                    .downloadFailed,
                    "the content service announced a SHA-256 state for chunk \(chunk.index) at offset \(chunk.offset), not a multiple of 64"
                )
            }
            chained = true
            return hasher
        case (0, true?):
            throw KioskError(
                .downloadFailed, "the content service stopped announcing SHA-256 states at chunk \(chunk.index)")
        default:
            throw KioskError(
                .downloadFailed,
                "the content service announced a \(chunk.sha256State.count)-byte SHA-256 state for chunk \(chunk.index), not 32 bytes"
            )
        }
    }

    /// The bytes before a chunk do not hash to the SHA-256 state the chunk announces.
    private struct HashMismatch: Error {
        var index: UInt32
    }

    /// Saves a download's progress on a thread of its own: fsyncs the bytes
    /// it claims (written before the save started), then writes the state
    /// file atomically. One save at a time: ``start(_:syncing:)`` declines
    /// while one runs, and ``wait()`` waits for it and reports its failure.
    private final class ProgressSaver: @unchecked Sendable {
        private let stateURL: URL
        private let queue = DispatchQueue(label: "kiosk.download.progress")
        private let lock = NIOLock()
        private var running = false
        private var failure: Error?

        init(stateURL: URL) { self.stateURL = stateURL }

        /// Starts saving `progress`; false when a save is still running (the caller tries again later).
        /// - Throws: the error of an earlier save that failed: once an fsync has failed, no later one
        ///   proves anything (Linux reports a writeback error once), so the download ends.
        func start(_ progress: PartialState, syncing descriptor: Int32) throws -> Bool {
            let started = try lock.withLock { () throws -> Bool in
                if let failure { throw failure }
                guard !running else { return false }
                running = true
                return true
            }
            guard started else { return false }
            let stateURL = self.stateURL
            queue.async {
                var error: Error?
                do {
                    guard fsync(descriptor) == 0 else {
                        throw KioskError(
                            .downloadFailed, "cannot fsync the download: \(String(cString: strerror(errno)))")
                    }
                    try PrivateFiles.writeAtomically(JSONEncoder().encode(progress), to: stateURL.path)
                } catch let caught {
                    error = caught
                }
                self.lock.withLock {
                    self.running = false
                    if let error { self.failure = error }
                }
            }
            return true
        }

        /// Waits for the running save, if any; throws if a save failed (every time: the failure stays).
        func wait() throws {
            queue.sync {}
            if let failure = lock.withLock({ failure }) { throw failure }
        }

        /// Waits for the running save, if any, ignoring its outcome (before the file it fsyncs is closed).
        func settle() {
            queue.sync {}
        }
    }

    /// Writes all of `bytes` at `offset` of the file open as `descriptor`.
    private static func write(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32, at offset: UInt64) throws {
        var done = 0
        while done < bytes.count {
            let written = pwrite(descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            if written < 0 {
                if errno == EINTR { continue }
                throw KioskError(.downloadFailed, "cannot write the download: \(String(cString: strerror(errno)))")
            }
            done += written
        }
    }

    /// A hasher fed with the first `count` bytes of the file at `url`.
    private static func sha256(of url: URL, upTo count: UInt64) throws -> SHA256Hasher {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        var hasher = SHA256Hasher()
        var remaining = count
        while remaining > 0, let data = try handle.read(upToCount: Int(min(remaining, 1 << 20))), !data.isEmpty {
            data.withUnsafeBytes { hasher.update($0) }
            remaining -= UInt64(data.count)
        }
        guard remaining == 0 else {
            throw KioskError(.downloadFailed, "the partial download is shorter than its saved progress")
        }
        return hasher
    }
}
