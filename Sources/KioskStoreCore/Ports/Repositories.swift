/// The store's records as the domain needs them: one protocol per kind of record, each method
/// one question or one change, all inside one ledger transaction (a write commits all of its
/// changes or none). The ledger adapters implement them on SQLite and PostgreSQL; the in-memory
/// implementation (`InMemoryRepositories`) implements them on dictionaries for the domain's tests;
/// one contract suite checks that all three answer alike.
///
/// What the adapters guarantee, and the in-memory implementation mirrors:
/// - a payment is recorded once: a second transaction with the same `paymentID` is refused
///   (``StoreError`` conflict), as is a second live purchase of a non-consumable (an auto-renewable
///   subscription is kept to one by its pending intent and its subscription row);
/// - one payment at a time per account and owned-once product: inserting or reopening a second
///   pending intent for it is refused (``StoreError`` inProgress);
/// - a credit balance never goes below zero (the change is refused with an error, nothing written);
/// - event ids increase in the order their writes commit, and a reader resuming after one never
///   misses one.

/// Transactions: purchases, renewals, failures and ask-to-buy requests.
public protocol TransactionRepository {
    /// The transaction with `id`.
    func transaction(id: String) throws -> TransactionRecord?
    /// The transaction recording the payment `paymentID`.
    func transaction(paymentID: String) throws -> TransactionRecord?
    /// A live purchase of an owned-once product: a non-consumable purchased and not revoked, or an
    /// auto-renewable subscription whose subscription is entitled at `nowMs` (its latest transaction).
    /// Nil for other kinds.
    func owned(accountID: String, productID: String, kind: ProductKind, nowMs: Int64) throws -> TransactionRecord?
    /// The first purchased, unrevoked transaction of the account's product (its original id), and the
    /// latest expiry among them (0: none).
    func subscriptionHistory(
        accountID: String, productID: String
    ) throws -> (originalID: String?, latestExpiryMs: Int64)
    /// Records a new transaction; a purchased one's credits go to the account, and its event is
    /// recorded: `event`, or PURCHASED / DEFERRED by its state (none for FAILED).
    /// - Throws: ``StoreError`` conflict when its id or payment is recorded already, or it would be a
    ///   second live purchase of a non-consumable.
    func insertTransaction(_ record: TransactionRecord, event: EventKind?) throws
    /// Rewrites a transaction in place (an approval: DEFERRED → PURCHASED), keeping its place in the
    /// account's history; a purchased one's credits go to the account and APPROVED is recorded.
    func replaceTransaction(_ record: TransactionRecord) throws
    /// Marks a transaction finished by the app.
    func markFinished(transactionID: String) throws
    /// A DEFERRED transaction becomes FAILED with a StoreKit error (declined or expired ask); nothing for
    /// one in another state. The caller records DECLINED.
    func failDeferred(transactionID: String, code: UInt32, reason: String, message: String) throws
    /// DEFERRED transactions asked before `beforeMs`, oldest first, at most `limit`: (id, account).
    func deferred(before beforeMs: Int64, limit: Int) throws -> [(id: String, accountID: String)]
    /// Revokes a purchased transaction: the row marked, a revocation added to the feed, a consumable's
    /// credits taken back as far as the balance goes and the rest recorded as the shortfall; REFUNDED
    /// is recorded.
    /// - Throws: ``StoreError`` conflict when it is not purchased or was already revoked.
    func revoke(transactionID: String, reason: String, nowMs: Int64) throws -> RevocationRecord
    /// Undoes a revocation (a dispute the merchant won): the row counts again, a consumable's credits the
    /// revocation took are given back, its revocation leaves the feed, and REFUND_REVERSED is recorded. The
    /// subscription it belongs to is the caller's to restore.
    /// - Throws: ``StoreError`` conflict when it is not a revoked purchase.
    func reinstate(transactionID: String, reason: String, nowMs: Int64) throws -> TransactionRecord
}

/// Accounts, their credits, and the answers kept per idempotency key.
public protocol AccountRepository {
    /// The account with `id`.
    func account(id: String) throws -> AccountRecord?
    /// Orders this write after every other write about the account (PostgreSQL's first updater
    /// wins); nothing to do where writes run one at a time.
    func serializeOnAccount(_ accountID: String) throws
    /// Moves `amount` credits (negative: spends) and records the movement.
    /// - Throws: an error, with nothing changed, when the balance would go below zero.
    func addCredits(_ amount: Int64, account: String, transaction: String?, reason: String, nowMs: Int64) throws
    /// The answer kept for `key`, nil when there is none (or no key).
    /// - Throws: ``StoreError`` keyReused when the key was used for another operation or request.
    func remembered(account: String, key: String?, operation: String, hash: [UInt8]) throws -> [UInt8]?
    /// Keeps an answer for `key` (nothing without a key). One kept already stays, unless `replacing`.
    func remember(
        _ response: [UInt8], account: String, key: String?, operation: String, hash: [UInt8], nowMs: Int64,
        replacing: Bool) throws
    /// The account's customer at `processor` (``PaymentProfile/processor``), nil when there is none.
    func paymentProfile(account: String, processor: String) throws -> PaymentProfile?
    /// Writes the account's profile at its processor, replacing the one there (inside the account's write).
    func savePaymentProfile(_ profile: PaymentProfile) throws
}

/// Payment intents: written before the processor is asked, settled with its answer.
public protocol PaymentIntentRepository {
    /// The intent with `id` (`kind:paymentID`).
    func intent(id: String) throws -> PaymentIntent?
    /// Writes a new pending intent.
    /// - Throws: ``StoreError`` inProgress when the account has a pending intent for the same
    ///   owned-once product, or the id is taken (the same payment is being made).
    func insertIntent(_ intent: PaymentIntent, nowMs: Int64) throws
    /// Makes a settled intent pending again under `owner` (a retry); returns it as now stored.
    /// - Throws: ``StoreError`` inProgress as ``insertIntent(_:nowMs:)``.
    func reopen(_ intent: PaymentIntent, owner: String, nowMs: Int64) throws -> PaymentIntent
    /// Marks an intent completed or closed, with why.
    func settle(_ intentID: String, _ state: PaymentIntent.State, outcome: String, nowMs: Int64) throws
    /// Settles an intent only if it is still pending under the same owner and attempt; true when it did.
    func settleIfUnchanged(
        _ intent: PaymentIntent, _ state: PaymentIntent.State, outcome: String, nowMs: Int64
    ) throws -> Bool
    /// Ids of the account's pending intents for any of `productIDs`.
    func pendingIntentIDs(accountID: String, productIDs: [String]) throws -> [String]
}

/// Auto-renewable subscriptions, and the promotional-offer nonces they were bought with.
public protocol SubscriptionRepository {
    /// The subscription whose first purchase is `originalID`.
    func subscription(originalID: String) throws -> Subscription?
    /// The account's subscriptions to any of `productIDs`, the latest ending first (then by original id).
    func subscriptions(accountID: String, productIDs: [String]) throws -> [Subscription]
    /// Writes the subscription (insert or replace by original id); one that ends here (live → EXPIRED)
    /// records EXPIRED.
    func saveSubscription(_ subscription: Subscription, nowMs: Int64) throws
    /// True when a promotional offer's nonce was used before.
    func offerNonceUsed(_ nonce: String) throws -> Bool
    /// Uses a promotional offer's nonce: false when it was used before (nothing written).
    func useOfferNonce(_ nonce: String, accountID: String, nowMs: Int64) throws -> Bool
}

/// Buyers' refund requests.
public protocol RefundRequestRepository {
    /// The request about `transactionID`.
    func refundRequest(transactionID: String) throws -> RefundRequest?
    /// Writes a new request.
    /// - Throws: ``StoreError`` conflict when the transaction has one already.
    func insertRefundRequest(_ request: RefundRequest) throws
    /// Writes a decided request over the state it was decided from; false (nothing written) when the
    /// stored request is no longer in `from`.
    func updateRefundRequest(_ request: RefundRequest, from: RefundRequest.State) throws -> Bool
}

/// The event log.
public protocol EventRepository {
    /// Records `event`; returns it with its id, above every id before it.
    @discardableResult
    func recordEvent(_ event: EventRecord) throws -> EventRecord
    /// Records `event` as ``recordEvent(_:)`` does, for a caller that does not need its id back (a backend may then
    /// send it without waiting).
    func appendEvent(_ event: EventRecord) throws
    /// The highest event id (0: none).
    func latestEventID() throws -> UInt64
    /// Events after `cursor`, oldest first, at most `limit`: of one account or all, of `types` or any.
    func events(after cursor: UInt64, limit: Int, accountID: String?, types: [EventKind]) throws -> [EventRecord]
}

/// Service credentials: content services and admin tools, kept as the hash of their secret.
public protocol CredentialRepository {
    /// Adds a credential with the hash of its secret.
    /// - Throws: ``StoreError`` conflict when its id or hash exists already.
    func addServiceCredential(_ credential: ServiceCredentialRecord, tokenHash: [UInt8]) throws
    /// The credential a secret's hash belongs to, unless it is revoked.
    func serviceCredential(tokenHash: [UInt8]) throws -> ServiceCredentialRecord?
    /// Every credential, revoked ones included, oldest first (then by id).
    func serviceCredentials() throws -> [ServiceCredentialRecord]
    /// Revokes a credential in use; false when there is none by that id in use.
    func revokeServiceCredential(id: String, nowMs: Int64) throws -> Bool
    /// The ids of the revoked credentials.
    func revokedServiceCredentialIDs() throws -> Set<String>
}

/// Events a payment processor sent the store (Stripe's webhooks), by the processor's event id: each is acted on
/// once.
public protocol ProcessorEventRepository {
    /// What the store did with the processor's event `id`, or nil when it never saw it.
    func processorEventOutcome(id: String) throws -> String?
    /// Records that the event was handled and how; false when it was recorded already (another delivery won).
    func recordProcessorEvent(id: String, type: String, outcome: String, nowMs: Int64) throws -> Bool
    /// The dispute with the processor's id `id`, as the store followed it.
    func dispute(id: String) throws -> Dispute?
    /// The disputes of transaction `transactionID` (a payment can be disputed more than once), by id.
    func disputes(transactionID: String) throws -> [Dispute]
    /// Records a dispute or its new state (inside the write that acts on it, ordered on the account).
    func saveDispute(_ dispute: Dispute) throws
}

/// Everything a purchase, renewal or refund reads and writes in one ledger transaction.
public typealias StoreRepositories = TransactionRepository & AccountRepository & PaymentIntentRepository
    & SubscriptionRepository & RefundRequestRepository & EventRepository & CredentialRepository & WebhookRepository
    & KeyRepository & RevocationRepository & ProcessorEventRepository

extension TransactionRepository {
    /// Records a new transaction with the event its state implies.
    public func insertTransaction(_ record: TransactionRecord) throws { try insertTransaction(record, event: nil) }
}

extension AccountRepository {
    /// Keeps an answer for `key`; one kept already stays.
    public func remember(
        _ response: [UInt8], account: String, key: String?, operation: String, hash: [UInt8], nowMs: Int64
    ) throws {
        try remember(
            response, account: account, key: key, operation: operation, hash: hash, nowMs: nowMs, replacing: false)
    }
}

extension EventRepository {
    /// Events after `cursor` of any account and type.
    public func events(after cursor: UInt64, limit: Int) throws -> [EventRecord] {
        try events(after: cursor, limit: limit, accountID: nil, types: [])
    }
}

extension EventRepository {
    public func appendEvent(_ event: EventRecord) throws { _ = try recordEvent(event) }
}
