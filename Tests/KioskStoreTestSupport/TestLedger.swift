import Foundation
import KioskStore
import NIOConcurrencyHelpers

// What the store's test targets share: scratch directories and the ledger backend they run on.

/// A fresh directory under the system's temporary directory.
public func temporaryDirectory() -> String {
    let path = NSTemporaryDirectory() + "kiosk-store-test-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// The ledger backend the store's tests run on: the embedded SQLite (default) or, with
/// `KIOSK_TEST_LEDGER=postgres` in the environment, a throwaway PostgreSQL cluster this
/// test process starts (`Scripts/postgres.sh`), with a database of its own per data dir.
public enum TestLedger {
    public static let kind = ProcessInfo.processInfo.environment["KIOSK_TEST_LEDGER"] ?? "sqlite"
    public static var isPostgres: Bool { kind == "postgres" }

    private static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Scripts/postgres.sh").path
    /// The cluster's URL, started on first use; stopped by its watchdog when this process exits.
    private static let cluster: Result<String, any Error> = Result {
        let output = try run(script, "start", String(ProcessInfo.processInfo.processIdentifier))
        guard let url = output.split(separator: " ").first else {
            throw StoreError(.internalFailure, "postgres.sh start printed nothing")
        }
        return String(url)
    }
    private static let databases = NIOLockedValueBox<[String: PostgresLocation]>([:])

    /// The PostgreSQL database for `dataDirectory` (created the first time), or nil on SQLite.
    public static func database(for dataDirectory: String) throws -> PostgresLocation? {
        guard isPostgres else { return nil }
        if let known = databases.withLockedValue({ $0[dataDirectory] }) { return known }
        let url = try cluster.get()
        let name = "kiosk_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        _ = try run(script, "createdb", url, name)
        let location = try PostgresLocation(url: url.replacingOccurrences(of: "/postgres", with: "/" + name))
        return databases.withLockedValue { databases in
            if let raced = databases[dataDirectory] { return raced }
            databases[dataDirectory] = location
            return location
        }
    }

    private static func run(_ arguments: String...) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw StoreError(
                .internalFailure, "\(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The ledger of a data dir on the tests' backend.
public func testLedger(directory: String) throws -> Ledger {
    try TestLedger.database(for: directory).map { try Ledger(postgres: $0) } ?? Ledger(directory: directory)
}

extension StoreConfiguration {
    /// This configuration on the tests' ledger backend (``TestLedger``): unchanged on SQLite,
    /// with the data dir's PostgreSQL database otherwise.
    public func onTestLedger() throws -> StoreConfiguration {
        var configuration = self
        configuration.database = try TestLedger.database(for: dataDirectory)
        return configuration
    }
}
