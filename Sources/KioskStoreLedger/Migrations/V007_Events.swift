import KioskStoreCore

extension LedgerMigration {
    /// v7-events: The event log (every change to a purchase, signed when served).
    package static let v007Events = LedgerMigration(
        id: "v7-events",
        sqlite: [
            """
            CREATE TABLE events (
              id INTEGER PRIMARY KEY AUTOINCREMENT,
              type INTEGER NOT NULL,
              account_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL DEFAULT '',
              original_transaction_id TEXT NOT NULL DEFAULT '',
              product_id TEXT NOT NULL DEFAULT '',
              created_ms INTEGER NOT NULL,
              reason TEXT NOT NULL DEFAULT '',
              credit_shortfall INTEGER NOT NULL DEFAULT 0,
              auto_renew INTEGER NOT NULL DEFAULT 0,
              price TEXT NOT NULL DEFAULT '',
              expiration_reason INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX events_by_account ON events(account_id, id);
            CREATE INDEX events_by_transaction ON events(account_id, transaction_id);
            CREATE INDEX transactions_deferred ON transactions(purchase_ms) WHERE state = 3;
            """
        ],
        postgres: """
            CREATE TABLE events (
              id BIGSERIAL PRIMARY KEY,
              type BIGINT NOT NULL,
              account_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL DEFAULT '',
              original_transaction_id TEXT NOT NULL DEFAULT '',
              product_id TEXT NOT NULL DEFAULT '',
              created_ms BIGINT NOT NULL,
              reason TEXT NOT NULL DEFAULT '',
              credit_shortfall BIGINT NOT NULL DEFAULT 0,
              auto_renew BIGINT NOT NULL DEFAULT 0,
              price TEXT NOT NULL DEFAULT '',
              expiration_reason BIGINT NOT NULL DEFAULT 0
            );
            CREATE INDEX events_by_account ON events(account_id, id);
            CREATE INDEX events_by_transaction ON events(account_id, transaction_id);
            CREATE INDEX transactions_deferred ON transactions(purchase_ms) WHERE state = 3;
            """)
}
