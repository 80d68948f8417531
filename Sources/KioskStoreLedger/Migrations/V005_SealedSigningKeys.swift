import KioskStoreCore

extension LedgerMigration {
    /// v5-sealed-signing-keys: Signing keys may carry their private half sealed with the key-encryption key, for
    /// replicas.
    package static let v005SealedSigningKeys = LedgerMigration(
        id: "v5-sealed-signing-keys",
        sqlite: [
            """
            ALTER TABLE signing_keys ADD COLUMN sealed_private_key BLOB
            """
        ],
        postgres: """
            ALTER TABLE signing_keys ADD COLUMN sealed_private_key BYTEA;
            """)
}
