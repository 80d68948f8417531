import Foundation
import KioskTesting
import Logging
import Testing

@testable import Kiosk

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The SDK's local state is private (directories 0700, files 0600), every
/// rename and removal is followed by an fsync of the directory, and a journal
/// file that cannot be used is moved aside and reported instead of skipped.
@Suite(.timeLimit(.minutes(2))) struct PrivateStateTests {
    @Test func stateDirectoryAndEverythingInItArePrivate() async throws {
        // The usual umask, which left the journal, receipts and downloads readable by everyone (0644, 0755).
        let previous = umask(0o022)
        defer { umask(previous) }
        // 16 MiB of noise (64 chunks), so the download is paused well before its end.
        let book = [UInt8]((FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: 16 << 20)) ?? Data())
        try await withSession(content: ["book.swift": book]) { session in
            let state = NSTemporaryDirectory() + "kiosk-private-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            let kiosk = try session.makeClient(account: try session.makeAccount(), stateDirectory: state)
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let receipt = try kiosk.saveReceipt(of: transaction)
            #expect(receipt.path == state + "/receipts/\(transaction.id).receipt")
            #expect(try Data(contentsOf: receipt) == Data(transaction.signedReceipt))

            // A download into the state directory, looked at while paused part way.
            let downloads = URL(fileURLWithPath: state + "/downloads")
            let download = kiosk.download(productID: "book.swift", transaction: transaction, to: downloads)
            var pausedPartWay = false
            for await event in download.events {
                if event.state == .active, event.bytesDone > 0, !pausedPartWay { download.pause() }
                if event.state == .paused {
                    pausedPartWay = true
                    for name in [".book.swift.kiosk-partial", ".book.swift.kiosk-partial.json"] {
                        #expect(try permissions(downloads.appendingPathComponent(name).path) == 0o600, "\(name)")
                    }
                    download.resume()
                }
            }
            #expect(pausedPartWay)
            #expect(try [UInt8](Data(contentsOf: try await download.result())) == book)

            // A payment queued while the store is down: its journal entry stays.
            await session.stopStore()
            #expect(try await kiosk.purchase(productID: "credits.5", paymentMethod: card) == .pending)
            #expect(kiosk.queuedPaymentCount == 1)
            await kiosk.close()

            let (directories, files) = try tree(state)
            #expect(Set(directories) == ["journal", "receipts", "downloads"])
            #expect(files.contains { $0.hasPrefix("journal/") && $0.hasSuffix(".json") })
            #expect(files.contains("receipts/\(transaction.id).receipt"))
            #expect(files.contains("downloads/book.swift"))
            #expect(try permissions(state) == 0o700)
            for directory in directories { #expect(try permissions(state + "/" + directory) == 0o700, "\(directory)") }
            for file in files { #expect(try permissions(state + "/" + file) == 0o600, "\(file)") }
        }
    }

    @Test func anExistingStateDirectoryOpenToOthersIsTightened() async throws {
        try await withSession { session in
            let state = NSTemporaryDirectory() + "kiosk-private-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            try FileManager.default.createDirectory(
                atPath: state + "/journal", withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o755])
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: state)
            #expect(try permissions(state) == 0o755)
            let kiosk = try session.makeClient(account: try session.makeAccount(), stateDirectory: state)
            #expect(try permissions(state) == 0o700)
            #expect(try permissions(state + "/journal") == 0o700)
            guard case .success = try await kiosk.purchase(productID: "credits.5", paymentMethod: card) else {
                Issue.record("expected success")
                return
            }
            await kiosk.close()
        }
    }

    @Test func anUndecodableJournalEntryIsSetAsideReportedAndPaymentsStillFlow() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let state = NSTemporaryDirectory() + "kiosk-private-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            let journal = state + "/journal"
            // A payment queued by an earlier run…
            await session.stopStore()
            let first = try session.makeClient(account: account, stateDirectory: state)
            #expect(try await first.purchase(productID: "credits.10", paymentMethod: card) == .pending)
            await first.close()
            let queued = try #require(
                try FileManager.default.contentsOfDirectory(atPath: journal).first { $0.hasSuffix(".json") })
            // …beside a torn file, and a copy of the entry under another name (its key would be sent forever).
            let torn = Data(#"{"key": "half a paym"#.utf8)
            try torn.write(to: URL(fileURLWithPath: journal + "/torn.json"))
            try FileManager.default.copyItem(atPath: journal + "/" + queued, toPath: journal + "/copy.json")
            try await session.startStore()

            let logs = LogRecorder()
            var configuration = session.configuration(account: account, stateDirectory: state)
            configuration.logger = Logger(label: "kiosk-test") { _ in LogRecorder.Handler(recorder: logs) }
            let second = try KioskClient(configuration: configuration)
            // Moved aside and reported as soon as the client is open.
            let setAside = second.setAsideJournalEntries.sorted { $0.name < $1.name }
            #expect(setAside.map(\.name) == ["copy.json", "torn.json"])
            #expect(setAside.map(\.path) == [journal + "/corrupt/copy.json", journal + "/corrupt/torn.json"])
            #expect(setAside.last?.reason.hasPrefix("not a journal entry") == true)
            #expect(setAside.first?.reason.contains("does not match its file name") == true)
            #expect(
                try Data(contentsOf: URL(fileURLWithPath: journal + "/corrupt/torn.json")) == torn, "its bytes are kept"
            )
            #expect(try permissions(journal + "/corrupt") == 0o700)
            #expect(Set(try FileManager.default.contentsOfDirectory(atPath: journal)) == [queued, "corrupt"])
            let warnings = logs.records.filter { $0.level == .warning }
            for entry in setAside {
                #expect(
                    warnings.contains { $0.message.contains(entry.name) && $0.message.contains(entry.reason) },
                    "\(entry.name)")
            }
            // The queued payment still flows, once.
            let arrived = await next(second.transactionUpdates)
            #expect(arrived?.productID == "credits.10")
            #expect(second.queuedPaymentCount == 0)
            #expect(session.payments.chargeCount == 1)
            #expect(second.setAsideJournalEntries.count == 2, "reported once")
            await second.close()
        }
    }

    @Test func renamesAndRemovalsAreFollowedByAnFsyncOfTheDirectory() async throws {
        let root = NSTemporaryDirectory() + "kiosk-private-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: root) }
        try PrivateFiles.makeDirectory(root + "/sub", tighteningExisting: true)
        let syncs = SyncRecorder()
        // What the directory holds when it is fsynced: the change must be made before.
        let observer: @Sendable (String) -> Void = { path in
            if path.hasPrefix(root) {
                syncs.append(path, (try? FileManager.default.contentsOfDirectory(atPath: path))?.sorted() ?? [])
            }
        }
        try await PrivateFiles.observingDirectorySyncs(observer) {
            try Data("a".utf8).write(to: URL(fileURLWithPath: root + "/a"))
            try PrivateFiles.rename(root + "/a", to: root + "/sub/b")
            #expect(syncs.take() == [Sync(root + "/sub", ["b"]), Sync(root, ["sub"])])

            #expect(try PrivateFiles.remove(root + "/sub/b"))
            #expect(syncs.take() == [Sync(root + "/sub", [])])
            #expect(try PrivateFiles.remove(root + "/sub/b") == false, "nothing to remove")
            #expect(syncs.take() == [], "nothing changed, nothing to fsync")

            try PrivateFiles.writeAtomically(Data("c".utf8), to: root + "/c")
            #expect(syncs.take() == [Sync(root, ["c", "sub"])], "renamed into place, no temporary file left")
            #expect(try permissions(root + "/c") == 0o600)
        }

        // The journal goes through the helper: an entry renamed into place, then removed once answered.
        try await withSession { session in
            let state = root + "/state"
            let journal = state + "/journal"
            let listings = SyncRecorder()
            try await PrivateFiles.observingDirectorySyncs({ path in
                if path == journal {
                    listings.append(path, (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [])
                }
            }) {
                let kiosk = try session.makeClient(account: try session.makeAccount(), stateDirectory: state)
                guard case .success = try await kiosk.purchase(productID: "credits.5", paymentMethod: card) else {
                    Issue.record("expected success")
                    return
                }
                await kiosk.close()
            }
            let seen = listings.take().map { $0.names.filter { $0.hasSuffix(".json") } }
            #expect(seen.count == 2 && seen.first?.count == 1 && seen.last == [], "\(seen)")
        }
    }

    @Test func theCommandLineWarnsOfASetAsideEntryAndKeepsReceiptsPrivate() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let state = NSTemporaryDirectory() + "kiosk-private-cli-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            try FileManager.default.createDirectory(atPath: state + "/journal", withIntermediateDirectories: true)
            try Data("not json".utf8).write(to: URL(fileURLWithPath: state + "/journal/torn.json"))

            let cli = KioskCommandLineTests()
            let bought = try await cli.kiosk(
                ["buy", "credits.5", "--json"], session: session, token: account.token, state: state)
            #expect(bought.status == 0, "\(bought.output) \(bought.errors)")
            #expect(
                bought.errors.contains("kiosk: warning: the queued payment file torn.json cannot be used"),
                "\(bought.errors)")
            #expect(bought.errors.contains(state + "/journal/corrupt/torn.json"))
            let object = try JSONSerialization.jsonObject(with: Data(bought.output.utf8)) as? [String: Any]
            let receipt = try #require(object?["receipt_file"] as? String, "stdout is still JSON alone")
            #expect(try permissions(receipt) == 0o600)
            #expect(try permissions(state + "/receipts") == 0o700)

            let again = try await cli.kiosk(["balance"], session: session, token: account.token, state: state)
            #expect(again.status == 0)
            #expect(!again.errors.contains("warning"), "reported when it is moved aside, not on every run")
        }
    }
}

// MARK: Helpers

/// The permission bits of the file or directory at `path`.
private func permissions(_ path: String) throws -> Int {
    try #require((try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue)
}

/// The directories and files under `root`, as paths relative to it.
private func tree(_ root: String) throws -> (directories: [String], files: [String]) {
    var directories: [String] = []
    var files: [String] = []
    guard let enumerator = FileManager.default.enumerator(atPath: root) else { return ([], []) }
    for case let path as String in enumerator {
        var isDirectory: ObjCBool = false
        _ = FileManager.default.fileExists(atPath: root + "/" + path, isDirectory: &isDirectory)
        if isDirectory.boolValue { directories.append(path) } else { files.append(path) }
    }
    return (directories, files)
}

private struct Sync: Equatable {
    var path: String
    var names: [String]
    init(_ path: String, _ names: [String]) {
        self.path = path
        self.names = names
    }
}

/// The directory fsyncs seen, with what each directory held at the time.
private final class SyncRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var syncs: [Sync] = []

    func append(_ path: String, _ names: [String]) {
        lock.withLock { syncs.append(Sync(path, names)) }
    }

    /// The syncs seen since the last call.
    func take() -> [Sync] {
        lock.withLock {
            defer { syncs.removeAll() }
            return syncs
        }
    }
}

/// Log records kept for a test to look at.
private final class LogRecorder: @unchecked Sendable {
    struct Record {
        var level: Logger.Level
        var message: String
    }

    private let lock = NSLock()
    private var kept: [Record] = []

    var records: [Record] { lock.withLock { kept } }

    struct Handler: LogHandler {
        let recorder: LogRecorder
        var metadata: Logger.Metadata = [:]
        var metadataProvider: Logger.MetadataProvider?
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            recorder.lock.withLock {
                recorder.kept.append(Record(level: event.level, message: event.message.description))
            }
        }
    }
}
