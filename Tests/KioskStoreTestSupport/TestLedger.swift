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
    /// The cluster's URL and its directory, started on first use; stopped by its watchdog when this process exits.
    private static let cluster: Result<(url: String, directory: String), any Error> = Result {
        let output = try run(script, "start", String(ProcessInfo.processInfo.processIdentifier))
        let fields = output.split(separator: " ")
        guard fields.count >= 2 else {
            throw StoreError(.internalFailure, "postgres.sh start printed \"\(output)\"")
        }
        return (String(fields[0]), String(fields[1]))
    }

    /// The cluster's URL (`postgres://kiosk@127.0.0.1:PORT/postgres`).
    public static func clusterURL() throws -> String { try cluster.get().url }

    /// Restarts the cluster (every session ends, as a database restart or failover does), the same options again.
    public static func restartCluster() throws {
        _ = try run(script, "restart", try cluster.get().directory)
    }

    /// The CA that signed the cluster's certificate (which names `localhost` only).
    public static func clusterCA() throws -> String { try cluster.get().directory + "/tls/ca.pem" }
    private static let databases = NIOLockedValueBox<[String: PostgresLocation]>([:])

    /// The PostgreSQL database for `dataDirectory` (created the first time), or nil on SQLite.
    public static func database(for dataDirectory: String) throws -> PostgresLocation? {
        guard isPostgres else { return nil }
        if let known = databases.withLockedValue({ $0[dataDirectory] }) { return known }
        let location = try createDatabase()
        return databases.withLockedValue { databases in
            if let raced = databases[dataDirectory] { return raced }
            databases[dataDirectory] = location
            return location
        }
    }

    /// A new database on the cluster, reached over TLS verified against the cluster's CA (the store's tests run
    /// over it).
    public static func createDatabase() throws -> PostgresLocation {
        let (url, _) = try cluster.get()
        let name = "kiosk_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        _ = try run(script, "createdb", url, name)
        // The cluster's certificate names localhost (Scripts/postgres.sh).
        let database = url.replacingOccurrences(of: "/postgres", with: "/" + name)
            .replacingOccurrences(of: "@127.0.0.1:", with: "@localhost:")
        return try PostgresLocation(url: database, security: .verifyFull(caFile: clusterCA()))
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
