import KioskStoreCore

extension LedgerMigration {
    /// v6-subscriptions: Auto-renewable subscriptions (the domain's `Subscription`), offer nonces, a subscription
    /// transaction's period start. Subscriptions bought before it never renewed: they are carried over with auto-
    /// renew off, so an upgrade charges nobody unasked.
    package static let v006Subscriptions = LedgerMigration(
        id: "v6-subscriptions",
        sqlite: [
            """
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
        ],
        postgres: """
            CREATE TABLE subscriptions (
              original_id TEXT PRIMARY KEY,
              account_id TEXT NOT NULL REFERENCES accounts(id),
              product_id TEXT NOT NULL,
              state BIGINT NOT NULL CHECK (state BETWEEN 1 AND 5),
              will_auto_renew BIGINT NOT NULL DEFAULT 1,
              payment_method TEXT NOT NULL,
              periods_paid BIGINT NOT NULL,
              expires_ms BIGINT NOT NULL,
              grace_end_ms BIGINT NOT NULL DEFAULT 0,
              retry_end_ms BIGINT NOT NULL DEFAULT 0,
              due_ms BIGINT NOT NULL,
              attempts BIGINT NOT NULL DEFAULT 0,
              expiration_reason BIGINT NOT NULL DEFAULT 0,
              pending_product_id TEXT NOT NULL DEFAULT '',
              latest_transaction_id TEXT NOT NULL,
              offer_id TEXT NOT NULL DEFAULT '',
              offer_periods_used BIGINT NOT NULL DEFAULT 0,
              accepted_price TEXT NOT NULL DEFAULT '',
              updated_ms BIGINT NOT NULL
            );
            CREATE TABLE offer_nonces (
              nonce TEXT PRIMARY KEY,
              account_id TEXT NOT NULL,
              created_ms BIGINT NOT NULL
            );
            ALTER TABLE transactions ADD COLUMN offer_id TEXT NOT NULL DEFAULT '';
            ALTER TABLE payment_intents ADD COLUMN offer_id TEXT NOT NULL DEFAULT '';
            CREATE INDEX subscriptions_by_account ON subscriptions(account_id);
            CREATE INDEX subscriptions_due ON subscriptions(due_ms) WHERE state IN (1, 2, 3);
            ALTER TABLE transactions ADD COLUMN period_start_ms BIGINT NOT NULL DEFAULT 0;
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
            """)
}
