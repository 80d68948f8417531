import KioskStoreCore

extension LedgerMigration {
    /// v2-intents-paging-shortfall: Payment intents (intent before charge), paging indexes, and the credit shortfall
    /// of refunded consumables.
    package static let v002IntentsPagingShortfall = LedgerMigration(
        id: "v2-intents-paging-shortfall",
        sqlite: [
            """
            CREATE TABLE payment_intents (
              id TEXT PRIMARY KEY,
              kind TEXT NOT NULL,
              payment_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL,
              account_id TEXT NOT NULL REFERENCES accounts(id),
              product_id TEXT NOT NULL,
              product_type INTEGER NOT NULL,
              credits_per_unit INTEGER NOT NULL,
              subscription_period TEXT NOT NULL,
              quantity INTEGER NOT NULL,
              unit_price TEXT NOT NULL,
              currency TEXT NOT NULL,
              payment_method TEXT NOT NULL,
              purchase_ms INTEGER NOT NULL,
              idempotency_key TEXT,
              request_hash BLOB NOT NULL,
              exclusive INTEGER NOT NULL,
              state TEXT NOT NULL CHECK (state IN ('pending', 'completed', 'closed')),
              outcome TEXT NOT NULL DEFAULT '',
              owner TEXT NOT NULL,
              created_ms INTEGER NOT NULL,
              updated_ms INTEGER NOT NULL
            );
            -- One payment in flight per account and owned-once product: a purchase and an
            -- approval (or two purchases) racing in two processes cannot both be charged.
            CREATE UNIQUE INDEX payment_intents_one_open_exclusive ON payment_intents(account_id, product_id)
              WHERE state = 'pending' AND exclusive = 1;
            CREATE INDEX payment_intents_open ON payment_intents(created_ms) WHERE state = 'pending';
            ALTER TABLE transactions ADD COLUMN refund_credit_shortfall INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE revocations ADD COLUMN credit_shortfall INTEGER NOT NULL DEFAULT 0;
            -- A ledger from before this version may own a non-consumable twice (two processes raced):
            -- the later purchases are revoked, visibly, so the index below can hold; refund them at the processor.
            CREATE TEMP TABLE duplicate_ownership AS
              SELECT t.id, t.original_id, t.account_id FROM transactions t
              WHERE t.state = 1 AND t.revoked_ms = 0 AND t.product_type = 2 AND EXISTS (
                SELECT 1 FROM transactions u WHERE u.account_id = t.account_id AND u.product_id = t.product_id
                  AND u.state = 1 AND u.revoked_ms = 0 AND u.product_type = 2 AND u.rowid < t.rowid);
            UPDATE transactions SET revoked_ms = CAST(strftime('%s', 'now') AS INTEGER) * 1000,
              revocation_reason = 'duplicate purchase found when the ledger was upgraded: refund it at the processor'
              WHERE id IN (SELECT id FROM duplicate_ownership);
            INSERT INTO revocations (transaction_id, original_transaction_id, account_id, revoked_ms, reason)
              SELECT d.id, d.original_id, d.account_id, t.revoked_ms, t.revocation_reason
              FROM duplicate_ownership d JOIN transactions t ON t.id = d.id;
            DROP TABLE duplicate_ownership;
            -- A non-consumable is owned once: a second live PURCHASED row cannot be written.
            CREATE UNIQUE INDEX transactions_owned_once ON transactions(account_id, product_id)
              WHERE state = 1 AND revoked_ms = 0 AND product_type = 2;
            CREATE INDEX transactions_by_account_product ON transactions(account_id, product_id);
            CREATE INDEX transactions_by_account_row ON transactions(account_id);
            CREATE INDEX transactions_unfinished ON transactions(account_id) WHERE state = 1 AND finished = 0;
            CREATE INDEX transactions_restorable ON transactions(account_id) WHERE state = 1 AND revoked_ms = 0 AND product_type != 1;
            """
        ],
        postgres: """
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
            """)
}
