import KioskStoreCore

extension LedgerMigration {
    /// v15-entitlements: the entitlements each account holds as last recorded (what ENTITLEMENT_STARTED and
    /// ENTITLEMENT_ENDED events are told from, and what the expiry sweep looks through), and the events' entitlement
    /// id and end. Columns with defaults: a store of the version before writes events without them.
    package static let v015Entitlements = LedgerMigration(
        id: "v15-entitlements",
        sqlite: [
            """
            ALTER TABLE events ADD COLUMN entitlement_id TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN expires_ms INTEGER NOT NULL DEFAULT 0;
            CREATE TABLE entitlements (
              account_id TEXT NOT NULL,
              entitlement_id TEXT NOT NULL,
              product_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL,
              original_id TEXT NOT NULL,
              source TEXT NOT NULL,
              expires_ms INTEGER NOT NULL,
              purchase_ms INTEGER NOT NULL,
              will_renew INTEGER NOT NULL,
              started_ms INTEGER NOT NULL,
              PRIMARY KEY (account_id, entitlement_id)
            );
            CREATE INDEX entitlements_by_expiry ON entitlements(expires_ms) WHERE expires_ms > 0;
            """
        ],
        postgres: """
            ALTER TABLE events ADD COLUMN entitlement_id TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN expires_ms BIGINT NOT NULL DEFAULT 0;
            CREATE TABLE entitlements (
              account_id TEXT NOT NULL,
              entitlement_id TEXT NOT NULL,
              product_id TEXT NOT NULL,
              transaction_id TEXT NOT NULL,
              original_id TEXT NOT NULL,
              source TEXT NOT NULL,
              expires_ms BIGINT NOT NULL,
              purchase_ms BIGINT NOT NULL,
              will_renew BIGINT NOT NULL,
              started_ms BIGINT NOT NULL,
              PRIMARY KEY (account_id, entitlement_id)
            );
            CREATE INDEX entitlements_by_expiry ON entitlements(expires_ms) WHERE expires_ms > 0;
            """)
}
