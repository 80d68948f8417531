import KioskStoreCore

extension LedgerMigration {
    /// v4-service-credentials: Service credentials (roles `content` and `admin`), stored as token hashes.
    package static let v004ServiceCredentials = LedgerMigration(
        id: "v4-service-credentials",
        sqlite: [
            """
            CREATE TABLE service_credentials (
              id TEXT PRIMARY KEY,
              role TEXT NOT NULL CHECK (role IN ('content', 'admin')),
              name TEXT NOT NULL,
              token_hash BLOB NOT NULL UNIQUE,
              created_ms INTEGER NOT NULL,
              revoked_ms INTEGER NOT NULL DEFAULT 0
            );
            """
        ],
        postgres: """
            CREATE TABLE service_credentials (
              id TEXT PRIMARY KEY,
              role TEXT NOT NULL CHECK (role IN ('content', 'admin')),
              name TEXT NOT NULL,
              token_hash BYTEA NOT NULL UNIQUE,
              created_ms BIGINT NOT NULL,
              revoked_ms BIGINT NOT NULL DEFAULT 0
            );
            """)
}
