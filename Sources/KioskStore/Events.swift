import GRDB
import KioskAPI

/// One entry of the ledger's event log: a change to a purchase, recorded in
/// the same write as the change (``Ledger/recordEvent(_:_:)``).
///
/// Ids increase in the order events commit, on both backends: SQLite has one
/// writer, and on PostgreSQL a write takes a transaction-scoped advisory lock
/// before it inserts an event, so an event with a lower id can never commit
/// after one with a higher id has been read. A reader resuming after an id
/// therefore never misses one.
public struct EventRecord: Hashable, Sendable {
    /// The event's id and cursor.
    public var id: UInt64
    public var type: StoreV1.EventType
    public var accountID: String
    public var transactionID: String
    public var originalTransactionID: String
    public var productID: String
    /// When it was recorded, milliseconds since 1970 (the store's clock).
    public var createdMs: Int64
    /// REFUNDED: the revocation reason; DECLINED: why; REFUND_REQUESTED / REFUND_DENIED: the buyer's or operator's words.
    public var reason: String
    public var creditShortfall: UInt64
    /// AUTO_RENEW_CHANGED: the new setting.
    public var autoRenew: Bool
    /// PRICE_CHANGED: the accepted price.
    public var price: String
    /// EXPIRED: why.
    public var expirationReason: StoreV1.ExpirationReason

    /// An event to record (its id is assigned by the ledger).
    public init(
        type: StoreV1.EventType, accountID: String, transactionID: String = "", originalTransactionID: String = "", productID: String = "",
        createdMs: Int64, reason: String = "", creditShortfall: UInt64 = 0, autoRenew: Bool = false, price: String = "",
        expirationReason: StoreV1.ExpirationReason = .expirationReasonUnspecified
    ) {
        self.id = 0
        self.type = type
        self.accountID = accountID
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.createdMs = createdMs
        self.reason = reason
        self.creditShortfall = creditShortfall
        self.autoRenew = autoRenew
        self.price = price
        self.expirationReason = expirationReason
    }

    /// The event about `record` (its ids and product).
    init(_ type: StoreV1.EventType, _ record: TransactionRecord, nowMs: Int64, reason: String = "", creditShortfall: UInt64 = 0) {
        self.init(type: type, accountID: record.accountID, transactionID: record.id, originalTransactionID: record.originalID,
                  productID: record.productID, createdMs: nowMs, reason: reason, creditShortfall: creditShortfall)
    }

    init(row: LedgerRow) throws {
        id = UInt64(clamping: try row["id"] as Int64)
        type = StoreV1.EventType(rawValue: Int32(clamping: try row["type"] as Int64))
        accountID = try row["account_id"]
        transactionID = try row["transaction_id"]
        originalTransactionID = try row["original_transaction_id"]
        productID = try row["product_id"]
        createdMs = try row["created_ms"]
        reason = try row["reason"]
        creditShortfall = UInt64(clamping: try row["credit_shortfall"] as Int64)
        autoRenew = try row["auto_renew"]
        price = try row["price"]
        expirationReason = StoreV1.ExpirationReason(rawValue: Int32(clamping: try row["expiration_reason"] as Int64))
    }

    /// The event as signed and sent.
    public func message(environment: ReceiptV1.Environment) -> StoreV1.Event {
        StoreV1.Event(
            eventID: id, type: type, accountID: accountID, transactionID: transactionID, originalTransactionID: originalTransactionID,
            productID: productID, createdMs: createdMs, reason: reason, creditShortfall: creditShortfall, autoRenew: autoRenew,
            price: price, expirationReason: expirationReason, environment: environment)
    }
}

extension StoreV1.EventType {
    /// The name without its prefix, as webhooks and `kiosk-store events` print it ("REFUNDED").
    public var shortName: String {
        let name = "\(self)"
        return name.hasPrefix("EVENT_TYPE_") ? String(name.dropFirst("EVENT_TYPE_".count)) : name
    }

    /// The type named `name` ("refunded", "REFUNDED" or "EVENT_TYPE_REFUNDED").
    public init?(shortName name: String) {
        let wanted = name.uppercased()
        for raw in Int32(1)...Int32(64) {
            let type = StoreV1.EventType(rawValue: raw)
            let full = "\(type)"
            guard full.hasPrefix("EVENT_TYPE_"), type != .unspecified else { continue }
            if full == wanted || type.shortName == wanted {
                self = type
                return
            }
        }
        return nil
    }
}

extension Ledger {

    /// The advisory lock a PostgreSQL write takes before it inserts an event: event ids commit in order.
    static let eventOrderLockKey: Int64 = 0x4B494F534B_45  // "KIOSKE"

    /// Records `event` in the write in progress; returns it with its id.
    @discardableResult
    static func recordEvent(_ event: EventRecord, _ db: any LedgerDatabase) throws -> EventRecord {
        if db.dialect == .postgres {
            // Held to the commit: ids are handed out and committed one writer at a time.
            try db.execute("SELECT pg_advisory_xact_lock(?)", [eventOrderLockKey])
        }
        guard let id = try db.value(
            Int64.self,
            """
                INSERT INTO events (type, account_id, transaction_id, original_transaction_id, product_id, created_ms, reason,
                  credit_shortfall, auto_renew, price, expiration_reason)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id
                """,
            [Int64(event.type.rawValue), event.accountID, event.transactionID, event.originalTransactionID, event.productID, event.createdMs,
             event.reason, Int64(clamping: event.creditShortfall), event.autoRenew, event.price, Int64(event.expirationReason.rawValue)])
        else { throw StoreError(.internalFailure, "the event log did not answer the id of its new event") }
        try announceChange(db)
        var recorded = event
        recorded.id = UInt64(id)
        return recorded
    }

    /// The highest event id (0 when there is none).
    static func latestEventID(_ db: any LedgerDatabase) throws -> UInt64 {
        UInt64(clamping: try db.value(Int64.self, "SELECT MAX(id) FROM events") ?? 0)
    }

    /// Events after `cursor`, oldest first, at most `limit`: of one account, or of all; of `types`, or of any.
    static func events(_ db: any LedgerDatabase, after cursor: UInt64, limit: Int, accountID: String? = nil,
                       types: [StoreV1.EventType] = []) throws -> [EventRecord] {
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
        return try db.fetchAll(sql, arguments).map(EventRecord.init)
    }

    /// Events after `cursor`, oldest first (see ``events(_:after:limit:accountID:types:)``).
    public func events(after cursor: UInt64, limit: Int = 500, accountID: String? = nil, types: [StoreV1.EventType] = []) async throws -> [EventRecord] {
        try await backend.read { db in try Self.events(db, after: cursor, limit: limit, accountID: accountID, types: types) }
    }

    /// The highest event id recorded so far.
    public func latestEventID() throws -> UInt64 {
        try backend.read { db in try Self.latestEventID(db) }
    }
}
