import KioskStoreCore

// An account's entitlements are computed from its transactions and subscriptions (``EntitlementRules``) whenever
// they are asked for. The `entitlements` table keeps them as last recorded, so a write that changes them records
// ENTITLEMENT_STARTED / ENTITLEMENT_ENDED events in the same transaction, and a sweep finds the ones whose time ran
// out with nothing written.

extension ActiveEntitlement {
    package init(row: LedgerRow) throws {
        self.init(
            id: try row["entitlement_id"], productID: try row["product_id"], transactionID: try row["transaction_id"],
            originalTransactionID: try row["original_id"], source: EntitlementSource(rawValue: try row["source"]),
            expiresMs: try row["expires_ms"], purchaseMs: try row["purchase_ms"], willRenew: try row["will_renew"])
    }
}

extension Ledger {
    /// The account's entitlements at `nowMs`, computed from its ledger rows (one read of each table).
    public func entitlements(
        accountID: String, catalog: Catalog, nowMs: Int64, renewalPendingMs: Int64
    ) async throws -> [ActiveEntitlement] {
        guard !catalog.entitlements.isEmpty else { return [] }
        return try await backend.read { db in
            try db.currentEntitlements(
                accountID: accountID, catalog: catalog, nowMs: nowMs, renewalPendingMs: renewalPendingMs
            ).values.sorted {
                $0.id < $1.id
            }
        }
    }

    /// Accounts with a recorded entitlement whose end is at or before `nowMs` (the expiry sweep's work), at most
    /// `limit`, after `cursor` (an account id) in id order.
    public func accountsWithEntitlementsEnding(
        byMs nowMs: Int64, after cursor: String, limit: Int
    ) async throws
        -> [String]
    {
        try await backend.read { db in
            try db.values(
                String.self,
                """
                SELECT DISTINCT account_id FROM entitlements WHERE expires_ms > 0 AND expires_ms <= ? AND account_id > ?
                ORDER BY account_id LIMIT ?
                """, [nowMs, cursor, limit])
        }
    }
}

extension LedgerDatabase {
    /// The account's entitlements at `nowMs`, by id, from its transactions and subscriptions of products that grant one
    /// (`renewalPendingMs`: see ``EntitlementRules/active(catalog:transactions:subscriptions:nowMs:renewalPendingMs:)``).
    public func currentEntitlements(
        accountID: String, catalog: Catalog, nowMs: Int64, renewalPendingMs: Int64
    ) throws -> [String: ActiveEntitlement] {
        let granting = catalog.grantingProductIDs
        guard !granting.isEmpty else { return [:] }
        let marks = Array(repeating: "?", count: granting.count).joined(separator: ", ")
        let arguments: [any LedgerArgument] = [accountID] + granting
        let transactions = try fetchAll(
            "SELECT * FROM transactions WHERE account_id = ? AND product_id IN (\(marks)) AND state = 1 AND revoked_ms = 0",
            arguments
        ).map(TransactionRecord.init)
        let subscriptions = try fetchAll(
            "SELECT * FROM subscriptions WHERE account_id = ? AND product_id IN (\(marks))", arguments
        ).map(SubscriptionRecord.init)
        return EntitlementRules.active(
            catalog: catalog, transactions: transactions, subscriptions: subscriptions, nowMs: nowMs,
            renewalPendingMs: renewalPendingMs)
    }

    /// The account's entitlements as last recorded, by id.
    public func recordedEntitlements(accountID: String) throws -> [String: ActiveEntitlement] {
        let rows = try fetchAll("SELECT * FROM entitlements WHERE account_id = ?", [accountID]).map(
            ActiveEntitlement.init)
        return Dictionary(rows.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// Records the account's entitlements as they are at `nowMs`, in the write in progress, with an
    /// ENTITLEMENT_STARTED event for each it did not hold and an ENTITLEMENT_ENDED event for each it no longer holds
    /// (in entitlement id order). A change of what grants a held entitlement (a renewal, a second purchase) is kept
    /// without an event. Returns how many ended.
    @discardableResult
    public func settleEntitlements(
        accountID: String, catalog: Catalog, nowMs: Int64, renewalPendingMs: Int64
    ) throws -> Int {
        let now = try currentEntitlements(
            accountID: accountID, catalog: catalog, nowMs: nowMs, renewalPendingMs: renewalPendingMs)
        let before = try recordedEntitlements(accountID: accountID)
        var ended = 0
        for (id, old) in before.sorted(by: { $0.key < $1.key }) where now[id] == nil {
            try execute(
                "DELETE FROM entitlements WHERE account_id = ? AND entitlement_id = ?", [accountID, id])
            var event = EventRecord(
                type: .entitlementEnded, accountID: accountID, transactionID: old.transactionID,
                originalTransactionID: old.originalTransactionID, productID: old.productID, createdMs: nowMs,
                reason: try endReason(old, catalog: catalog))
            event.entitlementID = id
            try appendEvent(event)
            ended += 1
        }
        for (id, current) in now.sorted(by: { $0.key < $1.key }) where before[id] != current {
            try execute(
                """
                INSERT INTO entitlements (account_id, entitlement_id, product_id, transaction_id, original_id, source,
                  expires_ms, purchase_ms, will_renew, started_ms)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (account_id, entitlement_id) DO UPDATE SET product_id = excluded.product_id,
                  transaction_id = excluded.transaction_id, original_id = excluded.original_id, source = excluded.source,
                  expires_ms = excluded.expires_ms, purchase_ms = excluded.purchase_ms, will_renew = excluded.will_renew
                """,
                [
                    accountID, id, current.productID, current.transactionID, current.originalTransactionID,
                    current.source.rawValue, current.expiresMs, current.purchaseMs, current.willRenew, nowMs,
                ])
            guard before[id] == nil else { continue }
            var event = EventRecord(
                type: .entitlementStarted, accountID: accountID, transactionID: current.transactionID,
                originalTransactionID: current.originalTransactionID, productID: current.productID, createdMs: nowMs,
                reason: current.source.rawValue)
            event.entitlementID = id
            event.expiresMs = current.expiresMs
            try appendEvent(event)
        }
        return ended
    }

    /// Why `old` ended: `revoked` (its transaction was refunded or revoked), `catalog` (its product no longer grants
    /// it), else `expired`.
    private func endReason(_ old: ActiveEntitlement, catalog: Catalog) throws -> String {
        guard catalog.product(old.productID)?.entitlements.contains(old.id) == true else { return "catalog" }
        let revoked = try value(Int64.self, "SELECT revoked_ms FROM transactions WHERE id = ?", [old.transactionID])
        return (revoked ?? 0) > 0 ? "revoked" : "expired"
    }
}
