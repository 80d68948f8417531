import KioskStoreCore

extension LedgerMigration {
    /// v8-webhooks: Webhooks, their deliveries and the delivery lease.
    package static let v008Webhooks = LedgerMigration(
        id: "v8-webhooks",
        sqlite: [
            """
            CREATE TABLE webhooks (
              id TEXT PRIMARY KEY,
              url TEXT NOT NULL,
              secret BLOB NOT NULL,
              enqueued_through INTEGER NOT NULL,
              created_ms INTEGER NOT NULL
            );
            CREATE TABLE webhook_deliveries (
              webhook_id TEXT NOT NULL,
              event_id INTEGER NOT NULL,
              account_id TEXT NOT NULL,
              state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
              attempts INTEGER NOT NULL DEFAULT 0,
              next_attempt_ms INTEGER NOT NULL,
              first_attempt_ms INTEGER NOT NULL DEFAULT 0,
              last_error TEXT NOT NULL DEFAULT '',
              delivered_ms INTEGER NOT NULL DEFAULT 0,
              PRIMARY KEY (webhook_id, event_id)
            );
            CREATE INDEX webhook_deliveries_pending ON webhook_deliveries(webhook_id, account_id, event_id) WHERE state = 'pending';
            CREATE TABLE webhook_lease (
              id INTEGER PRIMARY KEY CHECK (id = 1),
              owner TEXT NOT NULL,
              until_ms INTEGER NOT NULL
            );
            """
        ],
        postgres: """
            CREATE TABLE webhooks (
              id TEXT PRIMARY KEY,
              url TEXT NOT NULL,
              secret BYTEA NOT NULL,
              enqueued_through BIGINT NOT NULL,
              created_ms BIGINT NOT NULL
            );
            CREATE TABLE webhook_deliveries (
              webhook_id TEXT NOT NULL,
              event_id BIGINT NOT NULL,
              account_id TEXT NOT NULL,
              state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
              attempts BIGINT NOT NULL DEFAULT 0,
              next_attempt_ms BIGINT NOT NULL,
              first_attempt_ms BIGINT NOT NULL DEFAULT 0,
              last_error TEXT NOT NULL DEFAULT '',
              delivered_ms BIGINT NOT NULL DEFAULT 0,
              PRIMARY KEY (webhook_id, event_id)
            );
            CREATE INDEX webhook_deliveries_pending ON webhook_deliveries(webhook_id, account_id, event_id) WHERE state = 'pending';
            CREATE TABLE webhook_lease (
              id BIGINT PRIMARY KEY CHECK (id = 1),
              owner TEXT NOT NULL,
              until_ms BIGINT NOT NULL
            );
            """)
}
