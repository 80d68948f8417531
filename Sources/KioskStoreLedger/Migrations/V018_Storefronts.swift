import KioskStoreCore

extension LedgerMigration {
    /// v18-storefronts: the storefront an account buys in, the storefront a transaction and its payment were priced
    /// in, the storefront a subscription renews in with the currency of its agreed price, and an event's storefront
    /// and currency. Columns with an empty default: rows from before (and a store of the version before) mean the
    /// catalog's default storefront; an agreed price from before is in its latest transaction's currency (filled in).
    package static let v018Storefronts = LedgerMigration(
        id: "v18-storefronts",
        sqlite: [
            """
            ALTER TABLE accounts ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE transactions ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE payment_intents ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE subscriptions ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE subscriptions ADD COLUMN accepted_currency TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN currency TEXT NOT NULL DEFAULT '';
            UPDATE subscriptions SET accepted_currency = COALESCE(
              (SELECT currency FROM transactions t WHERE t.id = subscriptions.latest_transaction_id), '')
            WHERE accepted_price <> '';
            """
        ],
        postgres: """
            ALTER TABLE accounts ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE transactions ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE payment_intents ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE subscriptions ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE subscriptions ADD COLUMN accepted_currency TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN storefront TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN currency TEXT NOT NULL DEFAULT '';
            UPDATE subscriptions SET accepted_currency = COALESCE(
              (SELECT currency FROM transactions t WHERE t.id = subscriptions.latest_transaction_id), '')
            WHERE accepted_price <> '';
            """)
}
