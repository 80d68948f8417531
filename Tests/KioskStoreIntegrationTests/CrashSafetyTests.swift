import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// A `kiosk-store serve` child process.
final class StoreProcess: Sendable {
    let process: Process
    let port: Int

    /// The `kiosk-store` binary SwiftPM built next to this test bundle.
    static var binary: String {
        let me =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent("kiosk-store").path
    }

    static var exampleCatalog: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Scripts/examples/catalog.json").path
    }

    /// On the PostgreSQL test ledger, `KIOSK_STORE_DATABASE` naming the database of the command's `--data-dir`.
    static func ledgerEnvironment(_ arguments: [String]) throws -> [String: String] {
        guard let flag = arguments.firstIndex(of: "--data-dir"), flag + 1 < arguments.count,
            let location = try TestLedger.database(for: arguments[flag + 1])
        else { return [:] }
        var environment = ["KIOSK_STORE_DATABASE": location.description]
        if case .verifyFull(let caFile?) = location.security { environment["KIOSK_STORE_DATABASE_CA"] = caFile }
        return environment
    }

    /// Runs a `kiosk-store` command to completion and returns its standard output.
    static func run(_ arguments: [String]) async throws -> String {
        let result = try await outcome(arguments)
        #expect(result.status == 0, "kiosk-store \(arguments.joined(separator: " ")) failed: \(result.errors)")
        return result.output
    }

    /// Runs `kiosk-store` to its end: exit status, standard output and standard error.
    static func outcome(
        _ arguments: [String], environment: [String: String] = [:]
    ) async throws -> (status: Int32, output: String, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        let environment = try environment.merging(ledgerEnvironment(arguments)) { mine, _ in mine }
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let out = output.fileHandleForReading.readDataToEndOfFile()
                let err = errors.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(
                    returning: (
                        process.terminationStatus, String(decoding: out, as: UTF8.self),
                        String(decoding: err, as: UTF8.self)
                    ))
            }
        }
    }

    /// Starts `kiosk-store serve` on an ephemeral port and waits for its "listening" line; its standard error goes
    /// to `errorLog` when given (a later `--log-level` in `extraArguments` overrides the quiet default).
    init(
        dataDirectory: String, extraArguments: [String] = [], environment extra: [String: String] = [:],
        errorLog: String? = nil
    ) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments =
            [
                "serve", "--data-dir", dataDirectory, "--catalog", Self.exampleCatalog, "--port", "0", "--log-level",
                "error",
            ] + extraArguments
        if let errorLog {
            FileManager.default.createFile(atPath: errorLog, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: errorLog)
        }
        let environment = try Self.ledgerEnvironment(process.arguments ?? []).merging(extra) { $1 }
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let line = await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
            DispatchQueue.global().async {
                var bytes: [UInt8] = []
                while true {
                    let chunk = output.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    bytes += chunk
                    if bytes.contains(UInt8(ascii: "\n")) { break }
                }
                continuation.resume(returning: String(decoding: bytes, as: UTF8.self))
            }
        }
        // "kiosk-store listening on 127.0.0.1:PORT (sandbox, 6 products)"
        guard let address = line.split(separator: " ").dropFirst(3).first,
            let port = address.split(separator: ":").last.flatMap({ Int($0) })
        else {
            process.terminate()
            throw StoreError(.internalFailure, "kiosk-store did not report its port: \(line)")
        }
        self.process = process
        self.port = port
    }

    func signal(_ number: Int32) async {
        kill(process.processIdentifier, number)
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.process.waitUntilExit()
                continuation.resume()
            }
        }
    }
}

@Suite(.timeLimit(.minutes(2))) struct CrashSafetyTests {
    static let purchases = 120
    static func quantity(_ index: Int) -> UInt32 { UInt32(index % 3 + 1) }

    func purchase(_ client: RPCClient, token: String, index: Int) async throws -> StoreV1.PurchaseResponse {
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        metadata.add("idempotency-key", "crash-\(index)")
        return try await client.unary(
            "/kiosk.store.v1.Store/Purchase",
            request: StoreV1.PurchaseRequest(
                productID: "credits.5", quantity: Self.quantity(index), paymentMethod: goodCard),
            response: StoreV1.PurchaseResponse.self, options: CallOptions(timeout: .seconds(10), metadata: metadata))
    }

    @Test func sigkillMidStreamLosesNoAnsweredPurchaseAndRetriesChargeOnce() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let created = try await StoreProcess.run(["account", "create", "--data-dir", directory, "--json"])
        let token = try #require(
            created.split(separator: "\"").drop { $0 != "token" }.dropFirst(2).first.map(String.init))

        // Phase 1: purchases from 8 concurrent workers; SIGKILL once 30 are answered.
        let first = try await StoreProcess(dataDirectory: directory)
        let client = RPCClient(
            host: "127.0.0.1", port: first.port,
            configuration: ClientConfiguration(
                backoff: ConnectionBackoff(
                    initial: .milliseconds(5), maximum: .milliseconds(5), multiplier: 1, jitter: 0, maximumAttempts: 1))
        )
        let answered = NIOLockedValueBox<[Int: String]>([:])
        let next = NIOLockedValueBox(0)
        let killed = NIOLockedValueBox(false)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    while true {
                        let index = next.withLockedValue { value -> Int? in
                            guard value < Self.purchases else { return nil }
                            value += 1
                            return value - 1
                        }
                        guard let index, !killed.withLockedValue({ $0 }) else { return }
                        guard let response = try? await purchase(client, token: token, index: index) else { return }
                        let count = answered.withLockedValue { answers -> Int in
                            answers[index] =
                                response.transaction?.state == .purchased
                                ? (response.transaction?.transactionID ?? "") : ""
                            return answers.count
                        }
                        if count == 30,
                            killed.withLockedValue({ value in
                                defer { value = true }
                                return !value
                            })
                        {
                            await first.signal(SIGKILL)
                        }
                    }
                }
            }
        }
        await client.close()
        let beforeCrash = answered.withLockedValue { $0 }
        #expect(beforeCrash.count >= 30)
        #expect(beforeCrash.count < Self.purchases, "the kill came mid-stream")
        #expect(beforeCrash.values.allSatisfy { !$0.isEmpty }, "every answer was PURCHASED")

        // Phase 2: restart on the same data dir.
        let second = try await StoreProcess(dataDirectory: directory)
        let ledger = try testLedger(directory: directory)
        let account = try #require(try await ledger.account(tokenHash: Store.hash(token)))
        let recorded = try ledger.transactions(accountID: account.id)
        let recordedIDs = Set(recorded.map(\.id))
        for (index, transactionID) in beforeCrash {
            #expect(
                recordedIDs.contains(transactionID), "answered purchase \(index) (\(transactionID)) is in the ledger")
        }
        // One read: the restarted store may be recording a charge it found pending (start-up reconciliation) meanwhile.
        let sums = try ledger.balanceAndMovements(accountID: account.id)
        #expect(sums.balance == sums.movements)

        // Phase 3: retry every purchase with its key: answered ones replay, the rest charge exactly once.
        let retryClient = RPCClient(host: "127.0.0.1", port: second.port)
        for index in 0..<Self.purchases {
            let response = try await purchase(retryClient, token: token, index: index)
            #expect(response.transaction?.state == .purchased)
            if let original = beforeCrash[index] {
                #expect(response.replayed)
                #expect(response.transaction?.transactionID == original)
            }
        }
        await retryClient.close()
        let final = try ledger.transactions(accountID: account.id)
        #expect(final.count == Self.purchases, "one transaction per idempotency key")
        // Each purchase and its PURCHASED event were committed together, across the kill: one event per transaction, no other.
        let events = try await ledger.events(
            after: 0, limit: 10 * Self.purchases, accountID: account.id, types: [.purchased])
        #expect(events.count == final.count && Set(events.map(\.transactionID)) == Set(final.map(\.id)))
        let expectedCredits = (0..<Self.purchases).reduce(UInt64(0)) { $0 + UInt64(Self.quantity($1)) * 5 }
        let settled = try #require(try ledger.account(id: account.id))
        #expect(settled.creditBalance == expectedCredits)
        #expect(try ledger.creditMovementsTotal(accountID: account.id) == Int64(expectedCredits))
        await second.signal(SIGTERM)
    }
}
