import KioskStoreCore

/// A job extending every active subscription of a product (``Ledger/extensionJob(id:)``).
public struct ExtensionJobRecord: Hashable, Sendable {
    public var id: String
    public var productID: String
    public var days: Int
    public var reason: String
    /// When it began: subscriptions bought later are not extended.
    public var createdMs: Int64
    /// When it finished; 0 while it runs.
    public var finishedMs: Int64

    public init(id: String, productID: String, days: Int, reason: String, createdMs: Int64, finishedMs: Int64 = 0) {
        self.id = id
        self.productID = productID
        self.days = days
        self.reason = reason
        self.createdMs = createdMs
        self.finishedMs = finishedMs
    }

    package init(row: LedgerRow) throws {
        self.init(
            id: try row["id"], productID: try row["product_id"], days: try row["days"], reason: try row["reason"],
            createdMs: try row["created_ms"], finishedMs: try row["finished_ms"])
    }
}

extension Ledger {
    /// The job with `id`.
    public func extensionJob(id: String) async throws -> ExtensionJobRecord? {
        try await backend.read { db in
            try db.fetchOne("SELECT * FROM extension_jobs WHERE id = ?", [id]).map(ExtensionJobRecord.init)
        }
    }

    /// Jobs not finished yet (a store resumes them).
    public func unfinishedExtensionJobs() async throws -> [ExtensionJobRecord] {
        try await backend.read { db in
            try db.fetchAll("SELECT * FROM extension_jobs WHERE finished_ms = 0 ORDER BY created_ms, id").map(
                ExtensionJobRecord.init)
        }
    }

    /// Records `job` unless a job with its id exists; returns the job with that id as it is then.
    public func createExtensionJob(_ job: ExtensionJobRecord) async throws -> ExtensionJobRecord {
        try await write { db in
            try db.execute(
                """
                INSERT INTO extension_jobs (id, product_id, days, reason, created_ms) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (id) DO NOTHING
                """, [job.id, job.productID, job.days, job.reason, job.createdMs])
            guard let stored = try db.fetchOne("SELECT * FROM extension_jobs WHERE id = ?", [job.id]) else {
                throw StoreError(.internalFailure, "extension job \(job.id) was not recorded")
            }
            return try ExtensionJobRecord(row: stored)
        }
    }

    /// Marks the job finished at `nowMs`.
    public func finishExtensionJob(id: String, nowMs: Int64) async throws {
        _ = try await write { db in
            try db.execute("UPDATE extension_jobs SET finished_ms = ? WHERE id = ? AND finished_ms = 0", [nowMs, id])
        }
    }

    /// The subscriptions `job` has still to extend: of its product, ACTIVE and unexpired at `nowMs`, bought (the
    /// original transaction) no later than the job began, and not extended by it; at most `limit`, after `cursor`
    /// (an original transaction id), in id order.
    public func subscriptionsToExtend(
        _ job: ExtensionJobRecord, nowMs: Int64, after cursor: String, limit: Int
    ) async throws -> [(originalID: String, accountID: String)] {
        try await backend.read { db in
            try db.fetchAll(
                """
                SELECT s.original_id, s.account_id FROM subscriptions s JOIN transactions t ON t.id = s.original_id
                WHERE s.product_id = ? AND s.state = 1 AND s.expires_ms > ? AND t.purchase_ms <= ? AND s.original_id > ?
                  AND NOT EXISTS (SELECT 1 FROM subscription_extensions e WHERE e.id = CAST(? AS TEXT) || s.original_id)
                ORDER BY s.original_id LIMIT ?
                """,
                [job.productID, nowMs, job.createdMs, cursor, job.id + ":", limit]
            ).map { (try $0["original_id"], try $0["account_id"]) }
        }
    }

    /// How many subscriptions the job extended, and how many it has still to extend at `nowMs`.
    public func extensionJobProgress(
        _ job: ExtensionJobRecord, nowMs: Int64
    ) async throws -> (
        extended: Int, remaining: Int
    ) {
        try await backend.read { db in
            let extended =
                try db.value(
                    Int64.self, "SELECT COUNT(*) FROM subscription_extensions WHERE job_id = ?", [job.id]) ?? 0
            let remaining =
                try db.value(
                    Int64.self,
                    """
                    SELECT COUNT(*) FROM subscriptions s JOIN transactions t ON t.id = s.original_id
                    WHERE s.product_id = ? AND s.state = 1 AND s.expires_ms > ? AND t.purchase_ms <= ?
                      AND NOT EXISTS (SELECT 1 FROM subscription_extensions e WHERE e.id = CAST(? AS TEXT) || s.original_id)
                    """, [job.productID, nowMs, job.createdMs, job.id + ":"]) ?? 0
            return (Int(extended), Int(remaining))
        }
    }
}

extension LedgerDatabase {
    /// How many single extensions (not a job's) the subscription had since `sinceMs`.
    public func singleExtensions(originalID: String, sinceMs: Int64) throws -> Int {
        Int(
            try value(
                Int64.self,
                "SELECT COUNT(*) FROM subscription_extensions WHERE original_id = ? AND job_id = '' AND extended_ms > ?",
                [originalID, sinceMs]) ?? 0)
    }

    /// True when the job extended the subscription already.
    public func extended(originalID: String, byJob jobID: String) throws -> Bool {
        try fetchOne("SELECT 1 FROM subscription_extensions WHERE id = ?", [jobID + ":" + originalID]) != nil
    }

    /// Records an extension: `id` is the job's and the subscription's (`job:original`), or a fresh one for a single.
    public func recordExtension(
        id: String, originalID: String, jobID: String, accountID: String, days: Int, reason: String, nowMs: Int64,
        oldExpiresMs: Int64, newExpiresMs: Int64
    ) throws {
        try executeLater(
            """
            INSERT INTO subscription_extensions (id, original_id, job_id, account_id, days, reason, extended_ms,
              old_expires_ms, new_expires_ms)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [id, originalID, jobID, accountID, days, reason, nowMs, oldExpiresMs, newExpiresMs])
    }

    /// Sets a transaction's expiry and receipt (an extended subscription's latest transaction).
    public func updateExpiry(transactionID: String, expiresMs: Int64, receipt: [UInt8]) throws {
        try executeLater(
            "UPDATE transactions SET expires_ms = ?, receipt = ? WHERE id = ?", [expiresMs, receipt, transactionID])
    }
}
