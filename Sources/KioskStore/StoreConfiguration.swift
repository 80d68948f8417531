import Foundation
import KioskAPI
import KioskStoreCore
import KioskStoreIntegrations

/// Configuration of a ``Store``.
public struct StoreConfiguration: Sendable {
    /// Directory holding the ledger (`ledger.sqlite`, unless ``database`` names another) and the signing keys (`keys/`).
    public var dataDirectory: String
    /// A PostgreSQL database to keep the ledger in instead of the data dir's SQLite file
    /// (`kiosk-store serve --database postgres://…`); nil: the embedded SQLite ledger.
    public var database: PostgresLocation?
    /// With ``database``: how long a connection checkout, a connect or one statement may take before the call that
    /// needed it fails with 14 UNAVAILABLE (a stalled database then fails calls at once for a second at a time,
    /// and calls that need no database are answered meanwhile).
    public var databaseTimeout: Duration = Ledger.defaultDatabaseTimeout
    /// Seals the private signing keys into the ledger, so every store replica on
    /// one database signs with the same keys (give them all the same one); nil:
    /// private keys in the data dir's `keys/`, for a single store process.
    public var keyEncryptionKey: KeyEncryptionKey?
    /// The products sold.
    public var catalog: Catalog
    /// Sandbox or production: written into every receipt.
    public var environment: StoreEnvironment
    /// Takes the payments.
    public var paymentProcessor: any PaymentProcessor
    /// How long idempotency keys are kept (at least 7 days).
    public var idempotencyRetention: Duration
    /// How often the store's one revocation reader looks for revocations and
    /// key changes made by another process (the `kiosk-store refund` and
    /// `keys` commands); this process's own are delivered at once.
    public var revocationPollInterval: Duration
    /// How often an idle `WatchRevocations` stream sends a heartbeat (a
    /// revocation with an empty transaction id), so watchers know the store is there.
    public var revocationHeartbeat: Duration
    /// A pending payment intent written by a live store process is reconciled
    /// with the processor once older than this: its charge may still be in flight.
    /// Longer than any processor call (with its defaults, Stripe's client gives up after 4 attempts of
    /// 30 s and the waits between them: about 2 minutes).
    public var intentGrace: Duration
    /// A pending intent of a process that died is reconciled once older than
    /// this: how long the processor's lookup may lag behind a charge (Stripe's
    /// search index: up to a minute; 0 for processors whose lookup is exact).
    public var lookupDelay: Duration
    /// How often a serving store reconciles pending intents and prunes old idempotency keys.
    public var reconcileInterval: Duration
    /// The store's time (``SystemClock``; a ``ManualClock`` or another ``StoreClock`` in tests).
    public var clock: any StoreClock
    /// How long an access token for the content service is accepted (the SDK
    /// asks for a new one before it runs out).
    public var accessTokenLifetime: Duration
    /// How often a serving store charges the subscription renewals that are due
    /// (and moves failed ones through grace, billing retry and expiry).
    public var renewalInterval: Duration
    /// Sandbox only: subscription periods, grace and billing retry run this many times
    /// faster than the calendar (720: a month lasts an hour), as the App Store sandbox's
    /// accelerated renewals but exact. A production store always uses 1.
    public var timeScale: Double
    /// A renewal charged later than three renewal passes after its period ended (the store was down) starts a
    /// new period now, so past periods are never billed; true: each missed period is renewed in turn, its own
    /// charge (what a test that jumps its clock ahead expects; ``KioskTestSession`` sets it).
    public var catchUpRenewals: Bool = false
    /// An ask-to-buy request not approved within this time is declined (reason "expired", a DECLINED event),
    /// as the App Store's requests expire after a day; nil: requests wait for ever.
    public var askToBuyExpiry: Duration? = .seconds(24 * 3600)
    /// How a serving store delivers webhooks (`kiosk-store webhook add`): backoff, retry period, timeouts.
    public var webhooks = WebhookPolicy()
    /// Opens the transport of one webhook delivery pass, given the policy's request timeout: HTTP(S) with
    /// async-http-client unless replaced (a test's recorder, another client).
    public var webhookTransport: @Sendable (Duration) -> any WebhookTransport = { HTTPWebhookTransport(timeout: $0) }
    /// Called after a purchase is committed and before it is answered; for
    /// tests that lose the answer on the way (KioskTesting's `holdNextAnswer`).
    public var purchaseCommitted: (@Sendable (PurchaseOutcome) async -> Void)?
    /// The signing secrets (`whsec_…`) of the Stripe webhook endpoint (``StripeWebhookServer``): a delivery signed
    /// with none of them is refused. Several during a rotation; empty: every delivery is refused.
    public var stripeWebhookSecrets: [String] = []
    /// How far a Stripe delivery's signature timestamp may be from now (Stripe's default: 5 minutes).
    public var stripeWebhookTolerance: Duration = .seconds(300)

    /// Creates a configuration: sandbox, simulated payments, 7-day idempotency keys,
    /// revocations polled every 200 ms, heartbeats every second,
    /// access tokens valid 10 minutes.
    public init(
        dataDirectory: String, catalog: Catalog, environment: StoreEnvironment = .sandbox,
        paymentProcessor: any PaymentProcessor = SimulatedPaymentProcessor(),
        idempotencyRetention: Duration = .seconds(7 * 24 * 3600),
        revocationPollInterval: Duration = .milliseconds(200),
        revocationHeartbeat: Duration = .seconds(1),
        intentGrace: Duration = .seconds(300),
        lookupDelay: Duration = .zero,
        reconcileInterval: Duration = .seconds(30),
        accessTokenLifetime: Duration = .seconds(600),
        clock: any StoreClock = SystemClock()
    ) {
        self.dataDirectory = dataDirectory
        self.catalog = catalog
        self.environment = environment
        self.paymentProcessor = paymentProcessor
        self.idempotencyRetention = idempotencyRetention
        self.revocationPollInterval = revocationPollInterval
        self.revocationHeartbeat = revocationHeartbeat
        self.intentGrace = intentGrace
        self.lookupDelay = lookupDelay
        self.reconcileInterval = reconcileInterval
        self.accessTokenLifetime = accessTokenLifetime
        self.clock = clock
        self.database = nil
        self.keyEncryptionKey = nil
        self.renewalInterval = .seconds(10)
        self.timeScale = 1
    }
}
