import Foundation
import KioskAPI
import KioskRPC
@testable import KioskStore
import KioskWire
import NIOConcurrencyHelpers
import Testing

/// A clock tests can move.
final class TestClock: Sendable {
    private let value: NIOLockedValueBox<Int64>
    init(_ start: Int64 = 1_800_000_000_000) { value = NIOLockedValueBox(start) }
    var now: Int64 { value.withLockedValue { $0 } }
    func advance(byMs ms: Int64) { value.withLockedValue { $0 += ms } }
}

let testCatalog = Catalog(bundleID: "com.example.monkeys", products: [
    CatalogProduct(id: "credits.5", type: .consumable, title: "5 Credits", description: "", price: "0.99", currency: "USD",
                   credits: 5, maxQuantity: 10, hostedContent: false, subscriptionPeriod: nil),
    CatalogProduct(id: "credits.10", type: .consumable, title: "10 Credits", description: "", price: "1.79", currency: "USD",
                   credits: 10, maxQuantity: 10, hostedContent: false, subscriptionPeriod: nil),
    CatalogProduct(id: "filter.sepia", type: .nonConsumable, title: "Sepia", description: "A filter", price: "2.99", currency: "USD",
                   credits: 0, maxQuantity: 1, hostedContent: false, subscriptionPeriod: nil),
    CatalogProduct(id: "pro.monthly", type: .autoRenewableSubscription, title: "Pro", description: "", price: "4.99", currency: "USD",
                   credits: 0, maxQuantity: 1, hostedContent: false, subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M")),
])

let goodCard = "test-card:4242424242424242"
/// What ``LiveCardProcessor`` charges: a production store refuses test cards.
let liveCard = "card:live-visa"

/// A processor that counts as real (a production store accepts it) and charges `card:` methods.
struct LiveCardProcessor: PaymentProcessor {
    var name: String { "live-test" }
    var isSimulated: Bool { false }
    func charge(_ request: PaymentRequest) async -> PaymentOutcome {
        request.paymentMethod.hasPrefix("card:") ? .succeeded(reference: "live_" + request.paymentID) : .declined(reason: "invalid_payment_method", message: "not a card")
    }
    func approve(_ request: PaymentRequest) async -> PaymentOutcome { .succeeded(reference: "live_" + request.paymentID) }
    func lookup(_ request: PaymentRequest) async -> PaymentLookup { .notCharged }
    func refund(_ request: PaymentRequest, reason: String) async {}
}

func temporaryDirectory() -> String {
    let path = NSTemporaryDirectory() + "kiosk-store-test-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// The ledger backend the store's tests run on: the embedded SQLite (default) or, with
/// `KIOSK_TEST_LEDGER=postgres` in the environment, a throwaway PostgreSQL cluster this
/// test process starts (`Scripts/postgres.sh`), with a database of its own per data dir.
enum TestLedger {
    static let kind = ProcessInfo.processInfo.environment["KIOSK_TEST_LEDGER"] ?? "sqlite"
    static var isPostgres: Bool { kind == "postgres" }

    private static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Scripts/postgres.sh").path
    /// The cluster's URL, started on first use; stopped by its watchdog when this process exits.
    private static let cluster: Result<String, any Error> = Result {
        let output = try run(script, "start", String(ProcessInfo.processInfo.processIdentifier))
        guard let url = output.split(separator: " ").first else { throw StoreError(.internalFailure, "postgres.sh start printed nothing") }
        return String(url)
    }
    private static let databases = NIOLockedValueBox<[String: PostgresLocation]>([:])

    /// The PostgreSQL database for `dataDirectory` (created the first time), or nil on SQLite.
    static func database(for dataDirectory: String) throws -> PostgresLocation? {
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
            throw StoreError(.internalFailure, "\(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// The ledger of a data dir on the tests' backend.
func testLedger(directory: String) throws -> Ledger {
    try TestLedger.database(for: directory).map { try Ledger(postgres: $0) } ?? Ledger(directory: directory)
}

extension StoreConfiguration {
    /// This configuration on the tests' ledger backend (``TestLedger``): unchanged on SQLite,
    /// with the data dir's PostgreSQL database otherwise.
    func onTestLedger() throws -> StoreConfiguration {
        var configuration = self
        configuration.database = try TestLedger.database(for: dataDirectory)
        return configuration
    }
}

/// A store served on 127.0.0.1 (ephemeral port) with a client, for one test.
struct StoreFixture {
    let server: StoreServer
    let client: RPCClient
    let clock: TestClock
    let dataDirectory: String
    var store: Store { server.store }

    static func with<R>(
        environment: StoreEnvironment = .sandbox, dataDirectory: String = temporaryDirectory(),
        keyEncryptionKey: KeyEncryptionKey? = nil,
        _ body: (StoreFixture) async throws -> R
    ) async throws -> R {
        let clock = TestClock()
        var configuration = try StoreConfiguration(
            dataDirectory: dataDirectory, catalog: testCatalog, environment: environment,
            paymentProcessor: environment == .production ? LiveCardProcessor() : SimulatedPaymentProcessor(),
            revocationPollInterval: .milliseconds(50), clock: { clock.now }).onTestLedger()
        configuration.keyEncryptionKey = keyEncryptionKey
        let server = try StoreServer(store: configuration)
        try await server.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(server.port))
        let fixture = StoreFixture(server: server, client: client, clock: clock, dataDirectory: dataDirectory)
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        do {
            let result = try await body(fixture)
            await client.close()
            await server.shutdown()
            return result
        } catch {
            await client.close()
            await server.shutdown()
            throw error
        }
    }

    func newAccount(paymentsAllowed: Bool = true) throws -> String {
        try store.createAccount(paymentsAllowed: paymentsAllowed).token
    }

    func call<Request: WireMessage, Response: WireMessage>(
        _ method: String, _ request: Request, as response: Response.Type = Response.self, token: String?, key: String? = nil,
        on client: RPCClient? = nil
    ) async throws -> Response {
        var metadata = Metadata()
        if let token { metadata.add("authorization", "Bearer \(token)") }
        if let key { metadata.add("idempotency-key", key) }
        return try await (client ?? self.client).unary("/kiosk.store.v1.Store/\(method)", request: request, response: response,
                                                      options: CallOptions(timeout: .seconds(20), metadata: metadata))
    }

    func buy(_ product: String, quantity: UInt32 = 1, method: String = goodCard, token: String, key: String? = UUID().uuidString,
             on client: RPCClient? = nil) async throws -> StoreV1.PurchaseResponse {
        try await call("Purchase", StoreV1.PurchaseRequest(productID: product, quantity: quantity, paymentMethod: method),
                       as: StoreV1.PurchaseResponse.self, token: token, key: key, on: client)
    }

    func balance(_ token: String) async throws -> UInt64 {
        try await call("GetAccount", StoreV1.GetAccountRequest(), as: StoreV1.Account.self, token: token).creditBalance
    }

    func verify(_ receipt: [UInt8], token: String) async throws -> StoreV1.VerifyReceiptResponse {
        try await call("VerifyReceipt", StoreV1.VerifyReceiptRequest(signedReceipt: receipt), as: StoreV1.VerifyReceiptResponse.self, token: token)
    }

    func restore(token: String, on client: RPCClient? = nil) async throws -> [StoreV1.Transaction] {
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        var out: [StoreV1.Transaction] = []
        for try await transaction in (client ?? self.client).serverStreaming(
            "/kiosk.store.v1.Store/Restore", request: StoreV1.RestoreRequest(), response: StoreV1.Transaction.self,
            options: CallOptions(timeout: .seconds(20), metadata: metadata)) {
            out.append(transaction)
        }
        return out
    }
}

/// The next real revocation of a `WatchRevocations` stream, skipping heartbeats.
func nextRevocation(_ feed: inout ResponseStream<StoreV1.Revocation>.AsyncIterator) async throws -> StoreV1.Revocation? {
    while let revocation = try await feed.next() {
        if !revocation.transactionID.isEmpty { return revocation }
    }
    return nil
}
