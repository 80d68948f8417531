import Foundation
import KioskStoreCore

/// Applies ``LedgerMigration/all`` to a PostgreSQL ledger, recorded in `kiosk_migrations`.
package enum PostgresMigrations {
    /// A key for `pg_advisory_xact_lock`: stores starting together migrate one at a time.
    package static let lockKey: Int64 = 0x4B_494F_534B  // "KIOSK"

    /// Applies the migrations this database has not had, each in its own transaction.
    package static func migrate(_ backend: PostgresLedgerBackend) throws {
        for migration in LedgerMigration.all {
            let (id, sql) = (migration.id, migration.postgres)
            // READ COMMITTED: after waiting for the lock, the next statement sees what the holder committed.
            try backend.transaction("BEGIN ISOLATION LEVEL READ COMMITTED") { db in
                try db.execute("SELECT pg_advisory_xact_lock(?)", [lockKey])
                try db.execute(
                    "CREATE TABLE IF NOT EXISTS kiosk_migrations (identifier TEXT PRIMARY KEY, applied_ms BIGINT NOT NULL)",
                    [])
                guard
                    try db.value(String.self, "SELECT identifier FROM kiosk_migrations WHERE identifier = ?", [id])
                        == nil
                else { return }
                try db.execute(sql)
                try db.execute(
                    "INSERT INTO kiosk_migrations (identifier, applied_ms) VALUES (?, ?)",
                    [id, Int64(Date().timeIntervalSince1970 * 1000)])
            }
        }
    }
}
