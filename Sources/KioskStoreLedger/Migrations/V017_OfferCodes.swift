import KioskStoreCore

extension LedgerMigration {
    /// v17-offer-codes: offer code batches, their codes (looked up by the SHA-256 of the normalized code; the code is
    /// kept too, for `kiosk-store codes export`), and who redeemed what: one row per scope (a subscription group, or a
    /// custom code) and account, so the App Store's once-per-account rules hold under concurrent redemptions.
    package static let v017OfferCodes = LedgerMigration(
        id: "v17-offer-codes",
        sqlite: [
            """
            CREATE TABLE offer_code_batches (
              id TEXT PRIMARY KEY,
              kind TEXT NOT NULL,
              product_id TEXT NOT NULL,
              price TEXT NOT NULL,
              period TEXT NOT NULL,
              quantity INTEGER NOT NULL,
              redemption_limit INTEGER NOT NULL,
              redeemed INTEGER NOT NULL DEFAULT 0,
              expires_ms INTEGER NOT NULL,
              revoked_ms INTEGER NOT NULL DEFAULT 0,
              created_ms INTEGER NOT NULL
            );
            CREATE TABLE offer_codes (
              code_hash BLOB PRIMARY KEY,
              code TEXT NOT NULL,
              batch_id TEXT NOT NULL,
              redeemed_ms INTEGER NOT NULL DEFAULT 0,
              account_id TEXT NOT NULL DEFAULT '',
              transaction_id TEXT NOT NULL DEFAULT ''
            );
            CREATE INDEX offer_codes_by_batch ON offer_codes(batch_id, code);
            CREATE INDEX offer_codes_by_transaction ON offer_codes(transaction_id) WHERE transaction_id <> '';
            CREATE TABLE offer_code_redemptions (
              scope TEXT NOT NULL,
              account_id TEXT NOT NULL,
              batch_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL,
              redeemed_ms INTEGER NOT NULL,
              PRIMARY KEY (scope, account_id)
            );
            CREATE INDEX offer_code_redemptions_by_transaction ON offer_code_redemptions(transaction_id);
            """
        ],
        postgres: """
            CREATE TABLE offer_code_batches (
              id TEXT PRIMARY KEY,
              kind TEXT NOT NULL,
              product_id TEXT NOT NULL,
              price TEXT NOT NULL,
              period TEXT NOT NULL,
              quantity BIGINT NOT NULL,
              redemption_limit BIGINT NOT NULL,
              redeemed BIGINT NOT NULL DEFAULT 0,
              expires_ms BIGINT NOT NULL,
              revoked_ms BIGINT NOT NULL DEFAULT 0,
              created_ms BIGINT NOT NULL
            );
            CREATE TABLE offer_codes (
              code_hash BYTEA PRIMARY KEY,
              code TEXT NOT NULL,
              batch_id TEXT NOT NULL,
              redeemed_ms BIGINT NOT NULL DEFAULT 0,
              account_id TEXT NOT NULL DEFAULT '',
              transaction_id TEXT NOT NULL DEFAULT ''
            );
            CREATE INDEX offer_codes_by_batch ON offer_codes(batch_id, code);
            CREATE INDEX offer_codes_by_transaction ON offer_codes(transaction_id) WHERE transaction_id <> '';
            CREATE TABLE offer_code_redemptions (
              scope TEXT NOT NULL,
              account_id TEXT NOT NULL,
              batch_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL,
              redeemed_ms BIGINT NOT NULL,
              PRIMARY KEY (scope, account_id)
            );
            CREATE INDEX offer_code_redemptions_by_transaction ON offer_code_redemptions(transaction_id);
            """)
}
