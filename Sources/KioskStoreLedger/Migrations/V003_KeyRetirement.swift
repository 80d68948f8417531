import KioskStoreCore

extension LedgerMigration {
    /// v3-key-retirement: Signing keys get a retirement date (`not_after_ms`).
    package static let v003KeyRetirement = LedgerMigration(
        id: "v3-key-retirement",
        sqlite: [
            """
            ALTER TABLE signing_keys ADD COLUMN not_after_ms INTEGER NOT NULL DEFAULT 0
            """
        ],
        postgres: """
            ALTER TABLE signing_keys ADD COLUMN not_after_ms BIGINT NOT NULL DEFAULT 0;
            """)
}
