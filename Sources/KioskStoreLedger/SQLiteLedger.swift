import Foundation
import GRDB
import KioskStoreCore

/// Where a ledger lives: transactions of ``LedgerDatabase`` statements on one backend.
///
/// `read` and `write` run their body in one transaction of its own;
/// `groupWrite` is the durable write every purchase uses: atomic on its own,
/// on disk when it returns, possibly committed together with other writes
/// (SQLite's ``GroupCommit``).
package protocol LedgerBackend: Sendable {
    /// The SQL dialect of this backend.
    var dialect: LedgerDialect { get }
    /// Runs `body` in a read transaction.
    func read<T>(_ body: (any LedgerDatabase) throws -> T) throws -> T
    /// Runs `body` in a read transaction, off the caller's thread.
    func read<T: Sendable>(_ body: @escaping @Sendable (any LedgerDatabase) throws -> T) async throws -> T
    /// Runs `body` in a write transaction of its own, committed (durably) before this returns.
    @discardableResult
    func write<T>(_ body: (any LedgerDatabase) throws -> T) throws -> T
    /// Runs `body` as one durable write of the next group commit. Writes with the same
    /// `key` (an account id) never both commit on snapshots that miss each other (SQLite runs every write one
    /// after the other; PostgreSQL orders them by the account's row).
    @discardableResult
    func groupWrite<T: Sendable>(
        serializingOn key: String?, _ body: @escaping @Sendable (any LedgerDatabase) throws -> T
    ) async throws -> T
    /// Runs `body`, which may use this backend's synchronous methods, where waiting on the database blocks no
    /// event loop and no Swift concurrency thread (PostgreSQL: the backend's own threads; SQLite, whose reads
    /// and writes do not wait on a network: here).
    func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T
    /// Runs `body`, which runs exactly one statement (a read): one statement is atomic and sees one snapshot on
    /// its own, so a backend may run it without a transaction around it (PostgreSQL: one round trip instead of
    /// BEGIN, the statement and COMMIT). By default, a read transaction.
    func readStatement<T: Sendable>(_ body: @escaping @Sendable (any LedgerDatabase) throws -> T) async throws -> T
}

extension LedgerBackend {
    package func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T { try body() }

    package func readStatement<T: Sendable>(
        _ body: @escaping @Sendable (any LedgerDatabase) throws -> T
    ) async throws -> T {
        try await read(body)
    }
}

/// The embedded backend: an SQLite database in WAL mode in the data dir (GRDB).
///
/// Every write is one SQLite transaction (`BEGIN IMMEDIATE`) committed with
/// `synchronous = FULL` before the method returns: the commit fsyncs the WAL,
/// so an answer the store sends is on disk.
package final class SQLiteLedgerBackend: LedgerBackend {
    package let pool: DatabasePool
    package let group: GroupCommit

    package var dialect: LedgerDialect { .sqlite }

    /// Opens (creating and migrating if needed) the database at `path`.
    package init(path: String, migrator: DatabaseMigrator) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        // GRDB's WAL set-up runs after `prepareDatabase` on the writer and sets
        // `synchronous = NORMAL` (no fsync at commit): set FULL again on the
        // pool's one writer connection, after it. Readers keep prepareDatabase's FULL.
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        try migrator.migrate(pool)
        group = GroupCommit(pool: pool)
    }

    package func read<T>(_ body: (any LedgerDatabase) throws -> T) throws -> T {
        try pool.read { db in try body(SQLiteLedgerDatabase(db: db)) }
    }

    package func read<T: Sendable>(_ body: @escaping @Sendable (any LedgerDatabase) throws -> T) async throws -> T {
        try await pool.read { db in try body(SQLiteLedgerDatabase(db: db)) }
    }

    @discardableResult
    package func write<T>(_ body: (any LedgerDatabase) throws -> T) throws -> T {
        try pool.write { db in try body(SQLiteLedgerDatabase(db: db)) }
    }

    @discardableResult
    package func groupWrite<T: Sendable>(
        serializingOn key: String?, _ body: @escaping @Sendable (any LedgerDatabase) throws -> T
    ) async throws -> T {
        try await group.write { db in try body(SQLiteLedgerDatabase(db: db)) }
    }
}

/// A GRDB connection, inside one of its transactions, as a ``LedgerDatabase``.
package struct SQLiteLedgerDatabase: LedgerDatabase {
    package let db: Database

    package var dialect: LedgerDialect { .sqlite }

    package func execute(_ sql: String, _ arguments: [any LedgerArgument]) throws -> Int {
        try Self.translatingErrors {
            if arguments.isEmpty {
                // May hold several statements (migrations, clearing); not worth a cached statement.
                try db.execute(sql: sql)
            } else {
                try db.cachedStatement(sql: sql).execute(arguments: Self.arguments(arguments))
            }
            return db.changesCount
        }
    }

    package func fetchAll(_ sql: String, _ arguments: [any LedgerArgument]) throws -> [LedgerRow] {
        try Self.translatingErrors {
            let cursor = try Row.fetchCursor(db.cachedStatement(sql: sql), arguments: Self.arguments(arguments))
            var rows: [LedgerRow] = []
            var columns: LedgerRow.Columns?
            // The cursor reuses one Row: each row's values are copied out before the next.
            while let row = try cursor.next() {
                let names = columns ?? LedgerRow.Columns(Array(row.columnNames))
                columns = names
                rows.append(LedgerRow(columns: names, values: row.databaseValues.map(Self.value)))
            }
            return rows
        }
    }

    package static func arguments(_ arguments: [any LedgerArgument]) -> StatementArguments {
        StatementArguments(
            arguments.map { argument -> DatabaseValue in
                switch argument.ledgerValue {
                case .null: .null
                case .integer(let integer): integer.databaseValue
                case .text(let text): text.databaseValue
                case .bytes(let bytes): Data(bytes).databaseValue
                }
            })
    }

    package static func value(_ value: DatabaseValue) -> LedgerValue {
        switch value.storage {
        case .null: .null
        case .int64(let integer): .integer(integer)
        case .double(let double): .integer(Int64(double))
        case .string(let text): .text(text)
        case .blob(let data): .bytes(Array(data))
        }
    }

    /// SQLite's constraint failures as the ``LedgerError`` kinds both backends share; other errors unchanged.
    package static func translatingErrors<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError {
            switch error.extendedResultCode {
            case .SQLITE_CONSTRAINT_UNIQUE, .SQLITE_CONSTRAINT_PRIMARYKEY:
                throw LedgerError(.uniqueViolation, error.message ?? "\(error)")
            case .SQLITE_CONSTRAINT_CHECK:
                throw LedgerError(.checkViolation, error.message ?? "\(error)")
            default:
                throw error
            }
        }
    }
}
