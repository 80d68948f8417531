import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

/// A PostgreSQL that stops answering (SIGSTOP on the whole cluster) costs the calls that need it a quick
/// 14 UNAVAILABLE, within their deadline, and nothing else: calls that need no database are answered
/// meanwhile, and the ledger serves again once the database does. Runs on the PostgreSQL pass of the test
/// command (`KIOSK_TEST_LEDGER=postgres`); on SQLite there is no network database to stall.
@Suite struct PostgresStallTests {
    /// The cluster's postmaster and its children (every backend), read from the server itself.
    static func clusterProcesses(_ ledger: Ledger) throws -> [pid_t] {
        let directory = try #require(
            try ledger.backend.read { db in
                try db.value(String.self, "SELECT current_setting('data_directory')", [])
            })
        let pidFile = try String(contentsOfFile: directory + "/postmaster.pid", encoding: .utf8)
        let postmaster = try #require(pid_t(pidFile.split(separator: "\n").first.map(String.init) ?? ""))
        var processes = [postmaster]
        for entry in try FileManager.default.contentsOfDirectory(atPath: "/proc") {
            guard let pid = pid_t(entry),
                let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            // pid (comm) state ppid …
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, pid_t(fields[1]) == postmaster { processes.append(pid) }
        }
        return processes
    }

    @Test func aStalledDatabaseFailsItsCallsFastAndNoOthers() async throws {
        guard TestLedger.isPostgres else { return }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: testCatalog, paymentProcessor: SimulatedPaymentProcessor(),
            revocationPollInterval: .milliseconds(50)
        ).onTestLedger()
        configuration.databaseTimeout = .seconds(1)
        let server = try StoreServer(store: configuration)
        try await server.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(server.port))
        let token = try server.store.createAccount().token
        func call<Response: WireMessage>(
            _ method: String, _ request: some WireMessage, _: Response.Type, token: String? = nil,
            timeout: Duration = .seconds(10)
        ) async throws -> Response {
            var metadata = Metadata()
            if let token { metadata.add("authorization", "Bearer \(token)") }
            return try await client.unary(
                "/kiosk.store.v1.Store/\(method)", request: request, response: Response.self,
                options: CallOptions(timeout: timeout, metadata: metadata))
        }
        // Healthy first.
        #expect(
            try await call("PublicKeys", StoreV1.PublicKeysRequest(), StoreV1.PublicKeysResponse.self).keys.count >= 1)

        let processes = try Self.clusterProcesses(server.store.ledger)
        for pid in processes { kill(pid, SIGSTOP) }
        var resumed = false
        defer { if !resumed { for pid in processes { kill(pid, SIGCONT) } } }

        // Eight unauthenticated calls that need the database, at once.
        let stalled = (0..<8).map { _ in
            Task { () -> StatusCode? in
                do {
                    _ = try await call("PublicKeys", StoreV1.PublicKeysRequest(), StoreV1.PublicKeysResponse.self)
                    return .ok
                } catch let error as RPCError {
                    return error.code
                }
            }
        }
        // A call that needs no database is answered meanwhile, well within a deadline shorter than the stall.
        let products = try await call(
            "ListProducts", StoreV1.ListProductsRequest(productIDs: ["credits.5"]), StoreV1.ListProductsResponse.self,
            timeout: .seconds(3))
        #expect(products.products.map(\.id) == ["credits.5"])
        // Every call that needed the database: 14 within its 10 s deadline, not a deadline, not a hang.
        var codes: [StatusCode?] = []
        for task in stalled { codes.append(try await task.value) }
        #expect(codes.allSatisfy { $0 == .unavailable }, "\(codes)")
        // A purchase too: refused 14, nothing half-written.
        let purchase = await #expect(throws: RPCError.self) {
            try await call(
                "Purchase", StoreV1.PurchaseRequest(productID: "filter.sepia", quantity: 1, paymentMethod: goodCard),
                StoreV1.PurchaseResponse.self, token: token)
        }
        #expect(purchase?.code == .unavailable, "\(String(describing: purchase))")

        for pid in processes { kill(pid, SIGCONT) }
        resumed = true
        // The database answers again: within a few fail-fast windows the ledger serves (bounded polling).
        var recovered = false
        for _ in 0..<100 where !recovered {
            if (try? await call(
                "PublicKeys", StoreV1.PublicKeysRequest(), StoreV1.PublicKeysResponse.self, timeout: .seconds(5)))
                != nil
            {
                recovered = true
            } else {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(recovered)
        let bought = try await call(
            "Purchase", StoreV1.PurchaseRequest(productID: "filter.sepia", quantity: 1, paymentMethod: goodCard),
            StoreV1.PurchaseResponse.self, token: token)
        #expect(bought.transaction?.state == .purchased)
        await client.close()
        await server.shutdown()
    }
}
