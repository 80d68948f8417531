import KioskStoreCore

extension LedgerMigration {
    /// v9-refund-requests: Refund requests, and a REFUNDED event for each revocation recorded before the event log
    /// existed (webhooks that had queued every event then are moved past them). PostgreSQL takes the event-order lock
    /// first: a store of the version before, still serving during a rolling upgrade, must not commit a higher event
    /// id while the backfill holds lower ones.
    /// (82778235554629 is ``Ledger/eventOrderLockKey``; `LedgerMigrationTests` checks it.)
    package static let v009RefundRequests = LedgerMigration(
        id: "v9-refund-requests",
        sqlite: [
            """
            CREATE TABLE refund_requests (
              transaction_id TEXT PRIMARY KEY,
              account_id TEXT NOT NULL,
              product_id TEXT NOT NULL,
              reason TEXT NOT NULL DEFAULT '',
              state INTEGER NOT NULL,
              requested_ms INTEGER NOT NULL,
              decided_ms INTEGER NOT NULL DEFAULT 0,
              decision_reason TEXT NOT NULL DEFAULT ''
            );
            CREATE INDEX refund_requests_by_state ON refund_requests(state, requested_ms, transaction_id);
            """,
            """
            CREATE TEMP TABLE refund_backfill_mark AS SELECT COALESCE(MAX(id), 0) AS m FROM events;
            INSERT INTO events (type, account_id, transaction_id, original_transaction_id, product_id, created_ms, reason, credit_shortfall)
              SELECT 6, r.account_id, r.transaction_id, r.original_transaction_id, COALESCE(t.product_id, ''), r.revoked_ms, r.reason, r.credit_shortfall
              FROM revocations r LEFT JOIN transactions t ON t.id = r.transaction_id
              WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.account_id = r.account_id AND e.transaction_id = r.transaction_id AND e.type = 6)
              ORDER BY r.cursor;
            UPDATE webhooks SET enqueued_through = (SELECT COALESCE(MAX(id), 0) FROM events)
              WHERE enqueued_through >= (SELECT m FROM refund_backfill_mark);
            DROP TABLE refund_backfill_mark;
            """,
        ],
        postgres: """
            CREATE TABLE refund_requests (
              transaction_id TEXT PRIMARY KEY,
              account_id TEXT NOT NULL,
              product_id TEXT NOT NULL,
              reason TEXT NOT NULL DEFAULT '',
              state BIGINT NOT NULL,
              requested_ms BIGINT NOT NULL,
              decided_ms BIGINT NOT NULL DEFAULT 0,
              decision_reason TEXT NOT NULL DEFAULT ''
            );
            CREATE INDEX refund_requests_by_state ON refund_requests(state, requested_ms, transaction_id);
            SELECT pg_advisory_xact_lock(82778235554629);
            CREATE TEMP TABLE refund_backfill_mark AS SELECT COALESCE(MAX(id), 0) AS m FROM events;
            INSERT INTO events (type, account_id, transaction_id, original_transaction_id, product_id, created_ms, reason, credit_shortfall)
              SELECT 6, r.account_id, r.transaction_id, r.original_transaction_id, COALESCE(t.product_id, ''), r.revoked_ms, r.reason, r.credit_shortfall
              FROM revocations r LEFT JOIN transactions t ON t.id = r.transaction_id
              WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.account_id = r.account_id AND e.transaction_id = r.transaction_id AND e.type = 6)
              ORDER BY r.cursor;
            UPDATE webhooks SET enqueued_through = (SELECT COALESCE(MAX(id), 0) FROM events)
              WHERE enqueued_through >= (SELECT m FROM refund_backfill_mark);
            DROP TABLE refund_backfill_mark;
            """)
}
