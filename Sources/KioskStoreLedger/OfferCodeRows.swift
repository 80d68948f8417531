import KioskStoreCore

extension OfferCodeBatch {
    package init(row: LedgerRow) throws {
        let kindName: String = try row["kind"]
        self.init(
            id: try row["id"], kind: OfferCodeBatch.Kind(rawValue: kindName) ?? .oneTime,
            productID: try row["product_id"], price: try row["price"], period: try row["period"],
            quantity: UInt32(clamping: try row["quantity"] as Int64),
            redemptionLimit: try row["redemption_limit"], redeemed: try row["redeemed"],
            expiresMs: try row["expires_ms"], revokedMs: try row["revoked_ms"], createdMs: try row["created_ms"])
    }
}

/// One code of a batch as `kiosk-store codes export` writes it.
public struct OfferCodeRow: Hashable, Sendable {
    public var code: String
    public var redeemedMs: Int64
    public var accountID: String
    public var transactionID: String
}

/// A batch's columns, `redeemed` counted from its codes for one-time codes (their batch row is never written on a
/// redemption: every code of a batch redeemed at once would collide there).
private let offerCodeBatchSelect = """
    SELECT id, kind, product_id, price, period, quantity, redemption_limit, expires_ms, revoked_ms, created_ms,
      CASE WHEN kind = 'one_time'
        THEN (SELECT COUNT(*) FROM offer_codes c WHERE c.batch_id = b.id AND c.redeemed_ms > 0)
        ELSE redeemed END AS redeemed
    FROM offer_code_batches b
    """

extension Ledger {
    /// Records a batch and its codes (each kept by `hash(code)`), in one write.
    /// - Throws: ``StoreError`` CONFLICT when a batch with its id exists, or a code is taken (a custom word in use).
    public func createOfferCodes(
        _ batch: OfferCodeBatch, codes: [String], hash: @escaping @Sendable (String) -> [UInt8]
    ) async throws {
        try await write { db in
            guard try db.offerCodeBatch(id: batch.id) == nil else {
                throw StoreError(.conflict, "an offer code batch \(batch.id) exists already")
            }
            try db.execute(
                """
                INSERT INTO offer_code_batches (id, kind, product_id, price, period, quantity, redemption_limit,
                  expires_ms, created_ms)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
                [
                    batch.id, batch.kind.rawValue, batch.productID, batch.price, batch.period, batch.quantity,
                    batch.redemptionLimit, batch.expiresMs, batch.createdMs,
                ])
            for code in codes {
                try db.executeLater(
                    "INSERT INTO offer_codes (code_hash, code, batch_id) VALUES (?, ?, ?)",
                    [hash(code), code, batch.id]
                ) { error in
                    error.kind == .uniqueViolation
                        ? StoreError(.conflict, "the code \(code) is in use by another batch") : nil
                }
            }
            try db.recordOperatorAction(
                "created \(codes.count) offer code(s) in batch \(batch.id) for \(batch.productID)",
                nowMs: batch.createdMs)
        }
    }

    /// Every batch, newest first.
    public func offerCodeBatches() async throws -> [OfferCodeBatch] {
        try await backend.read { db in
            try db.fetchAll("\(offerCodeBatchSelect) ORDER BY created_ms DESC, id").map(OfferCodeBatch.init)
        }
    }

    /// The batch with `id`.
    public func offerCodeBatch(id: String) async throws -> OfferCodeBatch? {
        try await backend.read { db in try db.offerCodeBatch(id: id) }
    }

    /// The batch a code (by its hash) belongs to, if any.
    public func offerCodeBatch(codeHash: [UInt8]) async throws -> OfferCodeBatch? {
        try await backend.readStatement { db in
            try db.fetchOne(
                """
                \(offerCodeBatchSelect) WHERE b.id = (SELECT batch_id FROM offer_codes WHERE code_hash = ?)
                """, [codeHash]
            ).map(OfferCodeBatch.init)
        }
    }

    /// Revokes a batch: its codes are refused from now on (`offer_code_revoked`); redeemed ones stand. False when there
    /// is no such batch or it was revoked already.
    public func revokeOfferCodes(batchID: String, nowMs: Int64) async throws -> Bool {
        try await write { db in
            let changed =
                try db.execute(
                    "UPDATE offer_code_batches SET revoked_ms = ? WHERE id = ? AND revoked_ms = 0", [nowMs, batchID])
                > 0
            if changed { try db.recordOperatorAction("revoked offer code batch \(batchID)", nowMs: nowMs) }
            return changed
        }
    }

    /// The batch's codes in code order, a page at a time after `cursor`.
    public func offerCodes(batchID: String, after cursor: String, limit: Int) async throws -> [OfferCodeRow] {
        try await backend.read { db in
            try db.fetchAll(
                "SELECT * FROM offer_codes WHERE batch_id = ? AND code > ? ORDER BY code LIMIT ?",
                [batchID, cursor, limit]
            ).map {
                OfferCodeRow(
                    code: try $0["code"], redeemedMs: try $0["redeemed_ms"], accountID: try $0["account_id"],
                    transactionID: try $0["transaction_id"])
            }
        }
    }
}

extension LedgerDatabase {
    public func offerCodeBatch(id: String) throws -> OfferCodeBatch? {
        try fetchOne("\(offerCodeBatchSelect) WHERE b.id = ?", [id]).map(OfferCodeBatch.init)
    }

    /// The code's row (its batch id and who redeemed it) in the write in progress.
    public func offerCode(hash: [UInt8]) throws -> (batchID: String, redeemedMs: Int64, transactionID: String)? {
        try fetchOne("SELECT batch_id, redeemed_ms, transaction_id FROM offer_codes WHERE code_hash = ?", [hash]).map {
            (try $0["batch_id"], try $0["redeemed_ms"], try $0["transaction_id"])
        }
    }

    /// The transaction that redeemed a code in `scope` for the account, if any.
    public func offerCodeRedemption(scope: String, accountID: String) throws -> String? {
        try value(
            String.self, "SELECT transaction_id FROM offer_code_redemptions WHERE scope = ? AND account_id = ?",
            [scope, accountID])
    }

    /// True when the account redeemed a code in `scope` (a subscription group, or a custom code's batch).
    public func redeemedOfferCode(scope: String, accountID: String) throws -> Bool {
        try fetchOne(
            "SELECT 1 FROM offer_code_redemptions WHERE scope = ? AND account_id = ?", [scope, accountID]) != nil
    }

    /// Takes a one-time code for `transactionID`: false when another redemption took it first.
    public func takeOneTimeCode(hash: [UInt8], accountID: String, transactionID: String, nowMs: Int64) throws -> Bool {
        try execute(
            """
            UPDATE offer_codes SET redeemed_ms = ?, account_id = ?, transaction_id = ? WHERE code_hash = ? AND redeemed_ms = 0
            """, [nowMs, accountID, transactionID, hash]) > 0
    }

    /// Counts one more redemption of a custom code's batch: false when its limit is reached.
    public func countCustomRedemption(batchID: String) throws -> Bool {
        try execute(
            "UPDATE offer_code_batches SET redeemed = redeemed + 1 WHERE id = ? AND redeemed < redemption_limit",
            [batchID]) > 0
    }

    /// Records that the account redeemed a code of `batchID` in `scope`.
    public func recordOfferCodeRedemption(
        scope: String, accountID: String, batchID: String, transactionID: String, nowMs: Int64
    ) throws {
        try executeLater(
            """
            INSERT INTO offer_code_redemptions (scope, account_id, batch_id, transaction_id, redeemed_ms)
            VALUES (?, ?, ?, ?, ?)
            """, [scope, accountID, batchID, transactionID, nowMs]
        ) { error in
            error.kind == .uniqueViolation
                ? StoreError(.conflict, "the account redeemed an offer code there already") : nil
        }
    }

    /// Gives back what a redemption took for `transactionID` whose payment failed: the code (or the custom batch's
    /// count) and the account's once-only place.
    public func releaseOfferCode(transactionID: String) throws {
        let oneTime = try execute(
            """
            UPDATE offer_codes SET redeemed_ms = 0, account_id = '', transaction_id = ''
            WHERE transaction_id = ? AND transaction_id <> ''
            """, [transactionID])
        let batchID = try value(
            String.self, "SELECT batch_id FROM offer_code_redemptions WHERE transaction_id = ?", [transactionID])
        let places = try execute("DELETE FROM offer_code_redemptions WHERE transaction_id = ?", [transactionID])
        if oneTime == 0, places > 0, let batchID {
            // A custom code (it keeps a count, and always a place per account): its count, once.
            try execute(
                "UPDATE offer_code_batches SET redeemed = redeemed - 1 WHERE id = ? AND kind = 'custom' AND redeemed > 0",
                [batchID])
        }
    }
}
