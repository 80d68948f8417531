import Crypto
import Foundation
import KioskAPI
import KioskContent
import KioskTesting
import NIOConcurrencyHelpers
import Testing

@testable import Kiosk

@Suite(.timeLimit(.minutes(2))) struct SDKDownloadTests {
    @Test func hostedProductDownloadsWithEventsAndChecksum() async throws {
        try await withSession { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            let hosted = try await kiosk.hostedProducts()
            let book = try #require(hosted.first { $0.productID == "book.swift" })
            #expect(book.product?.displayPrice == "9.99 USD")
            #expect(book.size == 1 << 20)
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            let download = kiosk.download(productID: "book.swift", transaction: transaction, to: directory)
            var states: [DownloadEvent] = []
            for await event in download.events { states.append(event) }
            #expect(states.first?.state == .waiting)
            #expect(states.contains { $0.state == .active && $0.progress > 0 && $0.progress < 1 })
            let last = try #require(states.last)
            #expect(last.state == .finished(path: directory.appendingPathComponent("book.swift").path))
            #expect(last.progress == 1 && last.bytesDone == 1 << 20)
            let file = try await download.result()
            let bytes = try Data(contentsOf: file)
            #expect(Array(SHA256.hash(data: bytes)) == book.sha256)
            #expect([UInt8](bytes) == KioskTestSession.sampleContent["book.swift"])
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["book.swift"],
                "no temporary files left")
            try await kiosk.finish(transaction)
            await kiosk.close()
        }
    }

    /// Progress is saved every 8 MiB (or second), each save fsyncing the data it claims, not after every chunk:
    /// a 32 MiB download (128 chunks) saves a handful of times.
    @Test func progressIsSavedEveryFewMiBNotPerChunk() async throws {
        let book = [UInt8]((FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: 32 << 20)) ?? Data())
        try await withSession(content: ["book.swift": book]) { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            let saves = NIOLockedValueBox(0)
            let started = ContinuousClock.now
            let file = try await PrivateFiles.observingDirectorySyncs({ path in
                if path == directory.path { saves.withLockedValue { $0 += 1 } }
            }) {
                try await kiosk.download(productID: "book.swift", transaction: transaction, to: directory).result()
            }
            let seconds = Int(started.duration(to: .now).components.seconds)
            #expect([UInt8](try Data(contentsOf: file)) == book)
            // 4 saves by size, one a second at most by time, and the final rename: far below 128.
            #expect(
                saves.withLockedValue { $0 } <= 4 + seconds + 2,
                "\(saves.withLockedValue { $0 }) directory syncs in \(seconds) s")
            await kiosk.close()
        }
    }

    /// The SHA-256 is taken as bytes arrive; a resume reads back what was already there, so a byte damaged on disk
    /// before the resume is not carried into the file. With the SHA-256 states the content service announces (its
    /// chunk size a multiple of 64, as the command line's always is) the first chunk after the resume starts from a
    /// state the damaged partial does not hash to: the download starts over and ends with the right file. Without
    /// states (chunks hashed in order) the whole file's check fails at the end and the partial is removed.
    @Test(arguments: [UInt32(256 * 1024), UInt32(256 * 1024 - 1)])
    func aPartialDamagedOnDiskIsCaughtAfterTheResume(chunkSize: UInt32) async throws {
        let book = [UInt8]((FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: 8 << 20)) ?? Data())
        try await withSession(content: ["book.swift": book], chunkSize: chunkSize) { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            let interrupted = kiosk.download(productID: "book.swift", transaction: transaction, to: directory)
            for await event in interrupted.events {
                if event.state == .active, event.bytesDone > 0 { interrupted.pause() }
                if event.state == .paused { break }
            }
            let partial = directory.appendingPathComponent(".book.swift.kiosk-partial")
            let handle = try FileHandle(forUpdating: partial)
            try handle.seek(toOffset: 100)
            let original = try #require(try handle.read(upToCount: 1)?.first)
            try handle.seek(toOffset: 100)
            try handle.write(contentsOf: [original ^ 0xFF])
            try handle.close()

            let resumed = kiosk.download(productID: "book.swift", transaction: transaction, to: directory)
            if chunkSize % 64 == 0 {
                var progress: [UInt64] = []
                for await event in resumed.events where event.state == .active { progress.append(event.bytesDone) }
                #expect((progress.first ?? 0) > 0, "resumed from the partial first")
                #expect(progress.dropFirst().contains(0), "then started over: \(progress.prefix(4))")
                let file = try await resumed.result()
                #expect([UInt8](try Data(contentsOf: file)) == book)
                #expect(!FileManager.default.fileExists(atPath: partial.path))
            } else {
                let error = await #expect(throws: KioskError.self) { _ = try await resumed.result() }
                #expect(
                    error?.code == .downloadFailed && error?.message.contains("SHA-256") == true,
                    "\(String(describing: error))")
                #expect(!FileManager.default.fileExists(atPath: partial.path), "the damaged partial is removed")
                #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("book.swift").path))
            }
            await kiosk.close()
        }
    }

    /// A content service whose announced states do not chain (here a damaged preparation: chunk 5's state altered to
    /// other 32 bytes, which the service cannot tell from a true one) fails the download at that chunk, and removes
    /// the partial: nothing unchecked is kept.
    @Test func statesThatDoNotChainFailTheDownload() async throws {
        let state = String(repeating: "ab", count: 32)
        let message = "the bytes before chunk 5 do not hash to the SHA-256 state the content service announced for it"
        let book = [UInt8]((FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: 4 << 20)) ?? Data())
        let session = try await KioskTestSession.start(content: ["book.swift": book], tls: false)
        do {
            // A second content service over the same prepared files, its index altered on disk first.
            let prepared = session.contentDirectory + "/.kiosk-prepared"
            let indexPath =
                prepared + "/"
                + (try #require(FileManager.default.subpaths(atPath: prepared)?.first { $0.hasSuffix("index.json") }))
            #expect(try Self.alterState(ofChunk: 5, to: state, inIndex: indexPath) == 16)
            let credential = try session.store.createServiceCredential(role: .content, name: "altered").secret
            let altered = try ContentServer(
                configuration: ContentConfiguration(
                    contentDirectory: session.contentDirectory, storePort: session.storePort,
                    storeCredential: credential))
            try await altered.start()
            _ = await altered.waitUntilReady()
            #expect(altered.items.first?.reused == true, "the altered preparation is the one served")

            let account = try session.makeAccount()
            var configuration = session.configuration(
                account: account, stateDirectory: NSTemporaryDirectory() + "kiosk-state-" + UUID().uuidString)
            configuration.contentPort = try #require(altered.port)
            let kiosk = try KioskClient(configuration: configuration)
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            let download = kiosk.download(productID: "book.swift", transaction: transaction, to: directory)
            let error = await #expect(throws: KioskError.self) { _ = try await download.result() }
            #expect(
                error?.code == .downloadFailed && error?.message.contains(message) == true,
                "\(String(describing: error))")
            #expect(
                !FileManager.default.fileExists(
                    atPath: directory.appendingPathComponent(".book.swift.kiosk-partial").path))
            #expect(
                !FileManager.default.fileExists(
                    atPath: directory.appendingPathComponent(".book.swift.kiosk-partial.json").path))
            #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("book.swift").path))
            await kiosk.close()
            await altered.shutdown()
        } catch {
            await session.shutdown()
            throw error
        }
        await session.shutdown()
    }

    /// The first chunk decides whether a stream is hashed from announced states; a stream that then stops announcing
    /// them, a state that is not 32 bytes, or one at an offset that is not a multiple of 64 is refused as the content
    /// service's fault (Kiosk's own service prepares its index again rather than send such states).
    @Test func announcedStatesAreAllOrNoneAndWellFormed() throws {
        let initial = SHA256Hasher.State.initial.bytes
        func chunk(_ index: UInt32, offset: UInt64, state: [UInt8]) -> ContentV1.DownloadChunk {
            ContentV1.DownloadChunk(index: index, offset: offset, originalLength: 64, sha256State: state)
        }
        var chained: Bool?
        #expect(
            try KioskDownload.hashStart(of: chunk(0, offset: 0, state: initial), chained: &chained)?.blockState
                == .initial)
        #expect(chained == true)
        let stopped = #expect(throws: KioskError.self) {
            try KioskDownload.hashStart(of: chunk(1, offset: 64, state: []), chained: &chained)
        }
        #expect(stopped?.message.contains("stopped announcing SHA-256 states at chunk 1") == true)
        let short = #expect(throws: KioskError.self) {
            try KioskDownload.hashStart(of: chunk(1, offset: 64, state: [1, 2, 3]), chained: &chained)
        }
        #expect(short?.message.contains("3-byte SHA-256 state for chunk 1") == true)
        let misaligned = #expect(throws: KioskError.self) {
            try KioskDownload.hashStart(of: chunk(1, offset: 100, state: initial), chained: &chained)
        }
        #expect(misaligned?.message.contains("offset 100, not a multiple of 64") == true)
        // A stream whose first chunk announces nothing is hashed in order; states after it are ignored.
        var inOrder: Bool?
        #expect(try KioskDownload.hashStart(of: chunk(0, offset: 0, state: []), chained: &inOrder) == nil)
        #expect(inOrder == false)
        #expect(try KioskDownload.hashStart(of: chunk(1, offset: 64, state: initial), chained: &inOrder) == nil)
    }

    /// Sets chunk `number`'s SHA-256 state (hex) in a prepared index; returns how many chunks it has.
    static func alterState(ofChunk number: Int, to state: String, inIndex path: String) throws -> Int {
        guard
            var index = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path)))
                as? [String: Any],
            var chunks = index["chunks"] as? [[String: Any]], chunks.count > number
        else {
            throw KioskError(.downloadFailed, "no chunk \(number) in \(path)")
        }
        chunks[number]["sha256State"] = state
        index["chunks"] = chunks
        try JSONSerialization.data(withJSONObject: index).write(to: URL(fileURLWithPath: path))
        return chunks.count
    }

    @Test func interruptedDownloadResumesAfterTheProcessRestarts() async throws {
        // 32 MiB of noise (128 chunks), so the pause lands well before the end even on a loaded machine.
        let book = [UInt8]((FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: 32 << 20)) ?? Data())
        try await withSession(content: ["book.swift": book]) { session in
            let account = try session.makeAccount()
            let first = try session.makeClient(account: account)
            guard
                case .success(let transaction) = try await first.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            // Paused after the first complete chunk, then the "process" goes away.
            let interrupted = first.download(productID: "book.swift", transaction: transaction, to: directory)
            for await event in interrupted.events {
                if event.state == .active, event.bytesDone > 0 {
                    interrupted.pause()
                }
                if event.state == .paused { break }
            }
            await first.close()
            #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("book.swift").path))

            let second = try session.makeClient(account: account)
            let resumed = second.download(productID: "book.swift", transaction: transaction, to: directory)
            var progress: [UInt64] = []
            for await event in resumed.events where event.state == .active { progress.append(event.bytesDone) }
            #expect((progress.first ?? 0) >= 256 * 1024, "resumed from the last complete chunk, not from 0")
            #expect((progress.first ?? 0) < UInt64(book.count))
            // The partial's SHA-256 state, read back from disk, is the one the next chunk announces: no start over.
            #expect(progress == progress.sorted(), "the resume went on without starting over: \(progress.prefix(4))")
            let file = try await resumed.result()
            #expect([UInt8](try Data(contentsOf: file)) == book)
            await second.close()
        }
    }

    /// A partial saved for a bigger version of the file (its offset now past the end) starts over
    /// instead of failing the same way on every attempt.
    @Test func partialPastTheEndOfANewerSmallerFileStartsOver() async throws {
        try await withSession { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let stale =
                #"{"productID":"book.swift","version":"0.9","sha256":"00","totalSize":8388608,"chunkSize":262144,"bytesDone":4194304}"#
            try Data(stale.utf8).write(to: directory.appendingPathComponent(".book.swift.kiosk-partial.json"))
            try Data(repeating: 7, count: 4 << 20).write(
                to: directory.appendingPathComponent(".book.swift.kiosk-partial"))
            let file = try await kiosk.download(productID: "book.swift", transaction: transaction, to: directory)
                .result()
            #expect([UInt8](try Data(contentsOf: file)) == KioskTestSession.sampleContent["book.swift"])
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["book.swift"],
                "the stale partial is gone")
            await kiosk.close()
        }
    }

    @Test func refusedAndCancelledDownloads() async throws {
        // 32 MiB of noise (128 chunks): the cancel lands well before the end.
        let book = [UInt8]((FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: 32 << 20)) ?? Data())
        try await withSession(content: ["book.swift": book]) { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            // Another account's client cannot use this transaction's receipt.
            let thief = try session.makeClient(account: try session.makeAccount())
            let refused = await #expect(throws: KioskError.self) {
                try await thief.download(productID: "book.swift", transaction: transaction, to: directory).result()
            }
            #expect(refused?.code == .downloadRefused)
            // Cancelled once a chunk is on disk: the partial and its state are removed, no file is left.
            let cancelled = kiosk.download(productID: "book.swift", transaction: transaction, to: directory)
            var partialSeen = false
            var lastState: DownloadState?
            for await event in cancelled.events {
                if event.state == .active, event.bytesDone > 0, !partialSeen {
                    partialSeen = FileManager.default.fileExists(
                        atPath: directory.appendingPathComponent(".book.swift.kiosk-partial").path)
                    cancelled.cancel()
                    // A resume right after the cancel starts nothing again (it would write after the cancel's removal).
                    cancelled.resume()
                }
                lastState = event.state
            }
            #expect(partialSeen, "a partial file was being written when the download was cancelled")
            #expect(lastState == .cancelled)
            await #expect(throws: KioskError.self) { try await cancelled.result() }
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
            await kiosk.close()
            await thief.close()
        }
    }
}
