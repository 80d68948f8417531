import Foundation
import KioskStoreCore

/// A value bound to a ledger statement or read from one of its rows: the
/// four kinds every backend stores (booleans are integers 0 and 1, as SQLite
/// keeps them; PostgreSQL's columns are `BIGINT`, `TEXT` and `BYTEA`).
public enum LedgerValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case text(String)
    case bytes([UInt8])
}

/// A Swift value that can be bound to a ledger statement's `?`.
public protocol LedgerArgument: Sendable {
    /// The value as stored.
    var ledgerValue: LedgerValue { get }
}

/// A Swift value a ledger row's column can be read as.
public protocol LedgerColumn {
    /// Reads `value`, found in `column`.
    /// - Throws: ``LedgerError`` when the stored kind is not this type's.
    init(ledgerValue value: LedgerValue, column: String) throws
}

extension Int64: LedgerArgument, LedgerColumn {
    public var ledgerValue: LedgerValue { .integer(self) }
    public init(ledgerValue value: LedgerValue, column: String) throws {
        guard case .integer(let integer) = value else { throw LedgerError.mismatch(column, value, "an integer") }
        self = integer
    }
}

extension Int: LedgerArgument, LedgerColumn {
    public var ledgerValue: LedgerValue { .integer(Int64(self)) }
    public init(ledgerValue value: LedgerValue, column: String) throws {
        self = Int(try Int64(ledgerValue: value, column: column))
    }
}

extension UInt32: LedgerArgument {
    public var ledgerValue: LedgerValue { .integer(Int64(self)) }
}

extension Int32: LedgerArgument, LedgerColumn {
    public var ledgerValue: LedgerValue { .integer(Int64(self)) }
    public init(ledgerValue value: LedgerValue, column: String) throws {
        let integer = try Int64(ledgerValue: value, column: column)
        guard let narrow = Int32(exactly: integer) else {
            throw LedgerError(.schema, "ledger column \(column) holds \(integer), out of a 32-bit range")
        }
        self = narrow
    }
}

extension Bool: LedgerArgument, LedgerColumn {
    public var ledgerValue: LedgerValue { .integer(self ? 1 : 0) }
    public init(ledgerValue value: LedgerValue, column: String) throws {
        self = try Int64(ledgerValue: value, column: column) != 0
    }
}

extension String: LedgerArgument, LedgerColumn {
    public var ledgerValue: LedgerValue { .text(self) }
    public init(ledgerValue value: LedgerValue, column: String) throws {
        guard case .text(let text) = value else { throw LedgerError.mismatch(column, value, "text") }
        self = text
    }
}

extension Array: LedgerArgument where Element == UInt8 {
    public var ledgerValue: LedgerValue { .bytes(self) }
}

extension Array: LedgerColumn where Element == UInt8 {
    public init(ledgerValue value: LedgerValue, column: String) throws {
        guard case .bytes(let bytes) = value else { throw LedgerError.mismatch(column, value, "bytes") }
        self = bytes
    }
}

extension Optional: LedgerArgument where Wrapped: LedgerArgument {
    public var ledgerValue: LedgerValue { map(\.ledgerValue) ?? .null }
}

extension Optional: LedgerColumn where Wrapped: LedgerColumn {
    public init(ledgerValue value: LedgerValue, column: String) throws {
        self = value == .null ? nil : try Wrapped(ledgerValue: value, column: column)
    }
}

/// One row a ledger statement read: its values by column name.
public struct LedgerRow: Sendable {
    /// The names of a result's columns and where each is, shared by its rows.
    public final class Columns: Sendable {
        package let names: [String]
        package let index: [String: Int]

        public init(_ names: [String]) {
            self.names = names
            // With a name twice (`SELECT rowid AS x, *`), the first one read wins, as in SQLite and GRDB.
            index = Dictionary(names.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
        }
    }

    package let columns: Columns
    package let values: [LedgerValue]

    public init(columns: Columns, values: [LedgerValue]) {
        self.columns = columns
        self.values = values
    }

    /// True when the row has `column`.
    public func has(_ column: String) -> Bool { columns.index[column] != nil }

    /// The value in `column`, read as the type the caller needs.
    /// - Throws: ``LedgerError`` when there is no such column or it holds another kind of value.
    public subscript<T: LedgerColumn>(_ column: String) -> T {
        get throws {
            guard let position = columns.index[column] else {
                throw LedgerError(
                    .schema, "the ledger row has no column \(column) (it has \(columns.names.joined(separator: ", ")))")
            }
            return try T(ledgerValue: values[position], column: column)
        }
    }

    /// The closed domain enum stored as an integer in `column`.
    /// - Throws: ``LedgerError`` (schema) for a value the enum does not have: a row this version cannot read.
    package func enumeration<T: RawRepresentable>(_ column: String) throws -> T where T.RawValue == Int32 {
        let raw = try self[column] as Int32
        guard let value = T(rawValue: raw) else {
            throw LedgerError(.schema, "ledger column \(column) holds \(raw), which \(T.self) does not have")
        }
        return value
    }

    /// The first column's value.
    package func first<T: LedgerColumn>(_ type: T.Type) throws -> T {
        guard let value = values.first else { throw LedgerError(.schema, "the ledger row has no columns") }
        return try T(ledgerValue: value, column: columns.names.first ?? "?")
    }
}

/// Why the ledger refused a statement, in terms both backends share.
public struct LedgerError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable {
        /// A UNIQUE or PRIMARY KEY constraint: the row exists already.
        case uniqueViolation
        /// A CHECK constraint (a balance below 0, a state not allowed).
        case checkViolation
        /// The database could not serialise the transaction with a concurrent one; retrying it may succeed.
        case serializationFailure
        /// The schema is not what this version expects.
        case schema
        /// The database is unreachable or failed.
        case unavailable
        /// The database refused a statement for another reason (its message says which).
        case refused
    }

    public var kind: Kind
    public var message: String
    /// The table the database named in its refusal, when it named one.
    package var table: String?
    /// A ``Kind/serializationFailure`` the ledger made of another error so that the write runs again (a prepared
    /// statement the schema overtook, one PostgreSQL cannot prepare as written), not a collision with another write.
    package var rerun = false

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    package static func mismatch(_ column: String, _ value: LedgerValue, _ expected: String) -> LedgerError {
        LedgerError(.schema, "ledger column \(column) holds \(value.kindName), not \(expected)")
    }

    public var description: String { "ledger: \(message)" }
}

extension LedgerValue {
    /// The value's kind as a number: 0 NULL, 1 integer, 2 text, 3 bytes.
    package var kindCode: UInt8 {
        switch self {
        case .null: 0
        case .integer: 1
        case .text: 2
        case .bytes: 3
        }
    }

    package var kindName: String {
        switch self {
        case .null: "NULL"
        case .integer: "an integer"
        case .text: "text"
        case .bytes: "bytes"
        }
    }
}

/// The SQL that differs between the ledger's backends.
public struct LedgerDialect: Sendable, Hashable {
    /// The backend's name, for messages and figures.
    public var name: String
    /// The column that orders a table's rows as they were inserted: SQLite's `rowid`, PostgreSQL's `seq`.
    public var insertionOrder: String

    public static let sqlite = LedgerDialect(name: "sqlite", insertionOrder: "rowid")
    public static let postgres = LedgerDialect(name: "postgres", insertionOrder: "seq")
}

/// The statements of one ledger transaction, on whichever backend holds the
/// ledger. SQL is written once, in the subset both SQLite (3.35+) and
/// PostgreSQL speak: `?` placeholders, `INSERT … ON CONFLICT`, `RETURNING`,
/// `CAST(… AS BIGINT)` around sums; ``LedgerDialect`` names what differs.
public protocol LedgerDatabase: StoreRepositories {
    /// Which SQL dialect this is.
    var dialect: LedgerDialect { get }
    /// Runs one statement; returns how many rows it changed.
    @discardableResult
    func execute(_ sql: String, _ arguments: [any LedgerArgument]) throws -> Int
    /// Runs one statement and returns every row it read.
    func fetchAll(_ sql: String, _ arguments: [any LedgerArgument]) throws -> [LedgerRow]
    /// Runs one statement whose changed-row count the caller does not need, perhaps later. PostgreSQL sends it and
    /// goes on without its answer (the statements of a transaction still run in the order sent, so each sees what the
    /// ones before it did): the transaction's next statement that waits, its COMMIT at the latest, waits for it too
    /// and fails with its error, as `refusal` turns it (nil, or a `refusal` that answers nil: the error as it is).
    /// SQLite runs it at once.
    func executeLater(
        _ sql: String, _ arguments: [any LedgerArgument], refusal: ((LedgerError) -> (any Error)?)?
    ) throws
    /// The place of the next event this transaction records, 0 for its first (PostgreSQL numbers events by
    /// transaction and place; SQLite counts them itself and never asks).
    func nextEventPlace() -> Int64
    /// True the first time this transaction asks for `accountID`: its row needs the update that orders writes about
    /// it (``serializeOnAccount(_:)``) once a transaction, not once a statement that touches it.
    func firstSerialization(of accountID: String) -> Bool
    /// Reads `reads` ahead, each a plain `SELECT` of at most one row. PostgreSQL runs them as one statement (one
    /// round trip where each would take its own) and answers the transaction's next ``fetchAll(_:_:)`` of the same SQL
    /// and arguments from what it read, until the transaction runs any other statement; a read that finds more than
    /// one row leaves every read to run alone. SQLite reads nothing ahead.
    func readAhead(_ reads: [LedgerRead]) throws
}

/// A read to run ahead of its turn (``LedgerDatabase/readAhead(_:)``).
public struct LedgerRead: Sendable {
    public var sql: String
    public var arguments: [any LedgerArgument]

    public init(_ sql: String, _ arguments: [any LedgerArgument]) {
        self.sql = sql
        self.arguments = arguments
    }
}

extension LedgerDatabase {
    /// What PostgreSQL's event ids add to transaction id × 2^16 (0 but for a ledger restored from another cluster).
    package var eventIDBase: Int64 {
        (self as? PostgresLedgerDatabase)?.eventIDBase ?? 0
    }

    public func nextEventPlace() -> Int64 { 0 }
    public func firstSerialization(of accountID: String) -> Bool { true }
    public func readAhead(_ reads: [LedgerRead]) throws {}

    public func executeLater(
        _ sql: String, _ arguments: [any LedgerArgument], refusal: ((LedgerError) -> (any Error)?)?
    ) throws {
        do {
            try execute(sql, arguments)
        } catch let error as LedgerError {
            throw refusal?(error) ?? error
        }
    }

    /// ``executeLater(_:_:refusal:)`` with the statement's error thrown as it is.
    package func executeLater(_ sql: String, _ arguments: [any LedgerArgument]) throws {
        try executeLater(sql, arguments, refusal: nil)
    }
}

extension LedgerDatabase {
    @discardableResult
    package func execute(_ sql: String) throws -> Int { try execute(sql, []) }

    /// Every row a statement without arguments read.
    package func fetchAll(_ sql: String) throws -> [LedgerRow] { try fetchAll(sql, []) }

    /// The first row a statement read, if any.
    package func fetchOne(_ sql: String, _ arguments: [any LedgerArgument] = []) throws -> LedgerRow? {
        try fetchAll(sql, arguments).first
    }

    /// The first column of the first row a statement read; nil when it read none or that value is NULL.
    package func value<T: LedgerColumn>(
        _ type: T.Type, _ sql: String, _ arguments: [any LedgerArgument] = []
    ) throws -> T? {
        guard let row = try fetchOne(sql, arguments) else { return nil }
        return try row.first(T?.self)
    }

    /// The first column of every row a statement read (NULLs skipped).
    package func values<T: LedgerColumn>(
        _ type: T.Type, _ sql: String, _ arguments: [any LedgerArgument] = []
    ) throws -> [T] {
        try fetchAll(sql, arguments).compactMap { try $0.first(T?.self) }
    }
}
