import Foundation
import Kiosk
import KioskAPI
import KioskContent
import KioskRPC
import KioskStore
import NIOConcurrencyHelpers

/// A store and a content service running in-process on 127.0.0.1 (ephemeral
/// ports) for tests, with the knobs a test needs, like StoreKitTest's
/// `SKTestSession`.
///
/// ```swift
/// let session = try await KioskTestSession.start()
/// let account = try session.makeAccount()
/// let kiosk = try session.makeClient(account: account)
/// session.failNextPayment()
/// …
/// await kiosk.close()
/// await session.shutdown()
/// ```
public final class KioskTestSession: Sendable {
    /// An account of the test store.
    public struct Account: Hashable, Sendable {
        /// The account id.
        public var id: String
        /// Its bearer token.
        public var token: String
    }

    /// The catalog sold.
    public let catalog: Catalog
    /// The payment processor (charges counted, next outcomes settable).
    public let payments: TestPaymentProcessor
    /// The store's data directory.
    public let storeDirectory: String
    /// The content directory (manifest and files).
    public let contentDirectory: String
    /// The store's port.
    public let storePort: Int
    /// The content service's port.
    public let contentPort: Int
    /// The content service.
    public let content: ContentServer
    /// The session's development CA (PEM): what clients of its TLS services trust; nil when started without TLS.
    public let trustRootsPath: String?
    private let tls: ServerTLSIdentity?
    private let root: String
    private let storeServer: NIOLockedValueBox<StoreServer?>
    private let holdAnswers: NIOLockedValueBox<Int>
    private let clockOffset: NIOLockedValueBox<Int64>

    /// A sample catalog: `credits.5`, `credits.10`, the photo filter
    /// `filter.sepia`, the hosted book `book.swift` and the subscription `pro.monthly`
    /// (with a one-week free trial as its introductory offer); the entitlement `pro`, granted by `pro.monthly`.
    /// Prices are in USD in the default storefront (USA); `filter.sepia` and `pro.monthly` have prices in the
    /// storefronts FRA (EUR) and JPN (JPY), and `pro.monthly` one in ECU (3.99 USD, below the USA's).
    public static let sampleCatalog = Catalog(
        bundleID: "com.example.monkeys",
        products: [
            CatalogProduct(
                id: "credits.5", type: .consumable, title: "5 Monkey Credits", description: "A handful of credits",
                price: "0.99", currency: "USD", credits: 5, maxQuantity: 10),
            CatalogProduct(
                id: "credits.10", type: .consumable, title: "10 Monkey Credits", description: "A bag of credits",
                price: "1.79", currency: "USD", credits: 10, maxQuantity: 10),
            {
                var sepia = CatalogProduct(
                    id: "filter.sepia", type: .nonConsumable, title: "Sepia Filter",
                    description: "Old photos, new look", price: "2.99", currency: "USD")
                sepia.storefrontPrices = [
                    "FRA": StorefrontPrice(price: "3.49", currency: "EUR"),
                    "JPN": StorefrontPrice(price: "450", currency: "JPY"),
                ]
                return sepia
            }(),
            CatalogProduct(
                id: "book.swift", type: .nonConsumable, title: "The Swift Book",
                description: "Hosted by the content service",
                price: "9.99", currency: "USD", hostedContent: true),
            {
                var pro = CatalogProduct(
                    id: "pro.monthly", type: .autoRenewableSubscription, title: "Pro",
                    description: "Everything, monthly",
                    price: "4.99", currency: "USD", subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"))
                pro.introductoryOffer = OfferTerms(
                    id: OfferTerms.introductoryID, price: "0", period: SubscriptionPeriod(iso8601: "P1W")!, periods: 1)
                pro.storefrontPrices = [
                    "FRA": StorefrontPrice(price: "5.49", currency: "EUR"),
                    "JPN": StorefrontPrice(price: "750", currency: "JPY"),
                    "ECU": StorefrontPrice(price: "3.99", currency: "USD"),
                ]
                return pro
            }(),
        ],
        entitlements: [CatalogEntitlement(id: "pro", title: "Pro", productIDs: ["pro.monthly"])])

    /// The sample hosted file of `book.swift`: 1 MiB of generated text.
    public static let sampleContent: [String: [UInt8]] = {
        let line = Array("Chapter after chapter of The Swift Book, generated for Kiosk's samples.\n".utf8)
        var book: [UInt8] = []
        while book.count < 1 << 20 { book += line }
        return ["book.swift": Array(book.prefix(1 << 20))]
    }()

    private init(
        catalog: Catalog, payments: TestPaymentProcessor, root: String, storeServer: StoreServer,
        content: ContentServer,
        storePort: Int, contentPort: Int, holdAnswers: NIOLockedValueBox<Int>, clockOffset: NIOLockedValueBox<Int64>,
        trustRootsPath: String?, tls: ServerTLSIdentity?
    ) {
        self.holdAnswers = holdAnswers
        self.clockOffset = clockOffset
        self.trustRootsPath = trustRootsPath
        self.tls = tls
        self.catalog = catalog
        self.payments = payments
        self.root = root
        self.storeDirectory = root + "/store"
        self.contentDirectory = root + "/content"
        self.storeServer = NIOLockedValueBox(storeServer)
        self.content = content
        self.storePort = storePort
        self.contentPort = contentPort
    }

    /// Starts a store with `catalog` and a content service hosting `content`
    /// (product id → file bytes), in a fresh temporary directory.
    ///
    /// Both services serve TLS with a development CA made for the session
    /// (``trustRootsPath``; the `openssl` command makes it) unless `tls` is false.
    /// `chunkSize` is the content service's (one that is not a multiple of 64
    /// bytes sends no SHA-256 states: its downloads are hashed in order).
    /// `contentEntitlements` gates hosted items by entitlement (item id → the catalog's entitlement id): any
    /// transaction that grants it downloads the item.
    public static func start(
        catalog: Catalog = sampleCatalog, content: [String: [UInt8]] = sampleContent,
        environment: StoreEnvironment = .sandbox,
        tls: Bool = true, chunkSize: UInt32 = 256 * 1024, contentEntitlements: [String: String] = [:]
    ) async throws -> KioskTestSession {
        let root = NSTemporaryDirectory() + "kiosk-test-session-" + UUID().uuidString
        let certificates = tls ? try DevelopmentCertificates.create(in: root + "/tls") : nil
        let identity = try certificates.map {
            try ServerTLSIdentity(certificateChainPath: $0.serverCertificatePath, privateKeyPath: $0.serverKeyPath)
        }
        let contentDirectory = root + "/content"
        try FileManager.default.createDirectory(atPath: contentDirectory + "/files", withIntermediateDirectories: true)
        var entries: [String] = []
        for (product, bytes) in content.sorted(by: { $0.key < $1.key }) {
            try Data(bytes).write(to: URL(fileURLWithPath: "\(contentDirectory)/files/\(product)"))
            let gate = contentEntitlements[product].map { #", "entitlement": "\#($0)""# } ?? ""
            entries.append(#"{"product_id": "\#(product)", "file": "files/\#(product)", "version": "1.0"\#(gate)}"#)
        }
        try Data(#"{"products": [\#(entries.joined(separator: ", "))]}"#.utf8)
            .write(to: URL(fileURLWithPath: contentDirectory + "/manifest.json"))

        let payments = TestPaymentProcessor()
        let holdAnswers = NIOLockedValueBox(0)
        let clockOffset = NIOLockedValueBox<Int64>(0)
        let store = try StoreServer(
            store: storeConfiguration(
                root: root, catalog: catalog, environment: environment, payments: payments, hold: holdAnswers,
                clockOffset: clockOffset),
            server: Self.serving(port: 0, tls: identity))
        try await store.start()
        let storePort = store.port ?? 0
        let credential = try store.store.createServiceCredential(role: .content, name: "test-session-content").secret
        let contentServer = try ContentServer(
            configuration: ContentConfiguration(
                contentDirectory: contentDirectory, storePort: storePort, storeCredential: credential,
                storeTLS: try certificates.map { try ClientTLS(trustRootsPath: $0.caCertificatePath) },
                environment: environment.wire,
                chunkSize: chunkSize),
            server: Self.serving(port: 0, tls: identity))
        try await contentServer.start()
        _ = await contentServer.waitUntilReady()
        return KioskTestSession(
            catalog: catalog, payments: payments, root: root, storeServer: store, content: contentServer,
            storePort: storePort, contentPort: contentServer.port ?? 0, holdAnswers: holdAnswers,
            clockOffset: clockOffset, trustRootsPath: certificates?.caCertificatePath, tls: identity)
    }

    private static func storeConfiguration(
        root: String, catalog: Catalog, environment: StoreEnvironment, payments: TestPaymentProcessor,
        hold: NIOLockedValueBox<Int>,
        clockOffset: NIOLockedValueBox<Int64>
    ) -> StoreConfiguration {
        var configuration = StoreConfiguration(
            dataDirectory: root + "/store", catalog: catalog, environment: environment, paymentProcessor: payments,
            revocationPollInterval: .milliseconds(50), revocationHeartbeat: .milliseconds(200),
            clock: OffsetClock(offset: clockOffset))
        // Renewals happen when the test drives the clock (``advance(by:)``), not on a timer.
        configuration.renewalInterval = .seconds(3600)
        // A clock advanced by months renews each period in turn, as a tester expects.
        configuration.catchUpRenewals = true
        configuration.purchaseCommitted = { _ in
            let held = hold.withLockedValue { count -> Bool in
                guard count > 0 else { return false }
                count -= 1
                return true
            }
            // Committed, but the answer is held back past any client's patience (the
            // purchase no longer belongs to the call, so it cannot be cancelled).
            if held { try? await Task.sleep(for: .seconds(60)) }
        }
        return configuration
    }

    /// The servers' configuration: every call metered (`ServerConfiguration.metersCalls`), so a test can read
    /// the RPC metrics.
    private static func serving(port: Int, tls: ServerTLSIdentity?) -> ServerConfiguration {
        var configuration = ServerConfiguration(port: port, tls: tls)
        configuration.metersCalls = true
        return configuration
    }

    /// The running store's RPC server (its meter: `RPCServer.meterReading()`).
    public var storeRPCServer: RPCServer {
        get throws {
            guard let server = storeServer.withLockedValue({ $0 }) else {
                throw KioskError(.cannotConnect, "the test store is stopped")
            }
            return server.server
        }
    }

    /// The running store.
    public var store: Store {
        get throws {
            guard let server = storeServer.withLockedValue({ $0 }) else {
                throw KioskError(.cannotConnect, "the test store is stopped")
            }
            return server.store
        }
    }

    // MARK: Accounts and clients

    /// Creates an account, buying in `storefront` (ISO 3166-1 alpha-3, "FRA"; nil: the catalog's default).
    public func makeAccount(paymentsAllowed: Bool = true, storefront: String? = nil) throws -> Account {
        let (id, token) = try store.createAccount(paymentsAllowed: paymentsAllowed, storefront: storefront ?? "")
        return Account(id: id, token: token)
    }

    /// Moves `account` to another storefront, as the buyer would (`KioskClient.setStorefront(_:)`): purchases are
    /// priced there at once, subscriptions from their next renewal (with consent when higher or in another currency).
    public func setStorefront(_ account: Account, _ storefront: String) async throws {
        guard let record = try store.ledger.account(id: account.id) else {
            throw StoreError.notFound("no account \(account.id)")
        }
        _ = try await store.setStorefront(account: record, to: storefront)
    }

    /// A client for `account`, with its own state directory unless one is given.
    public func makeClient(
        account: Account, stateDirectory: String? = nil, callTimeout: Duration = .seconds(5)
    ) throws -> KioskClient {
        let state = stateDirectory ?? root + "/clients/" + UUID().uuidString
        return try KioskClient(
            configuration: configuration(account: account, stateDirectory: state, callTimeout: callTimeout))
    }

    /// The client configuration for `account` against this session's services (trusting the session's CA).
    public func configuration(
        account: Account, stateDirectory: String, callTimeout: Duration = .seconds(5)
    ) -> KioskConfiguration {
        KioskConfiguration(
            storePort: storePort, contentPort: contentPort, token: account.token, bundleID: catalog.bundleID,
            stateDirectory: stateDirectory, callTimeout: callTimeout, retryInitialDelay: .milliseconds(50),
            retryMaximumDelay: .milliseconds(500), updatePollInterval: .milliseconds(200),
            transportSecurity: trustRootsPath.map { .tls(trustRootsPath: $0) } ?? .plaintext)
    }

    /// The RPC client settings that reach this session's services (its CA as the trust root), for tests that call them directly.
    public func rpcConfiguration() throws -> ClientConfiguration {
        ClientConfiguration(tls: try trustRootsPath.map { try ClientTLS(trustRootsPath: $0) })
    }

    // MARK: Knobs

    /// Allows or forbids an account's payments.
    public func setPaymentsAllowed(_ account: Account, _ allowed: Bool) throws {
        try store.setPaymentsAllowed(accountID: account.id, allowed)
    }

    /// The next payment is declined (`card_declined` unless another reason is given).
    public func failNextPayment(reason: String = "card_declined", message: String = "declined by the test session") {
        payments.overrideNextPayment(.declined(reason: reason, message: message))
    }

    /// The next payment is cancelled by the user.
    public func cancelNextPayment() { payments.overrideNextPayment(.cancelled) }

    /// The next payment waits for approval (ask to buy).
    public func deferNextPayment() { payments.overrideNextPayment(.deferred) }

    /// The next purchase is committed, but its answer never reaches the client
    /// (as if the connection dropped after the store committed).
    public func holdNextAnswer() { holdAnswers.withLockedValue { $0 += 1 } }

    /// The next payment is charged, but the processor's answer is lost: the
    /// purchase fails with UNAVAILABLE and stays pending until ``reconcile()``
    /// (or a retry with its key) records it.
    public func loseNextPaymentAnswer() { payments.overrideNextPayment(.chargeThenLoseAnswer) }

    /// Settles every pending payment with the processor now, as the store does at start-up and every 30 s.
    @discardableResult
    public func reconcile() async throws -> Store.ReconcileReport {
        try await store.reconcile(all: true)
    }

    /// Approves a deferred transaction.
    public func approve(transactionID: String) async throws {
        _ = try await store.approve(transactionID: transactionID)
    }

    /// Refunds a purchased transaction.
    public func refund(transactionID: String, reason: String = "refunded by the test session") async throws {
        _ = try await store.refund(transactionID: transactionID, reason: reason)
    }

    /// Denies a buyer's pending refund request (REFUND_DENIED); a refund (``refund(transactionID:reason:)``) grants it.
    public func denyRefund(transactionID: String, reason: String = "denied by the test session") async throws {
        _ = try await store.denyRefund(transactionID: transactionID, reason: reason)
    }

    /// The buyer's bank disputes the transaction's payment, as Stripe reports it: revoked without a refund (a
    /// DISPUTED event and REFUNDED); it comes back on `transactionUpdates` with its revocation. Each call opens a new
    /// dispute (a payment can be disputed more than once); answers its id.
    @discardableResult
    public func openDispute(transactionID: String, reason: String = "fraudulent") async throws -> String {
        let id = "test-session-dispute-\(UUID().uuidString.lowercased())"
        _ = try await store.disputeOpened(id, transactionID: transactionID, reason: reason)
        return id
    }

    /// The merchant wins the transaction's open disputes: the transaction counts again (REFUND_REVERSED) and comes
    /// back on `transactionUpdates` without a revocation; a subscription is entitled to its period's end, auto-renew
    /// off. Nothing changes when the buyer bought it again meanwhile, another dispute of it was lost, or it was
    /// refunded rather than disputed.
    public func winDispute(transactionID: String) async throws {
        try await closeDisputes(transactionID: transactionID, won: true)
    }

    /// The buyer wins the transaction's open disputes: it stays revoked.
    public func loseDispute(transactionID: String) async throws {
        try await closeDisputes(transactionID: transactionID, won: false)
    }

    private func closeDisputes(transactionID: String, won: Bool) async throws {
        let open = try await store.disputes(transactionID: transactionID).filter { $0.state == .open }
        guard !open.isEmpty else {
            throw StoreError(.notFound, "transaction \(transactionID) has no open dispute: open one first")
        }
        for dispute in open { _ = try await store.disputeClosed(dispute.id, transactionID: transactionID, won: won) }
    }

    /// Removes every transaction and what hangs on one (credits, revocations, subscriptions, refund requests,
    /// disputes, payment intents, idempotency keys); accounts, keys and the event log stay (events already sent stay
    /// sent: an app's update feed does not go back).
    public func clearTransactions() throws {
        try store.ledger.clearTransactions()
    }

    /// The deferred transactions of an account, newest last.
    public func deferredTransactions(of account: Account) throws -> [String] {
        try store.ledger.transactions(accountID: account.id).filter { $0.state == .deferred }.map(\.id)
    }

    // MARK: Time and subscriptions

    /// How fast subscriptions renew, as the App Store sandbox's renewal rates, but exact: periods, grace and
    /// billing retry are shortened by ``timeScale``.
    public struct RenewalRate: Hashable, Sendable {
        /// How many times faster than the calendar.
        public var timeScale: Double
        /// A rate `timeScale` times faster than the calendar: periods, grace and billing retry shrink by that factor.
        public init(timeScale: Double) { self.timeScale = timeScale }
        /// Calendar time.
        public static let realTime = RenewalRate(timeScale: 1)
        /// A one-month period lasts an hour (`kiosk-store serve --time-scale 720`).
        public static let monthlyRenewalEveryHour = RenewalRate(timeScale: 720)
        /// A one-month (30-day) period lasts a minute.
        public static let everyMinute = RenewalRate(timeScale: 30 * 24 * 60)
    }

    /// The store's clock, in milliseconds since 1970 (real time plus what ``advance(by:)`` added).
    public var nowMs: Int64 { OffsetClock(offset: clockOffset).nowMs }

    /// Moves the store's clock forward, then runs the renewal engine as a serving store does on its timer:
    /// every renewal now due is charged (once per period), failed ones move through grace and billing retry,
    /// cancelled ones expire. Deterministic: nothing happens between two calls but what they do.
    @discardableResult
    public func advance(by duration: Duration) async throws -> Store.RenewalReport {
        let (seconds, attoseconds) = duration.components
        clockOffset.withLockedValue { $0 += seconds * 1000 + attoseconds / 1_000_000_000_000_000 }
        return try await store.renewDueSubscriptions()
    }

    /// Runs the renewal engine now, without moving the clock.
    @discardableResult
    public func renewDueSubscriptions() async throws -> Store.RenewalReport {
        try await store.renewDueSubscriptions()
    }

    /// The next `count` renewal payments are declined (`Int.max`: all of them until ``stopFailingRenewals()``).
    public func failNextRenewal(count: Int = 1) { payments.failNextRenewals(count) }

    /// Renewal payments go through again.
    public func stopFailingRenewals() { payments.stopFailingRenewals() }

    /// Ends a subscription now (no entitlement, nothing renews), as the sandbox's "expire".
    @discardableResult
    public func expire(
        originalID: String, reason: Subscription.ExpirationReason = .cancelled
    ) async throws -> SubscriptionRecord {
        try await store.expireSubscription(originalID: originalID, reason: reason)
    }

    /// Moves an active subscription's renewal date `days` later (1 to 90; at most twice in 365 days), as an operator's
    /// `kiosk-store subscriptions extend`: a RENEWAL_EXTENDED event, the latest transaction's expiry and receipt updated.
    @discardableResult
    public func extendSubscription(
        originalID: String, days: Int, reason: String = "extended by the test session"
    ) async throws -> SubscriptionRecord {
        try await store.extendSubscription(originalID: originalID, days: days, reason: reason)
    }

    /// Extends every active subscription of `productID` by `days`, each once, as `kiosk-store subscriptions
    /// extend-all` (one job, run to its end here); returns how many it extended.
    @discardableResult
    public func extendSubscriptions(
        productID: String, days: Int, reason: String = "extended by the test session"
    ) async throws -> Int {
        let job = try await store.startExtensionJob(productID: productID, days: days, reason: reason)
        return try await store.runExtensionJob(id: job.id).extended
    }

    /// Makes `count` one-time offer codes (or, with `customCode`, that word for `limit` accounts) that buy `productID`
    /// at `price` ("0": free; a subscription's first period of `period`, default the product's; `quantity` units of a
    /// consumable), as `kiosk-store codes create`; returns the codes for the app to redeem (`KioskClient.redeem`).
    @discardableResult
    public func makeOfferCodes(
        productID: String, count: Int = 1, customCode: String? = nil, limit: Int = 0, price: String = "0",
        period: String? = nil, quantity: UInt32 = 1, expiresMs: Int64 = 0, batchID: String? = nil
    ) async throws -> [String] {
        try await store.createOfferCodes(
            batchID: batchID ?? "test-" + UUID().uuidString.prefix(8).lowercased(), productID: productID,
            count: customCode == nil ? count : 0,
            customCode: customCode, limit: limit, price: price, period: period, quantity: quantity,
            expiresMs: expiresMs
        ).codes
    }

    /// Revokes the offer code batch `batchID` (its codes are refused from now on), as `kiosk-store codes revoke`.
    public func revokeOfferCodes(batchID: String) async throws {
        try await store.revokeOfferCodes(batchID: batchID)
    }

    /// Grants `entitlementID` to `account` for `days`, no charge, as `kiosk-store grant`: returns the GRANT
    /// transaction's id (``refund(transactionID:reason:)`` revokes it).
    @discardableResult
    public func grant(
        _ account: Account, entitlementID: String, days: Int, reason: String = "granted by the test session"
    ) async throws -> String {
        try await store.grantEntitlement(
            accountID: account.id, entitlementID: entitlementID, days: days, reason: reason
        ).id
    }

    /// Sets how fast periods that start from now on run.
    public func setRenewalRate(_ rate: RenewalRate) throws {
        try store.setTimeScale(rate.timeScale)
    }

    /// Where a subscription stands.
    public func subscription(originalID: String) throws -> SubscriptionRecord? {
        try store.ledger.subscription(originalID: originalID)
    }

    // MARK: Outages

    /// Stops the store (the content service keeps running); ``startStore()`` brings it back.
    public func stopStore() async {
        let server = storeServer.withLockedValue { server in
            defer { server = nil }
            return server
        }
        await server?.shutdown()
    }

    /// Starts the store again on the same port and data directory.
    public func startStore() async throws {
        guard storeServer.withLockedValue({ $0 }) == nil else { return }
        let hold = holdAnswers
        let server = try StoreServer(
            store: Self.storeConfiguration(
                root: root, catalog: catalog, environment: try ledgerEnvironment(), payments: payments, hold: hold,
                clockOffset: clockOffset),
            server: Self.serving(port: storePort, tls: tls))
        try await server.start()
        storeServer.withLockedValue { $0 = server }
    }

    private func ledgerEnvironment() throws -> StoreEnvironment {
        try Ledger(directory: storeDirectory).environment() ?? .sandbox
    }

    /// Stops both services and removes the temporary directory.
    public func shutdown() async {
        await content.shutdown()
        await stopStore()
        try? FileManager.default.removeItem(atPath: root)
    }
}

/// Real time plus what the test advanced the session by.
private struct OffsetClock: StoreClock {
    let offset: NIOLockedValueBox<Int64>

    var nowMs: Int64 { SystemClock().nowMs + offset.withLockedValue { $0 } }
}
