import Foundation

/// The PostgreSQL ledger's schema, versioned as the SQLite one is (``Ledger/migrator``):
/// the same version names, in the same order, each bringing the schema to the same
/// state in PostgreSQL's types (`BIGINT` for SQLite's integers and booleans, `BYTEA`
/// for blobs, `BIGSERIAL seq` where SQLite orders by `rowid`). Add a migration to both
/// lists for every change; never edit a shipped one.
enum PostgresMigrations {
    static let all: [(id: String, sql: String)] = [
        ("v1", """
            CREATE TABLE accounts (
              id TEXT PRIMARY KEY,
              token_hash BYTEA NOT NULL UNIQUE,
              payments_allowed BIGINT NOT NULL DEFAULT 1,
              credit_balance BIGINT NOT NULL DEFAULT 0 CHECK (credit_balance >= 0),
              created_ms BIGINT NOT NULL
            );
            CREATE TABLE transactions (
              seq BIGSERIAL UNIQUE,
              id TEXT PRIMARY KEY,
              original_id TEXT NOT NULL,
              account_id TEXT NOT NULL REFERENCES accounts(id),
              product_id TEXT NOT NULL,
              product_type BIGINT NOT NULL,
              quantity BIGINT NOT NULL,
              state BIGINT NOT NULL,
              purchase_ms BIGINT NOT NULL,
              expires_ms BIGINT NOT NULL DEFAULT 0,
              price TEXT NOT NULL,
              currency TEXT NOT NULL,
              payment_method TEXT NOT NULL,
              payment_id TEXT UNIQUE,
              error_code BIGINT NOT NULL DEFAULT 0,
              error_reason TEXT NOT NULL DEFAULT '',
              error_message TEXT NOT NULL DEFAULT '',
              receipt BYTEA,
              finished BIGINT NOT NULL DEFAULT 0,
              revoked_ms BIGINT NOT NULL DEFAULT 0,
              revocation_reason TEXT NOT NULL DEFAULT '',
              environment BIGINT NOT NULL,
              credits BIGINT NOT NULL DEFAULT 0
            );
            CREATE INDEX transactions_by_account ON transactions(account_id, state, purchase_ms);
            CREATE TABLE credit_movements (
              id BIGSERIAL PRIMARY KEY,
              account_id TEXT NOT NULL REFERENCES accounts(id),
              amount BIGINT NOT NULL,
              transaction_id TEXT,
              reason TEXT NOT NULL,
              created_ms BIGINT NOT NULL
            );
            CREATE INDEX credit_movements_by_account ON credit_movements(account_id);
            CREATE TABLE idempotency_keys (
              account_id TEXT NOT NULL,
              key TEXT NOT NULL,
              operation TEXT NOT NULL,
              request_hash BYTEA NOT NULL,
              response BYTEA NOT NULL,
              created_ms BIGINT NOT NULL,
              PRIMARY KEY (account_id, key)
            );
            CREATE INDEX idempotency_keys_by_age ON idempotency_keys(created_ms);
            CREATE TABLE revocations (
              cursor BIGSERIAL PRIMARY KEY,
              transaction_id TEXT NOT NULL UNIQUE,
              original_transaction_id TEXT NOT NULL,
              account_id TEXT NOT NULL,
              revoked_ms BIGINT NOT NULL,
              reason TEXT NOT NULL
            );
            CREATE TABLE signing_keys (
              seq BIGSERIAL UNIQUE,
              id TEXT PRIMARY KEY,
              public_key BYTEA NOT NULL,
              not_before_ms BIGINT NOT NULL
            );
            CREATE TABLE settings (
              key TEXT PRIMARY KEY,
              value TEXT NOT NULL
            );
            """),
        ("v2-intents-paging-shortfall", """
            CREATE TABLE payment_intents (
              id TEXT PRIMARY KEY,
              kind TEXT NOT NULL,
              payment_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL,
              account_id TEXT NOT NULL REFERENCES accounts(id),
              product_id TEXT NOT NULL,
              product_type BIGINT NOT NULL,
              credits_per_unit BIGINT NOT NULL,
              subscription_period TEXT NOT NULL,
              quantity BIGINT NOT NULL,
              unit_price TEXT NOT NULL,
              currency TEXT NOT NULL,
              payment_method TEXT NOT NULL,
              purchase_ms BIGINT NOT NULL,
              idempotency_key TEXT,
              request_hash BYTEA NOT NULL,
              exclusive BIGINT NOT NULL,
              state TEXT NOT NULL CHECK (state IN ('pending', 'completed', 'closed')),
              outcome TEXT NOT NULL DEFAULT '',
              owner TEXT NOT NULL,
              created_ms BIGINT NOT NULL,
              updated_ms BIGINT NOT NULL
            );
            CREATE UNIQUE INDEX payment_intents_one_open_exclusive ON payment_intents(account_id, product_id)
              WHERE state = 'pending' AND exclusive = 1;
            CREATE INDEX payment_intents_open ON payment_intents(created_ms) WHERE state = 'pending';
            ALTER TABLE transactions ADD COLUMN refund_credit_shortfall BIGINT NOT NULL DEFAULT 0;
            ALTER TABLE revocations ADD COLUMN credit_shortfall BIGINT NOT NULL DEFAULT 0;
            CREATE UNIQUE INDEX transactions_owned_once ON transactions(account_id, product_id)
              WHERE state = 1 AND revoked_ms = 0 AND product_type = 2;
            CREATE INDEX transactions_by_account_product ON transactions(account_id, product_id);
            CREATE INDEX transactions_by_account_row ON transactions(account_id, seq);
            CREATE INDEX transactions_unfinished ON transactions(account_id, seq) WHERE state = 1 AND finished = 0;
            CREATE INDEX transactions_restorable ON transactions(account_id, seq) WHERE state = 1 AND revoked_ms = 0 AND product_type != 1;
            """),
        ("v3-key-retirement", """
            ALTER TABLE signing_keys ADD COLUMN not_after_ms BIGINT NOT NULL DEFAULT 0;
            """),
        ("v4-service-credentials", """
            CREATE TABLE service_credentials (
              id TEXT PRIMARY KEY,
              role TEXT NOT NULL CHECK (role IN ('content', 'admin')),
              name TEXT NOT NULL,
              token_hash BYTEA NOT NULL UNIQUE,
              created_ms BIGINT NOT NULL,
              revoked_ms BIGINT NOT NULL DEFAULT 0
            );
            """),
        ("v5-sealed-signing-keys", """
            ALTER TABLE signing_keys ADD COLUMN sealed_private_key BYTEA;
            """),
        // The SQLite statements with PostgreSQL's 64-bit integers (INTEGER is 32 bits there).
        ("v6-subscriptions", Ledger.v6Subscriptions.replacingOccurrences(of: "INTEGER", with: "BIGINT")),
        ("v7-events", Ledger.v7EventsPostgres),
        ("v8-webhooks", Ledger.v8WebhooksPostgres),
        ("v9-refund-requests", Ledger.v9RefundRequestsPostgres),
    ]

    /// A key for `pg_advisory_xact_lock`: stores starting together migrate one at a time.
    static let lockKey: Int64 = 0x4B494F534B  // "KIOSK"

    /// Applies the migrations this database has not had, each in its own transaction.
    static func migrate(_ backend: PostgresLedgerBackend) throws {
        for (id, sql) in all {
            // READ COMMITTED: after waiting for the lock, the next statement sees what the holder committed.
            try backend.transaction("BEGIN ISOLATION LEVEL READ COMMITTED") { db in
                try db.execute("SELECT pg_advisory_xact_lock(?)", [lockKey])
                try db.execute("CREATE TABLE IF NOT EXISTS kiosk_migrations (identifier TEXT PRIMARY KEY, applied_ms BIGINT NOT NULL)", [])
                guard try db.value(String.self, "SELECT identifier FROM kiosk_migrations WHERE identifier = ?", [id]) == nil else { return }
                try db.execute(sql)
                try db.execute("INSERT INTO kiosk_migrations (identifier, applied_ms) VALUES (?, ?)",
                               [id, Int64(Date().timeIntervalSince1970 * 1000)])
            }
        }
    }
}
