import Foundation

/// The store's ledger on dictionaries, for the domain's tests: the records, constraints and events of
/// the SQL ledger (``InMemoryRepositories`` answers every repository port as it does), with no database.
///
/// Writes run one at a time under a lock, each on a copy of the state that replaces it only when the
/// write returns: a write that throws leaves nothing written, as a rolled-back ledger transaction.
public final class InMemoryLedger: @unchecked Sendable {
    /// Everything the ledger holds, table by table.
    public struct State: Sendable {
        /// A change of an account's credit balance (the ledger's `credit_movements`).
        public struct CreditMovement: Hashable, Sendable {
            public var accountID: String
            /// Credits added; negative: taken.
            public var amount: Int64
            /// The transaction it was for, if any.
            public var transactionID: String?
            public var reason: String
            public var createdMs: Int64
        }

        /// The answer kept for an idempotency key.
        public struct IdempotentAnswer: Hashable, Sendable {
            /// The operation the key was used for.
            public var operation: String
            /// The hash of the request the key was used for.
            public var requestHash: [UInt8]
            public var response: [UInt8]
            public var createdMs: Int64
        }

        /// A promotional offer's nonce, used once.
        public struct OfferNonce: Hashable, Sendable {
            public var accountID: String
            public var createdMs: Int64
        }

        /// Transactions in the order they were recorded (the ledger's insertion order).
        public internal(set) var transactions: [TransactionRecord] = []
        /// Where each transaction is in ``transactions``, by id.
        var transactionPositions: [String: Int] = [:]
        /// Accounts by id.
        public internal(set) var accounts: [String: AccountRecord] = [:]
        /// Every credit movement, oldest first: their sum per account is its balance.
        public internal(set) var creditMovements: [CreditMovement] = []
        /// Kept answers by account, then idempotency key.
        public internal(set) var idempotentAnswers: [String: [String: IdempotentAnswer]] = [:]
        /// Payment intents by id; an intent's `attemptMs` is the ledger's `updated_ms`.
        public internal(set) var intents: [String: PaymentIntent] = [:]
        /// Subscriptions by original transaction id.
        public internal(set) var subscriptions: [String: Subscription] = [:]
        /// When each subscription was last written, by original transaction id.
        public internal(set) var subscriptionUpdatedMs: [String: Int64] = [:]
        /// Used promotional-offer nonces.
        public internal(set) var offerNonces: [String: OfferNonce] = [:]
        /// Signing keys in the order they were added, with their sealed private halves.
        public internal(set) var signingKeys: [(key: SigningKeyRecord, sealed: [UInt8]?)] = []
        /// Webhooks with their secrets, in the order they were added.
        public internal(set) var webhooks: [(webhook: WebhookRecord, secret: [UInt8])] = []
        /// Deliveries by webhook, then event id.
        public internal(set) var webhookDeliveries: [String: [UInt64: WebhookDelivery]] = [:]
        /// The delivery lease.
        public internal(set) var webhookLease: (owner: String, untilMs: Int64)?
        /// Service credentials with the hash of their secret, in the order they were added.
        public internal(set) var serviceCredentials: [(credential: ServiceCredentialRecord, tokenHash: [UInt8])] = []
        /// Processor events handled, by event id: type and outcome.
        public internal(set) var processorEvents: [String: (type: String, outcome: String, receivedMs: Int64)] = [:]
        /// Disputes the processor reported, by id.
        public internal(set) var disputes: [String: Dispute] = [:]
        /// Payment profiles by account, then processor.
        public internal(set) var paymentProfiles: [String: [String: PaymentProfile]] = [:]
        /// Refund requests by transaction id.
        public internal(set) var refundRequests: [String: RefundRequest] = [:]
        /// The event log, oldest first.
        public internal(set) var events: [EventRecord] = []
        /// The revocation feed, oldest first.
        public internal(set) var revocations: [RevocationRecord] = []
        /// The next event's id: ids start at 1 and only increase.
        var nextEventID: UInt64 = 1
        /// The next revocation's cursor: cursors start at 1 and only increase.
        var nextRevocationCursor: UInt64 = 1
    }

    private let lock = NSLock()
    private var current = State()

    /// An empty ledger: no accounts, no records.
    public init() {}

    /// A copy of the state as the last write left it, for checks the ports do not answer.
    public var state: State {
        lock.lock()
        defer { lock.unlock() }
        return current
    }

    /// Runs `body` as one write: on a copy of the state, kept only when `body` returns (a throw leaves
    /// nothing written). Writes run one at a time; `body` must not start another (it would wait forever).
    @discardableResult
    public func write<T>(_ body: (InMemoryRepositories) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        let repositories = InMemoryRepositories(state: current)
        let result = try body(repositories)
        current = repositories.state
        return result
    }

    /// Runs `body` on the state as it is; nothing it changes is kept.
    public func read<T>(_ body: (InMemoryRepositories) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(InMemoryRepositories(state: current))
    }

    /// Creates an account for a test, holding `credits` (recorded as a movement, so the balance stays the
    /// sum of the account's movements). An account with the same id is replaced.
    public func createAccount(id: String, paymentsAllowed: Bool = true, credits: UInt64 = 0) {
        lock.lock()
        defer { lock.unlock() }
        let balance = InMemoryRepositories.signed(credits)
        current.accounts[id] = AccountRecord(id: id, paymentsAllowed: paymentsAllowed, creditBalance: balance)
        if balance > 0 {
            current.creditMovements.append(
                State.CreditMovement(
                    accountID: id, amount: Int64(balance), transactionID: nil, reason: "grant", createdMs: 0))
        }
    }
}

/// The repository ports on an ``InMemoryLedger``'s state, inside one of its writes. Each method does what
/// the SQL ledger's statements do: the same checks (its unique indexes, its balance CHECK, its foreign keys
/// on accounts), the same errors, the same events. A method that throws changes nothing.
public final class InMemoryRepositories: StoreRepositories {
    /// The state this write works on; the ledger keeps it when the write returns.
    var state: InMemoryLedger.State

    init(state: InMemoryLedger.State) {
        self.state = state
    }

    // MARK: Transactions

    /// The transaction with `id`.
    public func transaction(id: String) throws -> TransactionRecord? {
        state.transactionPositions[id].map { state.transactions[$0] }
    }

    /// The transaction recording the payment `paymentID`.
    public func transaction(paymentID: String) throws -> TransactionRecord? {
        state.transactions.first { $0.paymentID == paymentID }
    }

    /// A live purchase of an owned-once product. An auto-renewable's subscription row with the latest expiry
    /// decides when there is one (its latest transaction while entitled, else nil); otherwise the first
    /// purchased, unrevoked transaction that is a non-consumable or unexpired at `nowMs`.
    public func owned(
        accountID: String, productID: String, kind: ProductKind, nowMs: Int64
    ) throws -> TransactionRecord? {
        guard kind.isExclusive else { return nil }
        if kind == .autoRenewableSubscription,
            let row = state.subscriptions.values.filter({ $0.accountID == accountID && $0.productID == productID }).min(
                by: Self.endsLater)
        {
            guard row.isEntitled(atMs: nowMs) else { return nil }
            return try transaction(id: row.latestTransactionID)
        }
        return state.transactions.first {
            $0.accountID == accountID && $0.productID == productID && $0.state == .purchased && $0.revokedMs == 0
                && ($0.productType == .nonConsumable || $0.expiresMs > nowMs)
        }
    }

    /// The first purchased, unrevoked transaction's original id, and the latest expiry among them (0: none).
    public func subscriptionHistory(
        accountID: String, productID: String
    ) throws -> (originalID: String?, latestExpiryMs: Int64) {
        let live = state.transactions.filter {
            $0.accountID == accountID && $0.productID == productID && $0.state == .purchased && $0.revokedMs == 0
        }
        return (live.first?.originalID, live.map(\.expiresMs).max() ?? 0)
    }

    /// Records a new transaction, its credits and its event. As the ledger's INSERT, it writes no refund
    /// shortfall (nothing is refunded yet).
    /// - Throws: ``StoreError`` conflict for a recorded id or payment, or a second live non-consumable purchase;
    ///   notFound for an account that does not exist.
    public func insertTransaction(_ record: TransactionRecord, event: EventKind?) throws {
        try atomically {
            var row = record
            row.credits = Self.signed(record.credits)
            row.refundCreditShortfall = 0
            guard state.transactionPositions[row.id] == nil, !collides(row) else {
                throw StoreError(
                    .conflict,
                    "the ledger refused transaction \(record.id): \(record.productID) is already owned by \(record.accountID), or its payment is already recorded"
                )
            }
            try requireAccount(row.accountID)
            state.transactionPositions[row.id] = state.transactions.count
            state.transactions.append(row)
            if record.state == .purchased, record.credits > 0 {
                try addCredits(
                    Int64(clamping: record.credits), account: record.accountID, transaction: record.id,
                    reason: "purchase",
                    nowMs: record.purchaseMs)
            }
            if let type = event
                ?? (record.state == .purchased ? .purchased : record.state == .deferred ? .deferred : nil)
            {
                try recordEvent(EventRecord(type, record, nowMs: record.purchaseMs))
            }
        }
    }

    /// Rewrites the columns the ledger's UPDATE writes (not the account, product, error, revocation,
    /// environment or shortfall), keeping the transaction's place. A purchased one's credits are added and
    /// APPROVED recorded, as in the ledger, even when no transaction has the id.
    /// - Throws: ``StoreError`` conflict when the change would record a payment twice or own a non-consumable twice.
    public func replaceTransaction(_ record: TransactionRecord) throws {
        try atomically {
            if let position = state.transactionPositions[record.id] {
                var row = state.transactions[position]
                row.originalID = record.originalID
                row.productType = record.productType
                row.quantity = record.quantity
                row.state = record.state
                row.purchaseMs = record.purchaseMs
                row.expiresMs = record.expiresMs
                row.price = record.price
                row.currency = record.currency
                row.paymentMethod = record.paymentMethod
                row.paymentID = record.paymentID
                row.receipt = record.receipt
                row.finished = record.finished
                row.credits = Self.signed(record.credits)
                row.periodStartMs = record.periodStartMs
                row.offerID = record.offerID
                guard !collides(row) else {
                    throw StoreError(
                        .conflict,
                        "the ledger refused transaction \(record.id): \(record.productID) is already owned by \(record.accountID)"
                    )
                }
                state.transactions[position] = row
            }
            if record.state == .purchased, record.credits > 0 {
                try addCredits(
                    Int64(clamping: record.credits), account: record.accountID, transaction: record.id,
                    reason: "purchase",
                    nowMs: record.purchaseMs)
            }
            if record.state == .purchased {
                try recordEvent(EventRecord(.approved, record, nowMs: record.purchaseMs))
            }
        }
    }

    /// Marks a transaction finished by the app (nothing for an unknown id).
    public func markFinished(transactionID: String) throws {
        guard let position = state.transactionPositions[transactionID] else { return }
        state.transactions[position].finished = true
    }

    /// The transaction becomes FAILED with the error. As the ledger's UPDATE, it does not check that it was
    /// DEFERRED (the caller did) and records no event (the caller records DECLINED).
    public func failDeferred(transactionID: String, code: UInt32, reason: String, message: String) throws {
        guard let position = state.transactionPositions[transactionID], state.transactions[position].state == .deferred
        else { return }
        state.transactions[position].state = .failed
        state.transactions[position].errorCode = code
        state.transactions[position].errorReason = reason
        state.transactions[position].errorMessage = message
    }

    /// DEFERRED transactions asked before `beforeMs`, oldest first (ties in insertion order), at most `limit`.
    public func deferred(before beforeMs: Int64, limit: Int) throws -> [(id: String, accountID: String)] {
        state.transactions.enumerated()
            .filter { $0.element.state == .deferred && $0.element.purchaseMs < beforeMs }
            .sorted { ($0.element.purchaseMs, $0.offset) < ($1.element.purchaseMs, $1.offset) }
            .prefix(max(0, limit))
            .map { (id: $0.element.id, accountID: $0.element.accountID) }
    }

    /// Revokes a purchased transaction: credits taken back as far as the balance goes, the rest recorded as
    /// the shortfall on the transaction and the revocation; a subscription whose latest transaction it is
    /// ends (REVOKED, nothing due, no auto-renew); REFUNDED recorded.
    /// - Throws: ``StoreError`` conflict when it is not purchased or was already revoked.
    public func revoke(transactionID: String, reason: String, nowMs: Int64) throws -> RevocationRecord {
        try atomically {
            guard let position = state.transactionPositions[transactionID],
                state.transactions[position].state == .purchased
            else {
                throw StoreError(.conflict, "transaction \(transactionID) is not purchased")
            }
            let revoked = state.transactions[position]
            guard revoked.revokedMs == 0 else {
                throw StoreError(.conflict, "transaction \(transactionID) was already refunded")
            }
            var shortfall: Int64 = 0
            if revoked.credits > 0 {
                let owed = Int64(clamping: revoked.credits)
                let balance = Int64(clamping: state.accounts[revoked.accountID]?.creditBalance ?? 0)
                let taken = min(balance, owed)
                shortfall = owed - taken
                if taken > 0 {
                    try addCredits(
                        -taken, account: revoked.accountID, transaction: transactionID, reason: "refund", nowMs: nowMs)
                }
            }
            state.transactions[position].revokedMs = nowMs
            state.transactions[position].revocationReason = reason
            state.transactions[position].refundCreditShortfall = UInt64(shortfall)
            let ended = state.subscriptions.values.filter { $0.latestTransactionID == transactionID }.map(\.originalID)
            for originalID in ended {
                state.subscriptions[originalID]?.state = .revoked
                state.subscriptions[originalID]?.dueMs = 0
                state.subscriptions[originalID]?.willAutoRenew = false
                state.subscriptionUpdatedMs[originalID] = nowMs
            }
            // The feed's unique transaction id (reached only by a revocation at time 0, which leaves revokedMs 0).
            guard !state.revocations.contains(where: { $0.transactionID == transactionID }) else {
                throw StoreError(.conflict, "transaction \(transactionID) was already refunded")
            }
            let revocation = RevocationRecord(
                cursor: state.nextRevocationCursor, transactionID: transactionID,
                originalTransactionID: revoked.originalID,
                accountID: revoked.accountID, revokedMs: nowMs, reason: reason, creditShortfall: UInt64(shortfall))
            state.nextRevocationCursor += 1
            state.revocations.append(revocation)
            try recordEvent(
                EventRecord(.refunded, revoked, nowMs: nowMs, reason: reason, creditShortfall: UInt64(shortfall)))
            return revocation
        }
    }

    /// Undoes a revocation: the row unmarked, the credits it took given back, its revocation out of the feed,
    /// REFUND_REVERSED recorded. The subscription is the caller's to restore.
    /// - Throws: ``StoreError`` conflict when it is not a revoked purchase.
    public func reinstate(transactionID: String, reason: String, nowMs: Int64) throws -> TransactionRecord {
        try atomically {
            guard let position = state.transactionPositions[transactionID],
                state.transactions[position].state == .purchased, state.transactions[position].revokedMs != 0
            else {
                throw StoreError(.conflict, "transaction \(transactionID) is not a revoked purchase")
            }
            let current = state.transactions[position]
            let given = Int64(clamping: current.credits) - Int64(clamping: current.refundCreditShortfall)
            if given > 0 {
                try addCredits(
                    given, account: current.accountID, transaction: transactionID, reason: "reinstated", nowMs: nowMs)
            }
            state.transactions[position].revokedMs = 0
            state.transactions[position].revocationReason = ""
            state.transactions[position].refundCreditShortfall = 0
            state.revocations.removeAll { $0.transactionID == transactionID }
            let reinstated = state.transactions[position]
            try recordEvent(EventRecord(.refundReversed, reinstated, nowMs: nowMs, reason: reason))
            return reinstated
        }
    }

    // MARK: Accounts

    /// The account with `id`.
    public func account(id: String) throws -> AccountRecord? {
        state.accounts[id]
    }

    /// Nothing to do: writes run one at a time.
    public func serializeOnAccount(_ accountID: String) throws {}

    /// Moves `amount` credits and records the movement.
    /// - Throws: ``StoreError`` conflict, with nothing changed, when the balance would go below zero (or past
    ///   the ledger's 64-bit column); notFound for an account that does not exist.
    public func addCredits(_ amount: Int64, account: String, transaction: String?, reason: String, nowMs: Int64) throws
    {
        guard var record = state.accounts[account] else { throw StoreError(.notFound, "no account \(account)") }
        let (balance, overflow) = Int64(clamping: record.creditBalance).addingReportingOverflow(amount)
        guard !overflow, balance >= 0 else {
            throw StoreError(
                .conflict,
                "account \(account) holds \(record.creditBalance) credits: a change of \(amount) would leave \(overflow ? "too many" : "fewer than 0")"
            )
        }
        record.creditBalance = UInt64(balance)
        state.accounts[account] = record
        state.creditMovements.append(
            InMemoryLedger.State.CreditMovement(
                accountID: account, amount: amount, transactionID: transaction, reason: reason, createdMs: nowMs))
    }

    /// The answer kept for `key` (nil without a key or an answer).
    /// - Throws: ``StoreError`` keyReused when the key was used for another operation or request.
    public func remembered(account: String, key: String?, operation: String, hash: [UInt8]) throws -> [UInt8]? {
        guard let key, let answer = state.idempotentAnswers[account]?[key] else { return nil }
        guard answer.operation == operation, answer.requestHash == hash else {
            throw StoreError(
                .keyReused,
                "idempotency-key \"\(key)\" was already used for a different \(answer.operation) request; use a new key for a new request"
            )
        }
        return answer.response
    }

    /// Keeps an answer for `key` (nothing without a key); one kept already stays unless `replacing`.
    public func remember(
        _ response: [UInt8], account: String, key: String?, operation: String, hash: [UInt8], nowMs: Int64,
        replacing: Bool
    ) throws {
        guard let key, replacing || state.idempotentAnswers[account]?[key] == nil else { return }
        state.idempotentAnswers[account, default: [:]][key] = InMemoryLedger.State.IdempotentAnswer(
            operation: operation, requestHash: hash, response: response, createdMs: nowMs)
    }

    /// What the store did with the processor's event `id`.
    public func processorEventOutcome(id: String) throws -> String? { state.processorEvents[id]?.outcome }

    /// Records the event once.
    public func recordProcessorEvent(id: String, type: String, outcome: String, nowMs: Int64) throws -> Bool {
        guard state.processorEvents[id] == nil else { return false }
        state.processorEvents[id] = (type, outcome, nowMs)
        return true
    }

    /// The dispute with the processor's id `id`.
    public func dispute(id: String) throws -> Dispute? { state.disputes[id] }

    /// The disputes of transaction `transactionID`, by id.
    public func disputes(transactionID: String) throws -> [Dispute] {
        state.disputes.values.filter { $0.transactionID == transactionID }.sorted { $0.id < $1.id }
    }

    /// Records a dispute or its new state.
    public func saveDispute(_ dispute: Dispute) throws { state.disputes[dispute.id] = dispute }

    /// The account's customer at `processor`.
    public func paymentProfile(account: String, processor: String) throws -> PaymentProfile? {
        state.paymentProfiles[account]?[processor]
    }

    /// Writes the profile; notFound for an account that does not exist (the ledger's foreign key).
    public func savePaymentProfile(_ profile: PaymentProfile) throws {
        try requireAccount(profile.accountID)
        state.paymentProfiles[profile.accountID, default: [:]][profile.processor] = profile
    }

    // MARK: Payment intents

    /// The intent with `id`.
    public func intent(id: String) throws -> PaymentIntent? {
        state.intents[id]
    }

    /// Writes `intent` pending, with no outcome, attempted at `nowMs`.
    /// - Throws: ``StoreError`` inProgress when the account has a pending intent for the same owned-once
    ///   product, and (as the ledger, which maps every unique violation here so) when the id is taken;
    ///   notFound for an account that does not exist.
    public func insertIntent(_ intent: PaymentIntent, nowMs: Int64) throws {
        var row = intent
        row.state = .pending
        row.outcome = ""
        row.attemptMs = nowMs
        row.creditsPerUnit = Self.signed(intent.creditsPerUnit)
        guard state.intents[row.id] == nil, !blocksAnotherPending(row) else { throw Self.inProgress(intent) }
        try requireAccount(row.accountID)
        state.intents[row.id] = row
    }

    /// Makes the stored intent pending again under `owner`, attempted at `nowMs`, with no outcome; returns
    /// `intent` so changed (as the ledger does, whatever the stored row held).
    /// - Throws: ``StoreError`` inProgress when another intent for the same owned-once product is pending.
    public func reopen(_ intent: PaymentIntent, owner: String, nowMs: Int64) throws -> PaymentIntent {
        if var row = state.intents[intent.id] {
            row.state = .pending
            row.outcome = ""
            row.owner = owner
            row.attemptMs = nowMs
            guard !blocksAnotherPending(row) else { throw Self.inProgress(intent) }
            state.intents[row.id] = row
        }
        var reopened = intent
        reopened.state = .pending
        reopened.outcome = ""
        reopened.owner = owner
        reopened.attemptMs = nowMs
        return reopened
    }

    /// Sets the intent's state and outcome, attempted at `nowMs` (nothing for an unknown id).
    public func settle(_ intentID: String, _ state: PaymentIntent.State, outcome: String, nowMs: Int64) throws {
        guard var row = self.state.intents[intentID] else { return }
        row.state = state
        row.outcome = outcome
        row.attemptMs = nowMs
        guard !blocksAnotherPending(row) else { throw Self.inProgress(row) }
        self.state.intents[intentID] = row
    }

    /// Settles the intent only while it is pending under `intent`'s owner and attempt; true when it did.
    public func settleIfUnchanged(
        _ intent: PaymentIntent, _ state: PaymentIntent.State, outcome: String, nowMs: Int64
    ) throws -> Bool {
        guard var row = self.state.intents[intent.id], row.state == .pending, row.owner == intent.owner,
            row.attemptMs == intent.attemptMs
        else {
            return false
        }
        row.state = state
        row.outcome = outcome
        row.attemptMs = nowMs
        self.state.intents[intent.id] = row
        return true
    }

    /// Ids of the account's pending intents for any of `productIDs`, in id order (the ledger's is unspecified).
    public func pendingIntentIDs(accountID: String, productIDs: [String]) throws -> [String] {
        state.intents.values
            .filter { $0.accountID == accountID && $0.state == .pending && productIDs.contains($0.productID) }
            .map(\.id)
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    // MARK: Subscriptions

    /// The subscription whose first purchase is `originalID`.
    public func subscription(originalID: String) throws -> Subscription? {
        state.subscriptions[originalID]
    }

    /// The account's subscriptions to any of `productIDs`, the latest ending first, then by original id.
    public func subscriptions(accountID: String, productIDs: [String]) throws -> [Subscription] {
        state.subscriptions.values
            .filter { $0.accountID == accountID && productIDs.contains($0.productID) }
            .sorted(by: Self.endsLater)
    }

    /// Writes the subscription: a new one, or every field of the stored one but its account (as the ledger's
    /// upsert). Live → EXPIRED records EXPIRED.
    /// - Throws: ``StoreError`` notFound for a new subscription of an account that does not exist.
    public func saveSubscription(_ subscription: Subscription, nowMs: Int64) throws {
        try atomically {
            let before = state.subscriptions[subscription.originalID]
            if subscription.state == .expired, let before, before.isLive {
                try recordEvent(
                    EventRecord(
                        type: .expired, accountID: subscription.accountID,
                        transactionID: subscription.latestTransactionID,
                        originalTransactionID: subscription.originalID, productID: subscription.productID,
                        createdMs: nowMs,
                        expirationReason: subscription.expirationReason))
            }
            var row = subscription
            if let before {
                row.accountID = before.accountID
            } else {
                try requireAccount(subscription.accountID)
            }
            state.subscriptions[row.originalID] = row
            state.subscriptionUpdatedMs[row.originalID] = nowMs
        }
    }

    /// True when any account used `nonce` before.
    public func offerNonceUsed(_ nonce: String) throws -> Bool { state.offerNonces[nonce] != nil }

    /// Uses `nonce` once: false when any account used it before (nothing written).
    public func useOfferNonce(_ nonce: String, accountID: String, nowMs: Int64) throws -> Bool {
        guard state.offerNonces[nonce] == nil else { return false }
        state.offerNonces[nonce] = InMemoryLedger.State.OfferNonce(accountID: accountID, createdMs: nowMs)
        return true
    }

    // MARK: Refund requests

    /// The request about `transactionID`.
    public func refundRequest(transactionID: String) throws -> RefundRequest? {
        state.refundRequests[transactionID]
    }

    /// Writes a new request, undecided (as the ledger's INSERT, whatever `request` says of a decision).
    /// - Throws: ``StoreError`` conflict when the transaction has one already.
    public func insertRefundRequest(_ request: RefundRequest) throws {
        guard state.refundRequests[request.transactionID] == nil else {
            throw StoreError(.conflict, "transaction \(request.transactionID) has a refund request already")
        }
        var row = request
        row.decidedMs = 0
        row.decisionReason = ""
        state.refundRequests[row.transactionID] = row
    }

    /// Writes the decision (state, time, reason) over the stored request while it is in `from`; false otherwise.
    public func updateRefundRequest(_ request: RefundRequest, from: RefundRequest.State) throws -> Bool {
        guard var row = state.refundRequests[request.transactionID], row.state == from else { return false }
        row.state = request.state
        row.decidedMs = request.decidedMs
        row.decisionReason = request.decisionReason
        state.refundRequests[row.transactionID] = row
        return true
    }

    // MARK: Signing keys and revocations

    public func signingKeys() throws -> [SigningKeyRecord] { state.signingKeys.map(\.key) }

    public func addSigningKey(_ key: SigningKeyRecord, sealedPrivateKey: [UInt8]?) throws {
        guard !state.signingKeys.contains(where: { $0.key.id == key.id }) else { return }
        state.signingKeys.append((key, sealedPrivateKey))
    }

    public func sealedPrivateKey(id: String) throws -> [UInt8]? {
        state.signingKeys.first { $0.key.id == id }?.sealed
    }

    public func sealPrivateKey(id: String, sealed: [UInt8]) throws {
        guard let index = state.signingKeys.firstIndex(where: { $0.key.id == id }),
            state.signingKeys[index].sealed == nil
        else { return }
        state.signingKeys[index].sealed = sealed
    }

    public func retireSigningKey(id: String, atMs: Int64) throws {
        guard let index = state.signingKeys.firstIndex(where: { $0.key.id == id }) else { return }
        state.signingKeys[index].key.notAfterMs = atMs
    }

    public func revocations(after cursor: UInt64, limit: Int) throws -> [RevocationRecord] {
        Array(state.revocations.filter { $0.cursor > cursor }.prefix(max(limit, 0)))
    }

    public func latestRevocationCursor() throws -> UInt64 { state.revocations.last?.cursor ?? 0 }

    // MARK: Webhooks

    public func insertWebhook(_ webhook: WebhookRecord, secret: [UInt8]) throws {
        guard !state.webhooks.contains(where: { $0.webhook.id == webhook.id }) else {
            throw StoreError(.conflict, "webhook \(webhook.id) exists already")
        }
        state.webhooks.append((webhook, secret))
    }

    public func webhooksWithSecrets() throws -> [(webhook: WebhookRecord, secret: [UInt8])] {
        state.webhooks.sorted { ($0.webhook.createdMs, $0.webhook.id) < ($1.webhook.createdMs, $1.webhook.id) }
    }

    public func removeWebhook(id: String) throws -> Bool {
        state.webhookDeliveries[id] = nil
        let before = state.webhooks.count
        state.webhooks.removeAll { $0.webhook.id == id }
        return state.webhooks.count < before
    }

    public func webhookDeliveries(
        webhookID: String?, state wanted: WebhookDelivery.State?, limit: Int
    ) throws -> [WebhookDelivery] {
        let all = state.webhookDeliveries.filter { webhookID == nil || $0.key == webhookID }.values.flatMap(\.values)
        return Array(
            all.filter { wanted == nil || $0.state == wanted }
                .sorted { ($0.eventID, $1.webhookID) > ($1.eventID, $0.webhookID) }
                .prefix(max(limit, 0)))
    }

    public func redriveWebhookDeliveries(webhookID: String?, eventID: UInt64?, nowMs: Int64) throws -> Int {
        for (hook, deliveries) in state.webhookDeliveries where webhookID == nil || hook == webhookID {
            for (event, var delivery) in deliveries
            where delivery.state == .failed && (eventID == nil || event == eventID) {
                delivery.state = .pending
                delivery.attempts = 0
                delivery.firstAttemptMs = 0
                delivery.nextAttemptMs = nowMs
                state.webhookDeliveries[hook]?[event] = delivery
            }
        }
        return state.webhookDeliveries.values.flatMap(\.values)
            .filter { $0.state == .pending && $0.nextAttemptMs == nowMs && $0.attempts == 0 }.count
    }

    public func leastEnqueuedThrough() throws -> UInt64? { state.webhooks.map(\.webhook.enqueuedThrough).min() }

    public func queueWebhookDelivery(webhookID: String, eventID: UInt64, accountID: String, nowMs: Int64) throws {
        guard state.webhookDeliveries[webhookID]?[eventID] == nil else { return }
        state.webhookDeliveries[webhookID, default: [:]][eventID] = WebhookDelivery(
            webhookID: webhookID, eventID: eventID, accountID: accountID, nextAttemptMs: nowMs)
    }

    public func setEnqueuedThrough(webhookID: String, eventID: UInt64) throws {
        guard let index = state.webhooks.firstIndex(where: { $0.webhook.id == webhookID }) else { return }
        state.webhooks[index].webhook.enqueuedThrough = eventID
    }

    public func dueWebhookDeliveries(webhookID: String, nowMs: Int64, limit: Int) throws -> [WebhookDelivery] {
        let pending = (state.webhookDeliveries[webhookID] ?? [:]).values.filter { $0.state == .pending }
        var heads: [String: WebhookDelivery] = [:]
        for delivery in pending where heads[delivery.accountID].map({ delivery.eventID < $0.eventID }) ?? true {
            heads[delivery.accountID] = delivery
        }
        return Array(
            heads.values.filter { $0.nextAttemptMs <= nowMs }.sorted { $0.eventID < $1.eventID }.prefix(max(limit, 0)))
    }

    public func recordWebhookAttempt(_ delivery: WebhookDelivery, leaseOwner: String) throws {
        guard var stored = state.webhookDeliveries[delivery.webhookID]?[delivery.eventID] else { return }
        if delivery.state == .delivered {
            stored.state = .delivered
            stored.attempts = delivery.attempts
            stored.firstAttemptMs = delivery.firstAttemptMs
            stored.deliveredMs = delivery.deliveredMs
            stored.lastError = ""
        } else {
            guard stored.state == .pending, state.webhookLease?.owner == leaseOwner else { return }
            stored.state = delivery.state
            stored.attempts = delivery.attempts
            stored.firstAttemptMs = delivery.firstAttemptMs
            stored.nextAttemptMs = delivery.nextAttemptMs
            stored.lastError = String(delivery.lastError.prefix(500))
        }
        state.webhookDeliveries[delivery.webhookID]?[delivery.eventID] = stored
    }

    public func webhookLease() throws -> (owner: String, untilMs: Int64)? { state.webhookLease }

    public func takeWebhookLease(owner: String, untilMs: Int64) throws { state.webhookLease = (owner, untilMs) }

    public func renewWebhookLease(owner: String, untilMs: Int64) throws -> Bool {
        guard state.webhookLease?.owner == owner else { return false }
        state.webhookLease = (owner, untilMs)
        return true
    }

    public func releaseWebhookLease(owner: String) throws {
        if state.webhookLease?.owner == owner { state.webhookLease = nil }
    }

    // MARK: Service credentials

    public func addServiceCredential(_ credential: ServiceCredentialRecord, tokenHash: [UInt8]) throws {
        guard
            !state.serviceCredentials.contains(where: { $0.credential.id == credential.id || $0.tokenHash == tokenHash }
            )
        else {
            throw StoreError(.conflict, "service credential \(credential.id) or its secret exists already")
        }
        state.serviceCredentials.append((credential, tokenHash))
    }

    public func serviceCredential(tokenHash: [UInt8]) throws -> ServiceCredentialRecord? {
        state.serviceCredentials.first { $0.tokenHash == tokenHash && $0.credential.revokedMs == 0 }?.credential
    }

    /// Oldest first, then by id.
    public func serviceCredentials() throws -> [ServiceCredentialRecord] {
        state.serviceCredentials.map(\.credential).sorted { ($0.createdMs, $0.id) < ($1.createdMs, $1.id) }
    }

    public func revokeServiceCredential(id: String, nowMs: Int64) throws -> Bool {
        guard
            let index = state.serviceCredentials.firstIndex(where: {
                $0.credential.id == id && $0.credential.revokedMs == 0
            })
        else {
            return false
        }
        state.serviceCredentials[index].credential.revokedMs = nowMs
        return true
    }

    public func revokedServiceCredentialIDs() throws -> Set<String> {
        Set(state.serviceCredentials.filter { $0.credential.revokedMs > 0 }.map(\.credential.id))
    }

    // MARK: Events

    /// Records `event` with the next id.
    @discardableResult
    public func recordEvent(_ event: EventRecord) throws -> EventRecord {
        var recorded = event
        recorded.id = state.nextEventID
        state.nextEventID += 1
        var row = recorded
        row.creditShortfall = Self.signed(event.creditShortfall)
        state.events.append(row)
        return recorded
    }

    /// The highest event id (0: none).
    public func latestEventID() throws -> UInt64 {
        state.events.last?.id ?? 0
    }

    /// Events after `cursor`, oldest first, at most `limit`: of one account or all, of `types` or any.
    public func events(after cursor: UInt64, limit: Int, accountID: String?, types: [EventKind]) throws -> [EventRecord]
    {
        Array(
            state.events
                .filter {
                    $0.id > cursor && (accountID == nil || $0.accountID == accountID)
                        && (types.isEmpty || types.contains($0.type))
                }
                .prefix(max(0, limit)))
    }

    // MARK: Constraints

    /// Runs `change`, restoring the state when it throws: a method is all or nothing, as one SQL statement.
    private func atomically<T>(_ change: () throws -> T) throws -> T {
        let before = state
        do {
            return try change()
        } catch {
            state = before
            throw error
        }
    }

    /// True when `row` and another transaction would break a unique index: the same payment, or both live
    /// purchases of one non-consumable by one account (`transactions_owned_once`).
    private func collides(_ row: TransactionRecord) -> Bool {
        state.transactions.contains { other in
            other.id != row.id
                && ((row.paymentID != nil && other.paymentID == row.paymentID)
                    || (Self.ownedOnce(row) && Self.ownedOnce(other) && other.accountID == row.accountID
                        && other.productID == row.productID))
        }
    }

    /// The rows of the ledger's `transactions_owned_once` index: purchased, unrevoked non-consumables.
    private static func ownedOnce(_ row: TransactionRecord) -> Bool {
        row.state == .purchased && row.revokedMs == 0 && row.productType == .nonConsumable
    }

    /// True when `row` and another intent would both be pending exclusive intents of one account and product
    /// (`payment_intents_one_open_exclusive`).
    private func blocksAnotherPending(_ row: PaymentIntent) -> Bool {
        guard row.state == .pending, row.exclusive else { return false }
        return state.intents.values.contains {
            $0.id != row.id && $0.state == .pending && $0.exclusive && $0.accountID == row.accountID
                && $0.productID == row.productID
        }
    }

    private static func inProgress(_ intent: PaymentIntent) -> StoreError {
        StoreError(
            .inProgress,
            "a payment for \(intent.productID) is already in progress for this account; try again when it has finished")
    }

    /// The ledger's foreign keys: transactions, credit movements, intents and subscriptions name an account.
    private func requireAccount(_ id: String) throws {
        guard state.accounts[id] != nil else { throw StoreError(.notFound, "no account \(id)") }
    }

    /// The ledger's `ORDER BY expires_ms DESC, original_id` (bytewise, as SQLite compares text): true when
    /// `a` comes first.
    private static func endsLater(_ a: Subscription, _ b: Subscription) -> Bool {
        a.expiresMs != b.expiresMs
            ? a.expiresMs > b.expiresMs : a.originalID.utf8.lexicographicallyPrecedes(b.originalID.utf8)
    }

    /// `value` as the ledger's signed 64-bit columns keep it: at most `Int64.max`.
    static func signed(_ value: UInt64) -> UInt64 {
        min(value, UInt64(Int64.max))
    }
}
