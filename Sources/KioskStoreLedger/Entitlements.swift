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
        accountID: String, map: EntitlementMap, nowMs: Int64, renewalPendingMs: Int64
    ) async throws -> [ActiveEntitlement] {
        guard !map.isEmpty else { return [] }
        return try await backend.read { db in
            try db.currentEntitlements(
                accountID: accountID, map: map, nowMs: nowMs, renewalPendingMs: renewalPendingMs
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
    /// (`renewalPendingMs`: see ``EntitlementRules/active(map:transactions:subscriptions:nowMs:renewalPendingMs:)``).
    public func currentEntitlements(
        accountID: String, map: EntitlementMap, nowMs: Int64, renewalPendingMs: Int64
    ) throws -> [String: ActiveEntitlement] {
        guard !map.isEmpty else { return [:] }
        // Grants (product type 5) name their entitlement in their product id; the rest are the map's products.
        let granting = map.grantingProductIDs
        let marks = Array(repeating: "?", count: granting.count).joined(separator: ", ")
        let products = granting.isEmpty ? "product_type = 5" : "(product_id IN (\(marks)) OR product_type = 5)"
        let transactions = try fetchAll(
            "SELECT * FROM transactions WHERE account_id = ? AND \(products) AND state = 1 AND revoked_ms = 0",
            [accountID] + granting
        ).map(TransactionRecord.init)
        let subscriptions =
            granting.isEmpty
            ? []
            : try fetchAll(
                "SELECT * FROM subscriptions WHERE account_id = ? AND product_id IN (\(marks))", [accountID] + granting
            ).map(SubscriptionRecord.init)
        return EntitlementRules.active(
            map: map, transactions: transactions, subscriptions: subscriptions, nowMs: nowMs,
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
        accountID: String, map: EntitlementMap, nowMs: Int64, renewalPendingMs: Int64
    ) throws -> Int {
        let now = try currentEntitlements(
            accountID: accountID, map: map, nowMs: nowMs, renewalPendingMs: renewalPendingMs)
        let before = try recordedEntitlements(accountID: accountID)
        var ended = 0
        for (id, old) in before.sorted(by: { $0.key < $1.key }) where now[id] == nil {
            try execute(
                "DELETE FROM entitlements WHERE account_id = ? AND entitlement_id = ?", [accountID, id])
            var event = EventRecord(
                type: .entitlementEnded, accountID: accountID, transactionID: old.transactionID,
                originalTransactionID: old.originalTransactionID, productID: old.productID, createdMs: nowMs,
                reason: try endReason(old, map: map))
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

    /// Why `old` ended: `revoked` (its transaction was refunded or revoked), `upgraded` (revoked by an upgrade to a
    /// product that does not grant it), `catalog` (its product no longer grants it), else `expired`.
    private func endReason(_ old: ActiveEntitlement, map: EntitlementMap) throws -> String {
        let granted =
            EntitlementMap.grantedEntitlement(productID: old.productID).map { [$0] }
            ?? map.entitlements(of: old.productID)
        guard granted.contains(old.id), map.ids.contains(old.id) else { return "catalog" }
        guard
            let row = try fetchOne(
                "SELECT revoked_ms, revocation_reason FROM transactions WHERE id = ?", [old.transactionID])
        else { return "expired" }
        guard (try row["revoked_ms"] as Int64) > 0 else { return "expired" }
        // An upgrade revokes the old period without a refund: the new product grants what it grants.
        return (try row["revocation_reason"] as String).hasPrefix("upgraded to ") ? "upgraded" : "revoked"
    }
}
