import Foundation
import GRDB
import KioskAPI
import KioskStoreCore

extension PaymentIntent {
    package init(row: LedgerRow) throws {
        let kindName: String = try row["kind"]
        let stateName: String = try row["state"]
        guard let kind = Kind(rawValue: kindName), let state = State(rawValue: stateName) else {
            throw LedgerError(
                .schema, "payment intent of kind \(kindName) in state \(stateName): not one this version knows")
        }
        self.init(
            kind: kind, paymentID: try row["payment_id"], transactionID: try row["transaction_id"],
            accountID: try row["account_id"],
            productID: try row["product_id"], productType: try row.enumeration("product_type"),
            creditsPerUnit: UInt64(clamping: try row["credits_per_unit"] as Int64),
            subscriptionPeriod: try row["subscription_period"],
            quantity: UInt32(clamping: try row["quantity"] as Int64), unitPrice: try row["unit_price"],
            currency: try row["currency"],
            paymentMethod: try row["payment_method"], purchaseMs: try row["purchase_ms"], offerID: try row["offer_id"],
            idempotencyKey: try row["idempotency_key"], requestHash: try row["request_hash"] as [UInt8], state: state,
            outcome: try row["outcome"], owner: try row["owner"], createdMs: try row["created_ms"],
            attemptMs: try row["updated_ms"])
        storefront = try row["storefront"]
    }
}

extension Ledger {
    /// Intents of the kinds this version settles: a newer replica on the same ledger may write kinds it does not
    /// know, which that replica reconciles (an older one neither reads them as something else nor stops on them).
    static var knownKinds: String {
        "kind IN (" + PaymentIntent.Kind.allCases.map { "'\($0.rawValue)'" }.joined(separator: ", ") + ")"
    }
}

extension Ledger {
    /// The payment-intent table and the constraints that make the database,
    /// not a process-local lock, the guard against charging twice.

    /// Intents reconciliation closed as not charged before `beforeMs`, not looked at again yet (the second look).
    package func closedUncharged(before beforeMs: Int64) throws -> [PaymentIntent] {
        try backend.read { db in
            try db.fetchAll(
                "SELECT * FROM payment_intents WHERE state = 'closed' AND outcome = 'reconciled:not_charged' AND updated_ms < ? AND \(Self.knownKinds) LIMIT 500",
                [beforeMs]
            ).map(PaymentIntent.init)
        }
    }

    /// Intents charged for something the account already owned, whose refund the processor has not confirmed yet.
    package func refundsDue() throws -> [PaymentIntent] {
        try backend.read { db in
            try db.fetchAll(
                "SELECT * FROM payment_intents WHERE state = 'closed' AND outcome LIKE 'refund_due:%' AND \(Self.knownKinds) LIMIT 500"
            )
            .map(PaymentIntent.init)
        }
    }

    /// A page of pending intents, oldest first, after `cursor` (created, id).
    public func openIntents(after cursor: (Int64, String)? = nil, limit: Int = 500) throws -> [PaymentIntent] {
        try backend.read { db in
            try db.fetchAll(
                """
                SELECT * FROM payment_intents WHERE state = 'pending' AND (created_ms > ? OR (created_ms = ? AND id > ?)) AND \(Self.knownKinds)
                ORDER BY created_ms, id LIMIT ?
                """, [cursor?.0 ?? Int64.min, cursor?.0 ?? Int64.min, cursor?.1 ?? "", limit]
            ).map(PaymentIntent.init)
        }
    }

    /// The intent with `id` (`kind:paymentID`).
    public func intent(id: String) throws -> PaymentIntent? {
        try backend.read { db in try db.intent(id: id) }
    }

    /// A page of renewal intents closed while their payment waits for the buyer (`needs_action:…`), oldest first,
    /// after `cursor` (updated, id): one indexed read (`payment_intents_waiting`), however many intents the ledger
    /// holds.
    package func intentsWaitingForBuyer(
        after cursor: (Int64, String)? = nil, limit: Int = 500
    ) throws
        -> [PaymentIntent]
    {
        try backend.read { db in
            try db.fetchAll(
                """
                SELECT * FROM payment_intents WHERE outcome LIKE 'needs_action:%'
                  AND (updated_ms > ? OR (updated_ms = ? AND id > ?))
                ORDER BY updated_ms, id LIMIT ?
                """, [cursor?.0 ?? Int64.min, cursor?.0 ?? Int64.min, cursor?.1 ?? "", limit]
            ).map(PaymentIntent.init)
        }
    }

    /// Intents settled by reconciliation: found charged (and recorded), found not charged (and closed).
    public func reconciledCounts() throws -> (charged: Int, closed: Int) {
        try backend.read { db in
            let charged =
                try db.value(
                    Int.self,
                    "SELECT COUNT(*) FROM payment_intents WHERE outcome LIKE 'reconciled:charged:%' OR outcome LIKE 'second-look:charged:%'"
                ) ?? 0
            let closed =
                try db.value(
                    Int.self, "SELECT COUNT(*) FROM payment_intents WHERE outcome LIKE 'reconciled:not_charged%'") ?? 0
            return (charged, closed)
        }
    }

    /// Counts of intents by state, for checks and the crash test.
    public func intentCounts() throws -> [PaymentIntent.State: Int] {
        try backend.read { db in
            var counts: [PaymentIntent.State: Int] = [:]
            for row in try db.fetchAll("SELECT state, COUNT(*) AS n FROM payment_intents GROUP BY state") {
                if let state = PaymentIntent.State(rawValue: try row["state"]) { counts[state] = try row["n"] }
            }
            return counts
        }
    }
}

// The ledger adapter: the domain's repository ports on SQL (SQLite and PostgreSQL alike).
extension LedgerDatabase {
    public func pendingIntentIDs(accountID: String, productIDs: [String]) throws -> [String] {
        guard !productIDs.isEmpty else { return [] }
        let marks = Array(repeating: "?", count: productIDs.count).joined(separator: ", ")
        return try values(
            String.self,
            "SELECT id FROM payment_intents WHERE account_id = ? AND state = 'pending' AND product_id IN (\(marks))",
            [accountID] + productIDs)
    }

    public func intent(id: String) throws -> PaymentIntent? {
        try fetchOne(LedgerReads.intent, [id]).map(PaymentIntent.init)
    }

    /// Writes a new pending intent.
    /// - Throws: ``StoreError`` ABORTED (10) when the account already has a payment of this owned-once product in flight.
    public func insertIntent(_ intent: PaymentIntent, nowMs: Int64) throws {
        try serializeOnAccount(intent.accountID)
        // Sent without waiting on PostgreSQL: the refusal may come from a later statement of this write.
        try executeLater(
            """
            INSERT INTO payment_intents (id, kind, payment_id, transaction_id, account_id, product_id, product_type,
              credits_per_unit, subscription_period, quantity, unit_price, currency, payment_method, purchase_ms,
              idempotency_key, request_hash, exclusive, state, outcome, owner, created_ms, updated_ms, offer_id, storefront)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', '', ?, ?, ?, ?, ?)
            """,
            [
                intent.id, intent.kind.rawValue, intent.paymentID, intent.transactionID, intent.accountID,
                intent.productID,
                intent.productType.rawValue, Int64(clamping: intent.creditsPerUnit), intent.subscriptionPeriod,
                Int64(intent.quantity),
                intent.unitPrice, intent.currency, intent.paymentMethod, intent.purchaseMs, intent.idempotencyKey,
                intent.requestHash, intent.exclusive, intent.owner, intent.createdMs, nowMs, intent.offerID,
                intent.storefront,
            ]
        ) { error in
            guard error.kind == .uniqueViolation else { return nil }
            return StoreError(
                .inProgress,
                "a payment for \(intent.productID) is already in progress for this account; try again when it has finished"
            )
        }
    }

    /// Takes over a pending or closed intent for another attempt (a client's retry): pending again, owned by `owner`.
    public func reopen(_ intent: PaymentIntent, owner: String, nowMs: Int64) throws -> PaymentIntent {
        try serializeOnAccount(intent.accountID)
        do {
            try execute(
                "UPDATE payment_intents SET state = 'pending', outcome = '', owner = ?, updated_ms = ? WHERE id = ?",
                [owner, nowMs, intent.id])
        } catch let error as LedgerError where error.kind == .uniqueViolation {
            throw StoreError(
                .inProgress,
                "a payment for \(intent.productID) is already in progress for this account; try again when it has finished"
            )
        }
        var reopened = intent
        reopened.state = .pending
        reopened.outcome = ""
        reopened.owner = owner
        reopened.attemptMs = nowMs
        return reopened
    }

    /// Marks an intent completed or closed, with why.
    public func settle(_ intentID: String, _ state: PaymentIntent.State, outcome: String, nowMs: Int64) throws {
        try settle(intentID, account: nil, state, outcome: outcome, nowMs: nowMs)
    }

    /// Marks an intent completed or closed, with why.
    /// - Parameter accountID: the intent's account, when the caller knows it (else it is read first).
    public func settle(
        _ intentID: String, account accountID: String? = nil, _ state: PaymentIntent.State, outcome: String,
        nowMs: Int64
    ) throws {
        if dialect == .postgres,
            let account = try accountID
                ?? value(String.self, "SELECT account_id FROM payment_intents WHERE id = ?", [intentID])
        {
            try serializeOnAccount(account)
        }
        try executeLater(
            "UPDATE payment_intents SET state = ?, outcome = ?, updated_ms = ? WHERE id = ?",
            [state.rawValue, outcome, nowMs, intentID])
    }

    /// Settles an intent only if it is still pending under the same owner (another attempt did not take it over).
    /// Returns true when it did.
    public func settleIfUnchanged(
        _ intent: PaymentIntent, _ state: PaymentIntent.State, outcome: String, nowMs: Int64
    ) throws -> Bool {
        try serializeOnAccount(intent.accountID)
        return try execute(
            "UPDATE payment_intents SET state = ?, outcome = ?, updated_ms = ? WHERE id = ? AND state = 'pending' AND owner = ? AND updated_ms = ?",
            [state.rawValue, outcome, nowMs, intent.id, intent.owner, intent.attemptMs]) > 0
    }
}
