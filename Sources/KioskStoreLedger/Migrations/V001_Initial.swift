import KioskStoreCore

extension LedgerMigration {
    /// v1: The first schema: accounts, transactions, credit movements, idempotency keys, revocations, signing keys,
    /// settings.
    package static let v001Initial = LedgerMigration(
        id: "v1",
        sqlite: [
            """
            CREATE TABLE accounts (
              id TEXT PRIMARY KEY,
              token_hash BLOB NOT NULL UNIQUE,
              payments_allowed INTEGER NOT NULL DEFAULT 1,
              credit_balance INTEGER NOT NULL DEFAULT 0 CHECK (credit_balance >= 0),
              created_ms INTEGER NOT NULL
            );
            CREATE TABLE transactions (
              id TEXT PRIMARY KEY,
              original_id TEXT NOT NULL,
              account_id TEXT NOT NULL REFERENCES accounts(id),
              product_id TEXT NOT NULL,
              product_type INTEGER NOT NULL,
              quantity INTEGER NOT NULL,
              state INTEGER NOT NULL,
              purchase_ms INTEGER NOT NULL,
              expires_ms INTEGER NOT NULL DEFAULT 0,
              price TEXT NOT NULL,
              currency TEXT NOT NULL,
              payment_method TEXT NOT NULL,
              payment_id TEXT UNIQUE,
              error_code INTEGER NOT NULL DEFAULT 0,
              error_reason TEXT NOT NULL DEFAULT '',
              error_message TEXT NOT NULL DEFAULT '',
              receipt BLOB,
              finished INTEGER NOT NULL DEFAULT 0,
              revoked_ms INTEGER NOT NULL DEFAULT 0,
              revocation_reason TEXT NOT NULL DEFAULT '',
              environment INTEGER NOT NULL,
              credits INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX transactions_by_account ON transactions(account_id, state, purchase_ms);
            CREATE TABLE credit_movements (
              id INTEGER PRIMARY KEY AUTOINCREMENT,
              account_id TEXT NOT NULL REFERENCES accounts(id),
              amount INTEGER NOT NULL,
              transaction_id TEXT,
              reason TEXT NOT NULL,
              created_ms INTEGER NOT NULL
            );
            CREATE INDEX credit_movements_by_account ON credit_movements(account_id);
            CREATE TABLE idempotency_keys (
              account_id TEXT NOT NULL,
              key TEXT NOT NULL,
              operation TEXT NOT NULL,
              request_hash BLOB NOT NULL,
              response BLOB NOT NULL,
              created_ms INTEGER NOT NULL,
              PRIMARY KEY (account_id, key)
            );
            CREATE INDEX idempotency_keys_by_age ON idempotency_keys(created_ms);
            CREATE TABLE revocations (
              cursor INTEGER PRIMARY KEY AUTOINCREMENT,
              transaction_id TEXT NOT NULL UNIQUE,
              original_transaction_id TEXT NOT NULL,
              account_id TEXT NOT NULL,
              revoked_ms INTEGER NOT NULL,
              reason TEXT NOT NULL
            );
            CREATE TABLE signing_keys (
              id TEXT PRIMARY KEY,
              public_key BLOB NOT NULL,
              not_before_ms INTEGER NOT NULL
            );
            CREATE TABLE settings (
              key TEXT PRIMARY KEY,
              value TEXT NOT NULL
            );
            """
        ],
        postgres: """
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
            """)
}
