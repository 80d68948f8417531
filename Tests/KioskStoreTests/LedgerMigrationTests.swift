import Foundation
import GRDB
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// The schema's versions: one per file, both dialects side by side, bringing SQLite and PostgreSQL to the same tables.
@Suite struct LedgerMigrationTests {
    @Test func versionsAreInOrderWithUniqueNames() {
        let ids = LedgerMigration.all.map(\.id)
        #expect(Set(ids).count == ids.count)
        for (index, id) in ids.enumerated() {
            #expect(id == "v\(index + 1)" || id.hasPrefix("v\(index + 1)-"), "\(id) is not version \(index + 1)")
        }
    }

    @Test func postgresScriptsUsePostgresTypes() {
        for migration in LedgerMigration.all {
            for word in [" INTEGER", " BLOB", "AUTOINCREMENT"] {
                #expect(!migration.postgres.contains(word), "\(migration.id)'s PostgreSQL script says\(word)")
            }
        }
        #expect(
            LedgerMigration.v009RefundRequests.postgres.contains("pg_advisory_xact_lock(\(Ledger.eventOrderLockKey))"))
        #expect(
            LedgerMigration.v010EventOrder.postgres.contains("pg_advisory_xact_lock(\(Ledger.eventOrderLockKey))"))
    }

    /// Every table and its columns, as the SQLite migrations leave a new database.
    static func sqliteSchema() throws -> [String: Set<String>] {
        let queue = try DatabaseQueue()
        try LedgerMigration.sqliteMigrator.migrate(queue)
        return try queue.read { db in
            var schema: [String: Set<String>] = [:]
            for table in try String.fetchAll(
                db,
                sql:
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'grdb_%'"
            ) {
                schema[table] = Set(try db.columns(in: table).map(\.name))
            }
            return schema
        }
    }

    @Test func bothDialectsMakeTheSameTables() throws {
        let sqlite = try Self.sqliteSchema()
        #expect(sqlite["subscriptions"]?.contains("accepted_price") == true)
        guard TestLedger.isPostgres else { return }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = try testLedger(directory: directory)
        let rows = try ledger.backend.read { db in
            try db.fetchAll(
                "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'", [])
        }
        var postgres: [String: Set<String>] = [:]
        for row in rows {
            let table: String = try row["table_name"]
            let column: String = try row["column_name"]
            postgres[table, default: []].insert(column)
        }
        postgres["kiosk_migrations"] = nil
        // PostgreSQL's `seq` orders what SQLite orders by its implicit rowid.
        for table in ["transactions", "signing_keys"] { postgres[table]?.remove("seq") }
        #expect(postgres == sqlite)
    }
}
