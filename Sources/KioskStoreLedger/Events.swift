import GRDB
import KioskAPI
import KioskStoreCore

// `EventRecord` and `EventKind` are the domain's (KioskStoreCore); here: reading one from a ledger
// row and sending it. Event ids increase in the order events commit, on both backends: SQLite has
// one writer, and on PostgreSQL a write takes a transaction-scoped advisory lock before it inserts
// an event, so an event with a lower id can never commit after one with a higher id has been read.

extension EventRecord {
    package init(row: LedgerRow) throws {
        // Kept whatever its number: a newer replica on the same ledger may record kinds this version does not know.
        let type = EventKind(rawValue: Int32(clamping: try row["type"] as Int64))
        self.init(
            id: UInt64(clamping: try row["id"] as Int64), type: type, accountID: try row["account_id"],
            transactionID: try row["transaction_id"], originalTransactionID: try row["original_transaction_id"],
            productID: try row["product_id"], createdMs: try row["created_ms"], reason: try row["reason"],
            creditShortfall: UInt64(clamping: try row["credit_shortfall"] as Int64), autoRenew: try row["auto_renew"],
            price: try row["price"],
            expirationReason: Subscription.ExpirationReason(
                rawValue: Int32(clamping: try row["expiration_reason"] as Int64)) ?? .unspecified)
    }
}

extension Ledger {

    /// The advisory lock a PostgreSQL write takes before it inserts an event: event ids commit in order.
    package static let eventOrderLockKey: Int64 = 0x4B494F534B_45  // "KIOSKE"

    /// Events after `cursor`, oldest first, at most `limit`: of one account or all, of `types` or any.
    public func events(
        after cursor: UInt64, limit: Int = 500, accountID: String? = nil, types: [EventKind] = []
    ) async throws -> [EventRecord] {
        try await backend.read { db in try db.events(after: cursor, limit: limit, accountID: accountID, types: types) }
    }

    /// The highest event id recorded so far.
    public func latestEventID() throws -> UInt64 {
        try backend.read { db in try db.latestEventID() }
    }
}

// The ledger adapter: the domain's repository ports on SQL (SQLite and PostgreSQL alike).
extension LedgerDatabase {
    /// Records `event` in the write in progress; returns it with its id.
    @discardableResult
    public func recordEvent(_ event: EventRecord) throws -> EventRecord {
        if dialect == .postgres {
            // Held to the commit: ids are handed out and committed one writer at a time.
            try execute("SELECT pg_advisory_xact_lock(?)", [Ledger.eventOrderLockKey])
        }
        guard
            let id = try value(
                Int64.self,
                """
                INSERT INTO events (type, account_id, transaction_id, original_transaction_id, product_id, created_ms, reason,
                  credit_shortfall, auto_renew, price, expiration_reason)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id
                """,
                [
                    Int64(event.type.rawValue), event.accountID, event.transactionID, event.originalTransactionID,
                    event.productID, event.createdMs,
                    event.reason, Int64(clamping: event.creditShortfall), event.autoRenew, event.price,
                    Int64(event.expirationReason.rawValue),
                ])
        else { throw StoreError(.internalFailure, "the event log did not answer the id of its new event") }
        try Ledger.announceChange(self)
        var recorded = event
        recorded.id = UInt64(id)
        return recorded
    }

    /// The highest event id (0 when there is none).
    public func latestEventID() throws -> UInt64 {
        UInt64(clamping: try value(Int64.self, "SELECT MAX(id) FROM events") ?? 0)
    }

    /// Events after `cursor`, oldest first, at most `limit`: of one account, or of all; of `types`, or of any.
    public func events(
        after cursor: UInt64, limit: Int, accountID: String?,
        types: [EventKind]
    ) throws -> [EventRecord] {
        var sql = "SELECT * FROM events WHERE id > ?"
        var arguments: [any LedgerArgument] = [Int64(clamping: cursor)]
        if let accountID {
            sql += " AND account_id = ?"
            arguments.append(accountID)
        }
        if !types.isEmpty {
            sql += " AND type IN (\(Array(repeating: "?", count: types.count).joined(separator: ", ")))"
            arguments += types.map { Int64($0.rawValue) as any LedgerArgument }
        }
        sql += " ORDER BY id LIMIT ?"
        arguments.append(Int64(limit))
        return try fetchAll(sql, arguments).map(EventRecord.init)
    }
}
