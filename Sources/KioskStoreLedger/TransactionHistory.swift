import KioskAPI
import KioskStoreCore

/// Filters of ``Ledger/listTransactions(accountID:filter:limit:pageToken:revision:)``.
public struct TransactionFilter: Sendable, Equatable {
    /// Only these products (empty: any).
    public var productIDs: [String] = []
    /// Only these product types (empty: any).
    public var productTypes: [ProductKind] = []
    /// Only this state (nil: any).
    public var state: TransactionState?
    /// Only revoked (true), only not revoked (false), or either (nil).
    public var revoked: Bool?

    public init(
        productIDs: [String] = [], productTypes: [ProductKind] = [], state: TransactionState? = nil,
        revoked: Bool? = nil
    ) {
        self.productIDs = productIDs
        self.productTypes = productTypes
        self.state = state
        self.revoked = revoked
    }
}

/// A page of ``Ledger/listTransactions(accountID:filter:limit:pageToken:revision:)``.
public struct TransactionListing: Sendable {
    public var transactions: [TransactionRecord]
    /// Where the next page starts; empty at the end.
    public var nextPageToken: String
    public var hasMore: Bool
    /// Everything recorded up to this revision is in this listing's pages.
    public var revision: String
}

extension Ledger {
    /// An account's transactions matching `filter`, in the order the ledger recorded them, a page at a time.
    ///
    /// The first page (empty `pageToken`) reads the event log's latest id in the same snapshot and
    /// answers it as the listing's revision; the page tokens carry it, so every page of one listing
    /// answers the same one. With a `revision` from an earlier listing, only the transactions with an
    /// event after it (bought, renewed, deferred, approved, declined, refunded, …) up to this listing's
    /// revision are listed. Pages follow the ledger's insertion order, which purchases only append to:
    /// paging while purchases continue neither skips nor repeats a row (new ones may appear at the end,
    /// and again in the next revision's listing — match them by transaction id).
    /// - Throws: ``StoreError`` 3 for a page token or revision this store did not give.
    public func listTransactions(
        accountID: String, filter: TransactionFilter, limit requested: UInt32, pageToken: String,
        revision: String
    ) async throws -> TransactionListing {
        let limit = Self.pageSize(requested)
        let since = try Self.revision(revision)
        var after: Int64 = 0
        var upTo: UInt64?
        if !pageToken.isEmpty {
            let parts = pageToken.split(separator: ".", omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0].hasPrefix("l"), let position = Int64(parts[0].dropFirst()), position > 0,
                let through = UInt64(parts[1])
            else {
                throw StoreError.invalid(
                    "page_token \"\(pageToken.prefix(64))\" is not one this store gave; pass the next_page_token of the page before, or empty for the first page"
                )
            }
            after = position
            upTo = through
        }
        let (start, end) = (after, upTo)
        let rows = try await backend.read { db -> (rows: [LedgerRow], through: UInt64) in
            let through = try end ?? db.latestEventID()
            let order = db.dialect.insertionOrder
            var sql =
                "SELECT \(order) AS row_position, \(TransactionRecord.pageColumns) FROM transactions WHERE account_id = ? AND \(order) > ?"
            var arguments: [any LedgerArgument] = [accountID, start]
            if !filter.productIDs.isEmpty {
                sql += " AND product_id IN (\(Self.marks(filter.productIDs.count)))"
                arguments += filter.productIDs.map { $0 as any LedgerArgument }
            }
            if !filter.productTypes.isEmpty {
                sql += " AND product_type IN (\(Self.marks(filter.productTypes.count)))"
                arguments += filter.productTypes.map { Int64($0.rawValue) as any LedgerArgument }
            }
            if let state = filter.state {
                sql += " AND state = ?"
                arguments.append(Int64(state.rawValue))
            }
            if let revoked = filter.revoked {
                sql += revoked ? " AND revoked_ms != 0" : " AND revoked_ms = 0"
            }
            if let since {
                sql += " AND id IN (SELECT transaction_id FROM events WHERE account_id = ? AND id > ? AND id <= ?)"
                arguments += [accountID, Int64(clamping: since), Int64(clamping: through)]
            }
            sql += " ORDER BY \(order) LIMIT ?"
            arguments.append(Int64(limit + 1))
            return (try db.fetchAll(sql, arguments), through)
        }
        let hasMore = rows.rows.count > limit
        let kept = rows.rows.prefix(limit)
        let last: Int64? = try kept.last?["row_position"]
        return TransactionListing(
            transactions: try kept.map(TransactionRecord.init),
            nextPageToken: hasMore ? last.map { "l\($0).\(rows.through)" } ?? "" : "",
            hasMore: hasMore, revision: "v\(rows.through)")
    }

    /// Reads a revision (empty: none).
    package static func revision(_ text: String) throws -> UInt64? {
        guard !text.isEmpty else { return nil }
        guard text.hasPrefix("v"), let value = UInt64(text.dropFirst()) else {
            throw StoreError.invalid(
                "revision \"\(text.prefix(64))\" is not one this store gave; pass the revision of an earlier listing, or empty"
            )
        }
        return value
    }

    package static func marks(_ count: Int) -> String {
        Array(repeating: "?", count: count).joined(separator: ", ")
    }
}
