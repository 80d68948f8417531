import GRDB
import KioskAPI
import KioskStoreCore

// `EventRecord` and `EventKind` are the domain's (KioskStoreCore); here: reading one from a ledger
// row and sending it. A reader that follows the log by id never misses an event: SQLite has one
// writer, so ids commit in order; on PostgreSQL an event's id is its transaction's id × 2^16 plus
// its place in that transaction, and readers read only below the oldest transaction still running
// (`eventHorizon`), so an event with a lower id can never commit after one with a higher id was read.

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
        self.requestID = try row["request_id"]
        self.traceParent = try row["traceparent"]
        self.actor = try row["actor"]
        self.entitlementID = try row["entitlement_id"]
        self.expiresMs = try row["expires_ms"]
        self.storefront = try row["storefront"]
        self.currency = try row["currency"]
    }
}

extension Ledger {

    /// How many events one PostgreSQL transaction may record: an event's id is its transaction's id times this,
    /// plus its place, plus the ledger's base (2^16: ids stay below 2^53, exact in JSON, until a cluster's
    /// transaction counter passes 2^37).
    package static let eventsPerTransaction: Int64 = 1 << 16

    /// The advisory lock a PostgreSQL write of a version before v10-event-order took before it inserted an event;
    /// the migrations that renumber or backfill events take it.
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
        let id: Int64?
        if dialect == .postgres {
            id = try value(
                Int64.self,
                """
                INSERT INTO events (id, \(Self.eventColumns))
                VALUES (\(eventIDBase) + CAST(CAST(pg_current_xact_id() AS TEXT) AS BIGINT) * \(Self.eventsPerTransaction) + ?,
                  ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                RETURNING id
                """, [try nextPostgresEventPlace()] + Self.eventArguments(event))
        } else {
            id = try value(
                Int64.self,
                "INSERT INTO events (\(Self.eventColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                Self.eventArguments(event))
        }
        guard let id else { throw StoreError(.internalFailure, "the event log did not answer the id of its new event") }
        // No NOTIFY: PostgreSQL serialises every notifying commit of the cluster. Other stores' feeds find events by
        // their poll; what must reach them at once (a revocation, a key, a credential) announces itself.
        var recorded = event
        recorded.id = UInt64(id)
        return recorded
    }

    /// Within an operator's action (``OperatorScope``, carried by the write's cause), records an OPERATOR_ACTION
    /// event in the write in progress saying `what` was done (to `accountID`, when to one account); outside one,
    /// nothing. The action and its record commit together.
    public func recordOperatorAction(_ what: String, accountID: String = "", nowMs: Int64) throws {
        guard (WriteCause.current.map { $0.actor } ?? OperatorScope.actor) != nil else { return }
        try appendEvent(EventRecord(type: .operatorAction, accountID: accountID, createdMs: nowMs, reason: what))
    }

    /// Records `event` without reading its id back: on PostgreSQL sent without waiting
    /// (``executeLater(_:_:refusal:)``), with the id ``recordEvent(_:)`` would have given it.
    public func appendEvent(_ event: EventRecord) throws {
        guard dialect == .postgres else {
            _ = try recordEvent(event)
            return
        }
        let place = try nextPostgresEventPlace()
        try executeLater(
            """
            INSERT INTO events (id, \(Self.eventColumns))
            VALUES (\(eventIDBase) + CAST(CAST(pg_current_xact_id() AS TEXT) AS BIGINT) * \(Self.eventsPerTransaction) + ?,
              ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [place] + Self.eventArguments(event))
    }

    /// The columns an event is written to, but its id.
    private static var eventColumns: String {
        """
        type, account_id, transaction_id, original_transaction_id, product_id, created_ms, reason, credit_shortfall,
          auto_renew, price, expiration_reason, request_id, traceparent, actor, entitlement_id, expires_ms, storefront,
          currency
        """
    }

    /// `event`'s values for ``eventColumns``; its cause is the write's (``WriteCause``), not the record's.
    private static func eventArguments(_ event: EventRecord) -> [any LedgerArgument] {
        let cause = WriteCause.current
        return [
            Int64(event.type.rawValue), event.accountID, event.transactionID, event.originalTransactionID,
            event.productID, event.createdMs, event.reason, Int64(clamping: event.creditShortfall), event.autoRenew,
            event.price, Int64(event.expirationReason.rawValue), cause?.requestID ?? "", cause?.traceParent ?? "",
            // A group write's cause says who acts; a write run on the calling task reads the operator's scope.
            (cause.map { $0.actor } ?? OperatorScope.actor) ?? "", event.entitlementID, event.expiresMs,
            event.storefront, event.currency,
        ]
    }

    /// This PostgreSQL transaction's id × 2^16 plus the event's place in it, counted here: no read of the events table,
    /// whose index pages a SERIALIZABLE read would lock against every other writer's insert.
    private func nextPostgresEventPlace() throws -> Int64 {
        let place = nextEventPlace()
        guard place < Self.eventsPerTransaction else {
            throw StoreError(
                .internalFailure, "one ledger write may record \(Self.eventsPerTransaction) events; this one did more")
        }
        return place
    }

    /// How many events one PostgreSQL transaction may record (``Ledger/eventsPerTransaction``).
    package static var eventsPerTransaction: Int64 { Ledger.eventsPerTransaction }

    /// On PostgreSQL, the SQL for the lowest event id a transaction still running could commit: the oldest running
    /// transaction's id (the snapshot's xmin, cluster-wide) × 2^16. Every event below it is committed or gone, so a
    /// reader reads only below it. Nil on SQLite, whose ids commit in order.
    package var eventHorizon: String? {
        guard dialect == .postgres else { return nil }
        return
            "(\(eventIDBase) + CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS TEXT) AS BIGINT) * \(Self.eventsPerTransaction))"
    }

    /// The highest event id a reader may read now (0 when there is none): on PostgreSQL, below ``eventHorizon``.
    public func latestEventID() throws -> UInt64 {
        let sql = eventHorizon.map { "SELECT MAX(id) FROM events WHERE id < \($0)" } ?? "SELECT MAX(id) FROM events"
        return UInt64(clamping: try value(Int64.self, sql) ?? 0)
    }

    /// True when a committed event waits at or above ``eventHorizon`` (a transaction older than it is still open
    /// somewhere in the cluster); never on SQLite.
    ///
    /// It compares the highest committed id with the horizon: PostgreSQL reads that id from the end of the primary
    /// key's index whatever it guesses of the horizon. A search for an id at or above the horizon depends on the
    /// guess: without statistics on `events` (a new ledger before its first ANALYZE), PostgreSQL took a third of the
    /// rows to match and planned a scan of the table that stops at the first, which read the whole table every look
    /// (the matching rows, if any, are the newest).
    public func eventsHeldBack() throws -> Bool {
        guard let eventHorizon else { return false }
        return try value(Int64.self, "SELECT CASE WHEN MAX(id) >= \(eventHorizon) THEN 1 ELSE 0 END FROM events") == 1
    }

    /// Events after `cursor`, oldest first, at most `limit`: of one account, or of all; of `types`, or of any.
    public func events(
        after cursor: UInt64, limit: Int, accountID: String?,
        types: [EventKind]
    ) throws -> [EventRecord] {
        var sql = "SELECT * FROM events WHERE id > ?"
        var arguments: [any LedgerArgument] = [Int64(clamping: cursor)]
        if let eventHorizon { sql += " AND id < \(eventHorizon)" }
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
