import Foundation
import GRDB
import KioskAPI
import KioskStoreCore

/// A row of the `subscriptions` table is the domain's ``Subscription``: one per original transaction,
/// written in the same ledger transaction as the purchase, renewal, decline, refund or auto-renew change it
/// follows, so it never disagrees with the ledger. `due_ms` is when the renewal engine must look at it next.
public typealias SubscriptionRecord = Subscription

extension Subscription {
    init(row: LedgerRow) throws {
        let stateValue: Int32 = try row["state"]
        guard let state = Subscription.State(rawValue: stateValue) else {
            throw LedgerError(.schema, "subscription row has state \(stateValue)")
        }
        self.init(originalID: try row["original_id"], accountID: try row["account_id"], productID: try row["product_id"],
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
    }

    /// Writes the row; a subscription that ends here (ACTIVE, grace or billing retry → EXPIRED) records EXPIRED.
    func upsert(_ db: any LedgerDatabase, nowMs: Int64) throws {
        if state == .expired, let before = try Ledger.subscription(db, originalID: originalID), before.isLive {
            try Ledger.recordEvent(EventRecord(
                type: .expired, accountID: accountID, transactionID: latestTransactionID, originalTransactionID: originalID,
                productID: productID, createdMs: nowMs, expirationReason: StoreV1.ExpirationReason(rawValue: expirationReason.rawValue)), db)
        }
        try db.execute(
            """
                INSERT INTO subscriptions (original_id, account_id, product_id, state, will_auto_renew, payment_method, periods_paid,
                  expires_ms, grace_end_ms, retry_end_ms, due_ms, attempts, expiration_reason, pending_product_id,
                  latest_transaction_id, offer_id, offer_periods_used, accepted_price, updated_ms)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (original_id) DO UPDATE SET product_id = excluded.product_id, state = excluded.state,
                  will_auto_renew = excluded.will_auto_renew, payment_method = excluded.payment_method,
                  periods_paid = excluded.periods_paid, expires_ms = excluded.expires_ms, grace_end_ms = excluded.grace_end_ms,
                  retry_end_ms = excluded.retry_end_ms, due_ms = excluded.due_ms, attempts = excluded.attempts,
                  expiration_reason = excluded.expiration_reason, pending_product_id = excluded.pending_product_id,
                  latest_transaction_id = excluded.latest_transaction_id, offer_id = excluded.offer_id,
                  offer_periods_used = excluded.offer_periods_used, accepted_price = excluded.accepted_price,
                  updated_ms = excluded.updated_ms
                """, [
                originalID, accountID, productID, state.rawValue, willAutoRenew, paymentMethod, periodsPaid, expiresMs, graceEndMs,
                retryEndMs, dueMs, attempts, expirationReason.rawValue, pendingProductID, latestTransactionID, offerID, offerPeriodsUsed, acceptedPrice, nowMs,
            ])
    }

}

extension Ledger {
    /// v6: where each auto-renewable subscription stands (``SubscriptionRecord``), and the start of a
    /// subscription transaction's paid period. Subscriptions bought before it never renewed (a buyer
    /// bought again): they are carried over with auto-renew off, so an upgrade charges nobody unasked.
    static let v6Subscriptions = """
        CREATE TABLE subscriptions (
          original_id TEXT PRIMARY KEY,
          account_id TEXT NOT NULL REFERENCES accounts(id),
          product_id TEXT NOT NULL,
          state INTEGER NOT NULL CHECK (state BETWEEN 1 AND 5),
          will_auto_renew INTEGER NOT NULL DEFAULT 1,
          payment_method TEXT NOT NULL,
          periods_paid INTEGER NOT NULL,
          expires_ms INTEGER NOT NULL,
          grace_end_ms INTEGER NOT NULL DEFAULT 0,
          retry_end_ms INTEGER NOT NULL DEFAULT 0,
          due_ms INTEGER NOT NULL,
          attempts INTEGER NOT NULL DEFAULT 0,
          expiration_reason INTEGER NOT NULL DEFAULT 0,
          pending_product_id TEXT NOT NULL DEFAULT '',
          latest_transaction_id TEXT NOT NULL,
          offer_id TEXT NOT NULL DEFAULT '',
          offer_periods_used INTEGER NOT NULL DEFAULT 0,
          accepted_price TEXT NOT NULL DEFAULT '',
          updated_ms INTEGER NOT NULL
        );
        CREATE TABLE offer_nonces (
          nonce TEXT PRIMARY KEY,
          account_id TEXT NOT NULL,
          created_ms INTEGER NOT NULL
        );
        ALTER TABLE transactions ADD COLUMN offer_id TEXT NOT NULL DEFAULT '';
        ALTER TABLE payment_intents ADD COLUMN offer_id TEXT NOT NULL DEFAULT '';
        CREATE INDEX subscriptions_by_account ON subscriptions(account_id);
        CREATE INDEX subscriptions_due ON subscriptions(due_ms) WHERE state IN (1, 2, 3);
        ALTER TABLE transactions ADD COLUMN period_start_ms INTEGER NOT NULL DEFAULT 0;
        UPDATE transactions SET period_start_ms = purchase_ms WHERE product_type IN (3, 4);
        INSERT INTO subscriptions (original_id, account_id, product_id, state, will_auto_renew, payment_method, periods_paid,
          expires_ms, due_ms, latest_transaction_id, updated_ms)
          SELECT t.original_id, t.account_id, t.product_id, 1, 0, t.payment_method,
            (SELECT COUNT(*) FROM transactions c WHERE c.original_id = t.original_id AND c.state = 1),
            t.expires_ms, t.expires_ms, t.id, t.purchase_ms
          FROM transactions t
          WHERE t.product_type = 4 AND t.state = 1 AND t.revoked_ms = 0 AND NOT EXISTS (
            SELECT 1 FROM transactions u WHERE u.original_id = t.original_id AND u.state = 1 AND u.revoked_ms = 0
              AND u.expires_ms > t.expires_ms)
          ON CONFLICT DO NOTHING;
        """

    static func registerV6(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v6-subscriptions") { db in
            try db.execute(sql: v6Subscriptions)
        }
    }

    static func subscription(_ db: any LedgerDatabase, originalID: String) throws -> SubscriptionRecord? {
        try db.fetchOne("SELECT * FROM subscriptions WHERE original_id = ?", [originalID]).map(SubscriptionRecord.init)
    }

    /// The subscription with `originalID`, if any.
    public func subscription(originalID: String) throws -> SubscriptionRecord? {
        try backend.read { db in try Self.subscription(db, originalID: originalID) }
    }

    /// An account's subscriptions, newest first.
    public func subscriptions(accountID: String) throws -> [SubscriptionRecord] {
        try backend.read { db in
            try db.fetchAll("SELECT * FROM subscriptions WHERE account_id = ? ORDER BY expires_ms DESC, original_id", [accountID])
                .map(SubscriptionRecord.init)
        }
    }

    /// Live subscriptions the renewal engine must look at by `nowMs`, soonest first, after `cursor` (due, original id).
    public func dueSubscriptions(atMs nowMs: Int64, after cursor: (Int64, String)? = nil, limit: Int = 200) throws -> [SubscriptionRecord] {
        try backend.read { db in
            try db.fetchAll("""
                    SELECT * FROM subscriptions WHERE state IN (1, 2, 3) AND due_ms <= ? AND (due_ms > ? OR (due_ms = ? AND original_id > ?))
                    ORDER BY due_ms, original_id LIMIT ?
                    """, [nowMs, cursor?.0 ?? Int64.min, cursor?.0 ?? Int64.min, cursor?.1 ?? "", limit]).map(SubscriptionRecord.init)
        }
    }

    /// An account's subscriptions to any of `productIDs` (a subscription group), the latest ending first.
    static func subscriptions(_ db: any LedgerDatabase, accountID: String, productIDs: [String]) throws -> [SubscriptionRecord] {
        guard !productIDs.isEmpty else { return [] }
        let marks = Array(repeating: "?", count: productIDs.count).joined(separator: ", ")
        return try db.fetchAll("SELECT * FROM subscriptions WHERE account_id = ? AND product_id IN (\(marks)) ORDER BY expires_ms DESC, original_id",
                               [accountID] + productIDs).map(SubscriptionRecord.init)
    }
}
