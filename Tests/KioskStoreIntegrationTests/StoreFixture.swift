import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// A clock tests can move: the core's ``ManualClock``, starting at a fixed time.
typealias TestClock = ManualClock

extension ManualClock {
    convenience init() { self.init(startMs: 1_800_000_000_000) }
    var now: Int64 { nowMs }
}

let testCatalog = Catalog(
    bundleID: "com.example.monkeys",
    products: [
        CatalogProduct(
            id: "credits.5", type: .consumable, title: "5 Credits", description: "", price: "0.99", currency: "USD",
            credits: 5, maxQuantity: 10, hostedContent: false, subscriptionPeriod: nil),
        CatalogProduct(
            id: "credits.10", type: .consumable, title: "10 Credits", description: "", price: "1.79", currency: "USD",
            credits: 10, maxQuantity: 10, hostedContent: false, subscriptionPeriod: nil),
        CatalogProduct(
            id: "filter.sepia", type: .nonConsumable, title: "Sepia", description: "A filter", price: "2.99",
            currency: "USD",
            credits: 0, maxQuantity: 1, hostedContent: false, subscriptionPeriod: nil),
        CatalogProduct(
            id: "pro.monthly", type: .autoRenewableSubscription, title: "Pro", description: "", price: "4.99",
            currency: "USD",
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
        request.paymentMethod.hasPrefix("card:")
            ? .succeeded(reference: "live_" + request.paymentID)
            : .declined(reason: "invalid_payment_method", message: "not a card")
    }
    func approve(_ request: PaymentRequest) async -> PaymentOutcome {
        .succeeded(reference: "live_" + request.paymentID)
    }
    func lookup(_ request: PaymentRequest) async -> PaymentLookup { .notCharged }
    func refund(_ request: PaymentRequest, reason: String) async {}
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
            revocationPollInterval: .milliseconds(50), clock: clock
        ).onTestLedger()
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
        _ method: String, _ request: Request, as response: Response.Type = Response.self, token: String?,
        key: String? = nil,
        on client: RPCClient? = nil
    ) async throws -> Response {
        var metadata = Metadata()
        if let token { metadata.add("authorization", "Bearer \(token)") }
        if let key { metadata.add("idempotency-key", key) }
        return try await (client ?? self.client).unary(
            "/kiosk.store.v1.Store/\(method)", request: request, response: response,
            options: CallOptions(timeout: .seconds(20), metadata: metadata))
    }

    func buy(
        _ product: String, quantity: UInt32 = 1, method: String = goodCard, token: String,
        key: String? = UUID().uuidString,
        on client: RPCClient? = nil
    ) async throws -> StoreV1.PurchaseResponse {
        try await call(
            "Purchase", StoreV1.PurchaseRequest(productID: product, quantity: quantity, paymentMethod: method),
            as: StoreV1.PurchaseResponse.self, token: token, key: key, on: client)
    }

    func balance(_ token: String) async throws -> UInt64 {
        try await call("GetAccount", StoreV1.GetAccountRequest(), as: StoreV1.Account.self, token: token).creditBalance
    }

    func verify(_ receipt: [UInt8], token: String) async throws -> StoreV1.VerifyReceiptResponse {
        try await call(
            "VerifyReceipt", StoreV1.VerifyReceiptRequest(signedReceipt: receipt),
            as: StoreV1.VerifyReceiptResponse.self, token: token)
    }

    func restore(token: String, on client: RPCClient? = nil) async throws -> [StoreV1.Transaction] {
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        var out: [StoreV1.Transaction] = []
        for try await transaction in (client ?? self.client).serverStreaming(
            "/kiosk.store.v1.Store/Restore", request: StoreV1.RestoreRequest(), response: StoreV1.Transaction.self,
            options: CallOptions(timeout: .seconds(20), metadata: metadata))
        {
            out.append(transaction)
        }
        return out
    }
}

/// The next real revocation of a `WatchRevocations` stream, skipping heartbeats.
func nextRevocation(_ feed: inout ResponseStream<StoreV1.Revocation>.AsyncIterator) async throws -> StoreV1.Revocation?
{
    while let revocation = try await feed.next() {
        if !revocation.transactionID.isEmpty { return revocation }
    }
    return nil
}
