import KioskStoreCore

extension LedgerMigration {
    /// v11-payment-profiles: each account's customer at a processor that keeps customers (Stripe), and the
    /// method saved to it that renewals charge (``PaymentProfile``). A new table: stores of the version before
    /// never read it, so a rolling upgrade needs nothing more.
    package static let v011PaymentProfiles = LedgerMigration(
        id: "v11-payment-profiles",
        sqlite: [
            """
            CREATE TABLE payment_profiles (
              account_id TEXT NOT NULL REFERENCES accounts(id),
              processor TEXT NOT NULL,
              customer_id TEXT NOT NULL,
              payment_method TEXT NOT NULL DEFAULT '',
              updated_ms INTEGER NOT NULL,
              PRIMARY KEY (account_id, processor)
            );
            """
        ],
        postgres: """
            CREATE TABLE payment_profiles (
              account_id TEXT NOT NULL REFERENCES accounts(id),
              processor TEXT NOT NULL,
              customer_id TEXT NOT NULL,
              payment_method TEXT NOT NULL DEFAULT '',
              updated_ms BIGINT NOT NULL,
              PRIMARY KEY (account_id, processor)
            );
            """)
}
