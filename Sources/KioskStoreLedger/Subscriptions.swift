import Foundation
import GRDB
import KioskAPI
import KioskStoreCore

/// A row of the `subscriptions` table is the domain's ``Subscription``: one per original transaction,
/// written in the same ledger transaction as the purchase, renewal, decline, refund or auto-renew change it
/// follows, so it never disagrees with the ledger. `due_ms` is when the renewal engine must look at it next.
public typealias SubscriptionRecord = Subscription

extension Subscription {
    package init(row: LedgerRow) throws {
        let stateValue: Int32 = try row["state"]
        guard let state = Subscription.State(rawValue: stateValue) else {
            throw LedgerError(.schema, "subscription row has state \(stateValue)")
        }
        self.init(
            originalID: try row["original_id"], accountID: try row["account_id"], productID: try row["product_id"],
            paymentMethod: try row["payment_method"], expiresMs: try row["expires_ms"],
            latestTransactionID: try row["latest_transaction_id"])
        self.state = state
        willAutoRenew = try row["will_auto_renew"]
        periodsPaid = try row["periods_paid"]
        graceEndMs = try row["grace_end_ms"]
        retryEndMs = try row["retry_end_ms"]
        dueMs = try row["due_ms"]
        attempts = try row["attempts"]
        expirationReason = Subscription.ExpirationReason(rawValue: try row["expiration_reason"]) ?? .unspecified
        pendingProductID = try row["pending_product_id"]
        offerID = try row["offer_id"]
        offerPeriodsUsed = try row["offer_periods_used"]
        acceptedPrice = try row["accepted_price"]
        acceptedCurrency = try row["accepted_currency"]
        storefront = try row["storefront"]
    }

}

extension Ledger {

    /// The subscription with `originalID`, if any.
    public func subscription(originalID: String) throws -> SubscriptionRecord? {
        try backend.read { db in try db.subscription(originalID: originalID) }
    }

    /// An account's subscriptions, newest first.
    public func subscriptions(accountID: String) throws -> [SubscriptionRecord] {
        try backend.read { db in
            try db.fetchAll(
                "SELECT * FROM subscriptions WHERE account_id = ? ORDER BY expires_ms DESC, original_id", [accountID]
            )
            .map(SubscriptionRecord.init)
        }
    }

    /// Live subscriptions the renewal engine must look at by `nowMs`, soonest first, after `cursor` (due, original id).
    public func dueSubscriptions(
        atMs nowMs: Int64, after cursor: (Int64, String)? = nil, limit: Int = 200
    ) throws -> [SubscriptionRecord] {
        try backend.read { db in
            try db.fetchAll(
                """
                SELECT * FROM subscriptions WHERE state IN (1, 2, 3) AND due_ms <= ? AND (due_ms > ? OR (due_ms = ? AND original_id > ?))
                ORDER BY due_ms, original_id LIMIT ?
                """, [nowMs, cursor?.0 ?? Int64.min, cursor?.0 ?? Int64.min, cursor?.1 ?? "", limit]
            ).map(SubscriptionRecord.init)
        }
    }

}

// The ledger adapter: the domain's repository ports on SQL (SQLite and PostgreSQL alike).
extension LedgerDatabase {
    /// Writes the row; a subscription that ends here (ACTIVE, grace or billing retry → EXPIRED) records EXPIRED.
    public func saveSubscription(_ s: Subscription, nowMs: Int64) throws {
        if s.state == .expired, let before = try subscription(originalID: s.originalID), before.isLive {
            try appendEvent(
                EventRecord(
                    type: .expired, accountID: s.accountID, transactionID: s.latestTransactionID,
                    originalTransactionID: s.originalID,
                    productID: s.productID, createdMs: nowMs, expirationReason: s.expirationReason))
        }
        try execute(
            """
            INSERT INTO subscriptions (original_id, account_id, product_id, state, will_auto_renew, payment_method, periods_paid,
              expires_ms, grace_end_ms, retry_end_ms, due_ms, attempts, expiration_reason, pending_product_id,
              latest_transaction_id, offer_id, offer_periods_used, accepted_price, updated_ms, accepted_currency, storefront)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (original_id) DO UPDATE SET product_id = excluded.product_id, state = excluded.state,
              will_auto_renew = excluded.will_auto_renew, payment_method = excluded.payment_method,
              periods_paid = excluded.periods_paid, expires_ms = excluded.expires_ms, grace_end_ms = excluded.grace_end_ms,
              retry_end_ms = excluded.retry_end_ms, due_ms = excluded.due_ms, attempts = excluded.attempts,
              expiration_reason = excluded.expiration_reason, pending_product_id = excluded.pending_product_id,
              latest_transaction_id = excluded.latest_transaction_id, offer_id = excluded.offer_id,
              offer_periods_used = excluded.offer_periods_used, accepted_price = excluded.accepted_price,
              updated_ms = excluded.updated_ms, accepted_currency = excluded.accepted_currency,
              storefront = excluded.storefront
            """,
            [
                s.originalID, s.accountID, s.productID, s.state.rawValue, s.willAutoRenew, s.paymentMethod,
                s.periodsPaid, s.expiresMs, s.graceEndMs,
                s.retryEndMs, s.dueMs, s.attempts, s.expirationReason.rawValue, s.pendingProductID,
                s.latestTransactionID, s.offerID, s.offerPeriodsUsed, s.acceptedPrice, nowMs, s.acceptedCurrency,
                s.storefront,
            ])
    }

    public func subscription(originalID: String) throws -> SubscriptionRecord? {
        try fetchOne("SELECT * FROM subscriptions WHERE original_id = ?", [originalID]).map(SubscriptionRecord.init)
    }

    /// An account's subscriptions to any of `productIDs` (a subscription group), the latest ending first.
    public func subscriptions(accountID: String, productIDs: [String]) throws -> [SubscriptionRecord] {
        guard !productIDs.isEmpty else { return [] }
        let marks = Array(repeating: "?", count: productIDs.count).joined(separator: ", ")
        return try fetchAll(
            "SELECT * FROM subscriptions WHERE account_id = ? AND product_id IN (\(marks)) ORDER BY expires_ms DESC, original_id",
            [accountID] + productIDs
        ).map(SubscriptionRecord.init)
    }
}
