import Crypto
import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskWire
import Logging
import NIOConcurrencyHelpers

/// The store: catalog, accounts, payments, ledger, receipts, restore and verification.
///
/// The RPC surface is ``StoreService``; the admin commands of `kiosk-store`
/// call the `public` methods here directly on the data dir.
public final class Store: Sendable {
    /// The configuration.
    public let configuration: StoreConfiguration
    /// The durable state.
    public let ledger: Ledger
    /// What the store did, for its operator: purchases, refunds, Stripe's events; within a call, each line carries
    /// the call's request id (``RequestScope``). Never a token, secret or payment method.
    let logger = Logger(label: "kiosk-store")
    /// Webhook attempts by outcome and their latency, for metrics.
    let webhookMeter = WebhookMeter()
    let reconcileMeter = ReconcileMeter()
    let keys: KeyStore
    let locks = KeyedLock()
    let instance: InstanceLock
    private let verifier: NIOLockedValueBox<ReceiptVerifier>
    /// What `WatchRevocations` streams follow.
    let feed: RevocationFeed
    private let timeScaleBox: NIOLockedValueBox<Double>
    /// Which products grant which entitlements: the catalog's, or, for a store opened without one (a `kiosk-store`
    /// command on the data dir), the serving store's, as it kept it in the ledger (``prepareToServe()``).
    let entitlementMap: EntitlementMap
    /// The extension jobs this process is running (``runExtensionJob(id:progress:)``).
    let runningJobs = NIOLockedValueBox<Set<String>>([])
    /// Wrong offer codes per account and address (``redeemOfferCode(account:code:paymentMethod:idempotencyKey:source:)``).
    let codeGuesses = OfferCodeGuesses()
    /// The accounts of the account tokens this process has authenticated (``authenticatedAccount(token:)``).
    let tokenAccounts = TokenAccounts()
    private let lastKeyRefresh = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

    /// Opens the store on its data dir, creating the ledger and the first signing key if needed.
    ///
    /// A ledger is bound to an environment the first time it is served
    /// (``StoreServer``); opening one bound to another environment fails.
    public init(configuration: StoreConfiguration) throws {
        if let database = configuration.database {
            try PostgresTransportSecurity.requireAllowed(
                database.security, host: database.host, environment: configuration.environment)
        }
        self.configuration = configuration
        self.ledger =
            try configuration.database.map { try Ledger(postgres: $0, timeout: configuration.databaseTimeout) }
            ?? Ledger(directory: configuration.dataDirectory)
        if let bound = try ledger.environment(), bound != configuration.environment {
            throw StoreError(
                .conflict,
                "the data dir holds a \(bound.name) ledger; it cannot be opened as \(configuration.environment.name)")
        }
        self.instance = try InstanceLock(dataDirectory: configuration.dataDirectory, ledger: ledger)
        self.keys = try KeyStore(
            dataDirectory: configuration.dataDirectory, ledger: ledger, nowMs: configuration.clock.nowMs,
            keyEncryptionKey: configuration.keyEncryptionKey)
        self.verifier = NIOLockedValueBox(
            Self.makeVerifier(keys: try ledger.publicKeys(), configuration: configuration))
        let keys = self.keys
        let environment = configuration.environment
        self.feed = RevocationFeed(ledger: ledger, pollInterval: configuration.revocationPollInterval) { record in
            try StoreV1.SignedEvent.sign(record.message(environment: environment), key: keys.activeKey())
        }
        self.timeScaleBox = NIOLockedValueBox(
            configuration.environment == .production ? 1 : max(1, configuration.timeScale))
        let map =
            configuration.catalog.products.isEmpty
            ? try ledger.setting(Self.entitlementMapSetting).flatMap {
                try? JSONDecoder().decode(EntitlementMap.self, from: Data($0.utf8))
            } ?? EntitlementMap(ids: [], byProduct: [:])
            : EntitlementMap(catalog: configuration.catalog)
        self.entitlementMap = map
        // Keys rotated or retired by another process (`kiosk-store keys …` on the data dir) reach this store's verifier too.
        feed.onKeysChanged { [weak self] in
            self?.keys.forgetKeyList()
            self?.refreshVerifier()
        }
        // Every write about an account records what it did to the account's entitlements, in that write.
        if !map.isEmpty {
            let clock = configuration.clock
            let interval = configuration.renewalInterval
            let catchUp = configuration.catchUpRenewals
            let timeScale = timeScaleBox
            ledger.setAccountWriteHook { db, accountID in
                try db.settleEntitlements(
                    accountID: accountID, map: map, nowMs: clock.nowMs,
                    renewalPendingMs: Self.renewalPendingMs(
                        interval, timeScale: timeScale.withLockedValue { $0 }, catchUp: catchUp))
            }
        }
        try pruneIdempotencyKeys()
    }

    /// Binds the ledger to this store's environment (the first time it is served) and checks the payment processor:
    /// production refuses the simulated one, and every catalog price must be one the processor can charge.
    public func prepareToServe() throws {
        try requireRealPaymentsInProduction()
        try requireChargeableCatalog()
        try ledger.claim(environment: configuration.environment)
        // Admin commands (approve, refund, reconcile) must use the processor the store serves with.
        try ledger.setSetting("payment_processor", configuration.paymentProcessor.name)
        // And its entitlements: a refund or grant by a command records what it ends or starts.
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        try ledger.setSetting(
            Self.entitlementMapSetting, String(decoding: try encoder.encode(entitlementMap), as: UTF8.self))
    }

    /// The settings key of the serving store's ``EntitlementMap``.
    static let entitlementMapSetting = "entitlement_map"

    /// Forgets idempotency keys older than the retention; returns how many.
    @discardableResult
    public func pruneIdempotencyKeys() throws -> Int {
        try ledger.pruneIdempotencyKeys(olderThanMs: now - configuration.idempotencyRetention.wholeMilliseconds)
    }

    var catalog: Catalog { configuration.catalog }

    /// How many times faster than the calendar subscription periods run (``StoreConfiguration/timeScale``); 1 in production.
    public var timeScale: Double { timeScaleBox.withLockedValue { $0 } }

    /// Changes the time scale of periods that start from now on (a sandbox store; a production store keeps 1).
    public func setTimeScale(_ scale: Double) {
        guard configuration.environment != .production else { return }
        timeScaleBox.withLockedValue { $0 = max(1, scale) }
    }
    var now: Int64 { configuration.clock.nowMs }

    // MARK: Accounts

    /// Creates an account; returns its id and its bearer token. Only the token's hash is stored.
    public func createAccount(
        paymentsAllowed: Bool = true, storefront: String = ""
    ) throws -> (id: String, token: String) {
        if !storefront.isEmpty { try Self.checkStorefront(storefront) }
        let id = "acct_" + Self.randomHex(bytes: 8)
        let token = "kiosk_" + Self.randomHex(bytes: 32)
        try ledger.createAccount(
            id: id, tokenHash: Self.hash(token), paymentsAllowed: paymentsAllowed,
            storefront: storefront.isEmpty ? catalog.defaultStorefront : storefront, nowMs: now)
        return (id, token)
    }

    /// Allows or forbids an account's payments.
    public func setPaymentsAllowed(accountID: String, _ allowed: Bool) throws {
        guard try ledger.setPaymentsAllowed(accountID: accountID, allowed, nowMs: now) else {
            throw StoreError.notFound("no account \(accountID)")
        }
    }

    /// The account a bearer token belongs to.
    /// - Throws: ``StoreError`` UNAUTHENTICATED (16) for a missing or unknown token.
    public func authenticate(token: String?) async throws -> AccountRecord {
        guard let token, !token.isEmpty else {
            throw StoreError.unauthenticated("missing metadata \"authorization: Bearer <token>\"")
        }
        guard let account = try await ledger.account(tokenHash: Self.hash(token)) else {
            throw StoreError.unauthenticated("the bearer token is not valid")
        }
        return account
    }

    /// The account an RPC call's bearer token belongs to, read from the ledger once a token and process: a token
    /// never changes account (the ledger has no way to give it another, nor to delete an account), so the id stands
    /// for good. The record's other fields (payments allowed, balance, storefront) are as first read: a handler that
    /// answers with them reads the account again (GetAccount). An unknown token is looked up every time (an account
    /// another replica creates works at once), and a service credential never comes here (it can be revoked).
    /// - Throws: ``StoreError`` UNAUTHENTICATED (16) for an unknown token.
    func authenticatedAccount(token: String) async throws -> AccountRecord {
        let hash = Self.hash(token)
        if let known = tokenAccounts.account(for: hash) { return known }
        guard let account = try await ledger.account(tokenHash: hash) else {
            throw StoreError.unauthenticated("the bearer token is not valid")
        }
        tokenAccounts.remember(account, for: hash)
        return account
    }

    // MARK: Products

    /// The catalog products with `ids` (all when empty), and the ids the catalog does not have.
    public func products(ids: [String]) -> (found: [CatalogProduct], invalid: [String]) {
        guard !ids.isEmpty else { return (catalog.products, []) }
        var found: [CatalogProduct] = []
        var invalid: [String] = []
        var seen: Set<String> = []
        for id in ids where seen.insert(id).inserted {
            if let product = catalog.product(id) { found.append(product) } else { invalid.append(id) }
        }
        return (found, invalid)
    }

    // MARK: Finishing, restoring

    /// Marks a transaction finished; returns true when it already was.
    public func finish(account: AccountRecord, transactionID: String) async throws -> Bool {
        guard !transactionID.isEmpty else { throw StoreError.invalid("transaction_id is required") }
        return try await ledger.write(account: account.id) { db in
            guard let record = try db.transaction(id: transactionID), record.accountID == account.id else {
                throw StoreError.notFound("no transaction \(transactionID) for this account")
            }
            guard record.state == .purchased else {
                throw StoreError(
                    .conflict, "transaction \(transactionID) is \(record.state.name) and cannot be finished")
            }
            if record.finished { return true }
            try db.markFinished(transactionID: transactionID)
            return false
        }
    }

    // MARK: Keys

    /// Adds a new signing key; old keys keep verifying.
    public func rotateKeys() throws -> ReceiptPublicKey {
        let key = try keys.rotate(nowMs: now)
        refreshVerifier()
        noteKeysChanged()
        return key
    }

    /// Called after this store added or retired a key (its own verifier is already reloaded).
    func noteKeysChanged() {
        // The feed looks at once and tells WatchRevocations streams (Revocation.keys_changed).
        feed.noteWritten()
    }

    /// The public keys receipts are verified with, oldest first.
    public func publicKeys() throws -> [ReceiptPublicKey] {
        try ledger.publicKeys()
    }

    // MARK: Benchmarks

    /// Signs `count` receipts of `productID` for `accountID` through the store's
    /// own signing path, without recording transactions: load for `kiosk-bench`.
    public func mintReceipts(accountID: String, productID: String, count: Int) throws -> [[UInt8]] {
        guard let product = catalog.product(productID) else { throw StoreError.notFound("no product \(productID)") }
        let key = try keys.activeKey()
        let nowMs = now
        return try (0..<count).map { _ in
            let id = Self.newTransactionID()
            let payload = ReceiptV1.ReceiptPayload(
                transactionID: id, originalTransactionID: id, productID: product.id, productType: product.type.wire,
                quantity: 1,
                purchaseDateMs: nowMs, accountID: accountID, bundleID: catalog.bundleID,
                environment: configuration.environment.wire)
            return try key.sign(payload, signedAtMs: max(nowMs, key.notBeforeMs)).serializedBytes()
        }
    }

    // MARK: Verification

    /// Verifies a receipt: signature, environment, account, expiry, revocation; with `includingEntitlements`, also
    /// what its account is entitled to now (when the receipt is authentic and the account known).
    public func verifyReceipt(_ bytes: [UInt8], includingEntitlements: Bool = false) async throws -> ReceiptVerdict {
        var current = verifier.withLockedValue { $0 }
        let signed = try? ReceiptV1.SignedReceipt(serializedBytes: bytes)
        if let signed, !signed.keyID.isEmpty, !current.knows(keyID: signed.keyID) {
            // Perhaps `keys rotate` ran in another process.
            current = await verifier(knowing: signed.keyID)
        }
        // Decoded once; undecodable bytes get the verifier's own 21002 answer.
        let check = signed.map { current.verify($0, nowMs: now) } ?? current.verify(bytes, nowMs: now)
        var verdict = ReceiptVerdict(check: check)
        guard let payload = check.payload, check.status == .valid || check.status == .subscriptionExpired else {
            return verdict
        }
        // Read where a stalled PostgreSQL blocks no Swift concurrency thread.
        let ledger = self.ledger
        let (account, record, row) = try await ledger.offload {
            (
                try ledger.account(id: payload.accountID), try ledger.transaction(id: payload.transactionID),
                payload.productType == .autoRenewableSubscription
                    ? try ledger.subscription(originalID: payload.originalTransactionID) : nil
            )
        }
        guard account != nil else {
            verdict.check.status = .accountNotFound
            verdict.check.message = "account \(payload.accountID) is not known to this store"
            return verdict
        }
        if includingEntitlements {
            verdict.entitlements = try await entitlements(accountID: payload.accountID)
        }
        if let record, record.revokedMs > 0 {
            verdict.revocationMs = record.revokedMs
            verdict.revocationReason = record.revocationReason
            verdict.check.message = "valid, but revoked: \(record.revocationReason)"
        }
        if let row, row.accountID == payload.accountID {
            // The subscription, not the one receipt, says whether the buyer is entitled: a receipt of an
            // earlier period of a subscription that renewed is good (use the latest), one of a subscription
            // that ended is 21006, whatever date the receipt itself carries.
            let status = try await ledger.offload { try self.statusMessage(row) }
            verdict.subscription = status
            verdict.latestTransaction = status.latestTransaction
            let nowMs = now
            if verdict.revocationMs == 0 {
                if row.isEntitled(atMs: nowMs), payload.productID == row.productID {
                    if verdict.check.status == .subscriptionExpired {
                        verdict.check.status = .valid
                        verdict.check.message =
                            row.state == .inGracePeriod
                            ? "valid: the subscription is in its grace period until \(row.graceEndMs) (a renewal payment failed)"
                            : "valid: the subscription renewed; latest_transaction is the current period's"
                    }
                } else if verdict.check.status == .valid, !row.isEntitled(atMs: nowMs) {
                    verdict.check.status = .subscriptionExpired
                    verdict.check.message = "the subscription has ended (\(row.state), \(row.expirationReason))"
                } else if verdict.check.status == .subscriptionExpired, row.state == .expired {
                    verdict.check.message = "the subscription expired (\(row.expirationReason))"
                }
            }
        }
        return verdict
    }

    /// The verifier after reloading the keys for a key id not known yet. Reloads happen at most once a
    /// second, so junk key ids cannot make every call read the ledger; a call that finds the reload
    /// rate-limited waits for the next one (under a second) instead of calling a new key's receipt not authentic.
    private func verifier(knowing keyID: String) async -> ReceiptVerifier {
        for _ in 0..<2 {
            let current = verifier.withLockedValue { $0 }
            if current.knows(keyID: keyID) { return current }
            let wait = lastKeyRefresh.withLockedValue { last -> Duration? in
                let now = ContinuousClock.now
                if let last, now - last < .seconds(1) { return .seconds(1) - (now - last) }
                last = now
                return nil
            }
            guard let wait else { return refreshVerifier() }
            try? await Task.sleep(for: wait)
        }
        return verifier.withLockedValue { $0 }
    }

    /// Reloads the keys from the ledger into the verifier ``verifyReceipt(_:)`` uses.
    @discardableResult
    func refreshVerifier() -> ReceiptVerifier {
        let keys = (try? ledger.publicKeys()) ?? []
        let fresh = Self.makeVerifier(keys: keys, configuration: configuration)
        verifier.withLockedValue { $0 = fresh }
        return fresh
    }

    /// The store's verifier: its environment, and receipts of its catalog's app only.
    static func makeVerifier(keys: [ReceiptPublicKey], configuration: StoreConfiguration) -> ReceiptVerifier {
        let bundleID = configuration.catalog.bundleID
        return ReceiptVerifier(
            keys: keys, environment: configuration.environment.wire, bundleID: bundleID.isEmpty ? nil : bundleID)
    }

    // MARK: Entitlements

    /// What the account is entitled to now, by the store's clock (``EntitlementRules``).
    public func entitlements(accountID: String) async throws -> [ActiveEntitlement] {
        try await ledger.entitlements(
            accountID: accountID, map: entitlementMap, nowMs: now, renewalPendingMs: renewalPendingMs)
    }

    /// Records the entitlement changes of the accounts whose recorded entitlements' time ran out by the store's clock
    /// (ENTITLEMENT_ENDED events, or a longer grant kept); returns how many ended. The renewal pass runs it after its
    /// renewals, so a subscription renewed on time never ends in between.
    @discardableResult
    public func settleEndingEntitlements() async throws -> Int {
        let map = entitlementMap
        guard !map.isEmpty else { return 0 }
        var ended = 0
        var cursor = ""
        // Bounded: each page moves the cursor past its accounts.
        for _ in 0..<100_000 {
            let nowMs = now
            let page = try await ledger.accountsWithEntitlementsEnding(byMs: nowMs, after: cursor, limit: 200)
            guard let last = page.last else { break }
            cursor = last
            for accountID in page {
                // One account that cannot be settled now is left for the next pass; the others go on.
                do {
                    ended += try await ledger.write(account: accountID) {
                        [clock = configuration.clock, renewalPendingMs] db in
                        try db.settleEntitlements(
                            accountID: accountID, map: map, nowMs: clock.nowMs, renewalPendingMs: renewalPendingMs)
                    }
                } catch {
                    logger.warning(
                        "entitlements not settled", metadata: ["account_id": "\(accountID)", "error": "\(error)"])
                }
            }
        }
        return ended
    }

    /// How long after its period's end a subscription that will renew still grants its entitlements while the
    /// renewal is due: as late as a renewal may start (``renewalLatenessMs(_:timeScale:)``).
    var renewalPendingMs: Int64 {
        Self.renewalPendingMs(
            configuration.renewalInterval, timeScale: timeScale, catchUp: configuration.catchUpRenewals)
    }

    /// ``renewalPendingMs``: with catch-up renewals (a sandbox whose clock jumps past several periods, each renewed in
    /// turn) a due renewal holds however late it is, so the catch-up never ends and restarts an entitlement.
    static func renewalPendingMs(_ interval: Duration, timeScale: Double, catchUp: Bool) -> Int64 {
        catchUp ? Int64.max / 4 : renewalLatenessMs(interval, timeScale: timeScale)
    }

    // MARK: Helpers

    static func hash(_ text: String) -> [UInt8] { Array(SHA256.hash(data: Array(text.utf8))) }

    /// What the ledger keeps of a bearer token: its SHA-256.
    public static func tokenHash(_ token: String) -> [UInt8] { hash(token) }

    static func randomHex(bytes: Int) -> String { [UInt8].secureRandom(count: bytes).hexString }

    static func newTransactionID() -> String { "tx_" + randomHex(bytes: 12) }
}

/// The accounts of account tokens, by the token's hash, in two generations of at most ``capacity`` each: a token
/// found in the older one moves to the newer, and when the newer is full it becomes the older (the tokens not used
/// since are forgotten, and read again at their next call), so the tokens in use stay and no call finds the memory
/// emptied at once.
final class TokenAccounts: Sendable {
    static let capacity = 50_000
    private let capacity: Int
    private struct Generations {
        var newer: [[UInt8]: AccountRecord] = [:]
        var older: [[UInt8]: AccountRecord] = [:]
    }
    private let generations = NIOLockedValueBox(Generations())

    init(capacity: Int = TokenAccounts.capacity) {
        self.capacity = capacity
    }

    func account(for tokenHash: [UInt8]) -> AccountRecord? {
        generations.withLockedValue { generations in
            if let account = generations.newer[tokenHash] { return account }
            guard let account = generations.older.removeValue(forKey: tokenHash) else { return nil }
            Self.insert(account, for: tokenHash, into: &generations, capacity: capacity)
            return account
        }
    }

    func remember(_ account: AccountRecord, for tokenHash: [UInt8]) {
        generations.withLockedValue { Self.insert(account, for: tokenHash, into: &$0, capacity: capacity) }
    }

    private static func insert(
        _ account: AccountRecord, for tokenHash: [UInt8], into generations: inout Generations, capacity: Int
    ) {
        if generations.newer.count >= capacity {
            generations.older = generations.newer
            generations.newer = [:]
        }
        generations.newer[tokenHash] = account
    }

    /// Tokens remembered, in both generations.
    var count: Int { generations.withLockedValue { $0.newer.count + $0.older.count } }
}
