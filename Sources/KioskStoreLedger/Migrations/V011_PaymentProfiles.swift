import KioskStoreCore

extension LedgerMigration {
    /// v11-payment-profiles: each account's customer at a processor that keeps customers (Stripe), and the
    /// method saved to it that renewals charge (``PaymentProfile``); and an index of the renewal intents whose
    /// payment waits for the buyer (`needs_action:…`), which reconciliation resolves once their subscription no
    /// longer waits on them. Stores of the version before never read either, but they still renew Stripe
    /// subscriptions with the first payment's method and never resolve a waiting payment: stop them all before
    /// serving this version with Stripe (docs/upgrading.md).
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
            CREATE INDEX payment_intents_waiting ON payment_intents(updated_ms, id) WHERE outcome LIKE 'needs_action:%';
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
            CREATE INDEX payment_intents_waiting ON payment_intents(updated_ms, id) WHERE outcome LIKE 'needs_action:%';
            """)
}
