import Foundation
import KioskStoreCore

/// A buyer's request for a refund, as the ledger keeps it: the domain's ``RefundRequest``, pending until an
/// operator grants it or denies it.
public typealias RefundRequestRecord = RefundRequest

extension RefundRequest {
    package init(row: LedgerRow) throws {
        let stateValue = Int32(clamping: try row["state"] as Int64)
        guard let state = State(rawValue: stateValue) else {
            throw LedgerError(.schema, "refund request row has state \(stateValue)")
        }
        self.init(
            transactionID: try row["transaction_id"], accountID: try row["account_id"],
            productID: try row["product_id"],
            reason: try row["reason"], state: state, requestedMs: try row["requested_ms"],
            decidedMs: try row["decided_ms"],
            decisionReason: try row["decision_reason"])
    }
}

/// A page of refund requests and the token of the next.
public struct RefundRequestPage: Hashable, Sendable {
    public var requests: [RefundRequestRecord]
    public var nextPageToken: String
    public var hasMore: Bool
}

extension Ledger {
    /// A pending request for `transactionID` becomes `state` (granted or denied) with the operator's reason;
    /// REFUND_DENIED is recorded for a denial (a grant's event is the REFUNDED its refund records). A refund
    /// after a denial grants the request too (the money went back).
    /// - Returns: the request as it now stands, or nil when it has none to decide.
    @discardableResult
    package static func decideRefundRequest(
        transactionID: String, _ decision: RefundRequest.State, reason: String, nowMs: Int64,
        _ db: any StoreRepositories
    ) throws -> RefundRequestRecord? {
        guard var request = try db.refundRequest(transactionID: transactionID) else { return nil }
        let before = request.state
        switch decision {
        case .granted:
            guard request.granted(reason: reason, atMs: nowMs) else { return nil }
        case .denied:
            do { try request.denied(reason: reason, atMs: nowMs) } catch { return nil }
        case .pending:
            return nil
        }
        // Written only over the state it was decided from: a concurrent decision in another process wins, this one is refused.
        guard try db.updateRefundRequest(request, from: before) else { return nil }
        if decision == .denied, let record = try db.transaction(id: transactionID) {
            try db.appendEvent(EventRecord(.refundDenied, record, nowMs: nowMs, reason: reason))
        }
        return request
    }

    /// Refund requests in one state, oldest first, a page at a time.
    /// - Throws: ``StoreError`` 3 for a page token this store did not give.
    public func refundRequests(
        state: RefundRequest.State = .pending, limit: UInt32 = 0, pageToken: String = ""
    ) throws -> RefundRequestPage {
        var after: (Int64, String)? = nil
        if !pageToken.isEmpty {
            let parts = pageToken.split(separator: ".", maxSplits: 1)
            guard parts.count == 2, parts[0].first == "q", let ms = Int64(parts[0].dropFirst()), ms >= 0 else {
                throw StoreError.invalid(
                    "page_token \"\(pageToken.prefix(64))\" is not one this store gave; pass the next_page_token of the page before, or empty for the first page"
                )
            }
            after = (ms, String(parts[1]))
        }
        let size = Self.pageSize(limit)
        let rows = try backend.read { db -> [RefundRequestRecord] in
            var sql = "SELECT * FROM refund_requests WHERE state = ?"
            var arguments: [any LedgerArgument] = [Int64(state.rawValue)]
            if let after {
                sql += " AND (requested_ms > ? OR (requested_ms = ? AND transaction_id > ?))"
                arguments += [after.0, after.0, after.1]
            }
            sql += " ORDER BY requested_ms, transaction_id LIMIT ?"
            arguments.append(size + 1)
            return try db.fetchAll(sql, arguments).map(RefundRequestRecord.init)
        }
        let kept = Array(rows.prefix(size))
        let hasMore = rows.count > size
        return RefundRequestPage(
            requests: kept,
            nextPageToken: hasMore ? kept.last.map { "q\($0.requestedMs).\($0.transactionID)" } ?? "" : "",
            hasMore: hasMore)
    }

    /// The refund request of `transactionID`, if one was made.
    public func refundRequest(transactionID: String) throws -> RefundRequestRecord? {
        try backend.read { db in try db.refundRequest(transactionID: transactionID) }
    }
}

// The ledger adapter: the domain's repository ports on SQL (SQLite and PostgreSQL alike).
extension LedgerDatabase {
    public func insertRefundRequest(_ request: RefundRequest) throws {
        do {
            try execute(
                """
                INSERT INTO refund_requests (transaction_id, account_id, product_id, reason, state, requested_ms)
                VALUES (?, ?, ?, ?, ?, ?)
                """,
                [
                    request.transactionID, request.accountID, request.productID, request.reason,
                    Int64(request.state.rawValue),
                    request.requestedMs,
                ])
        } catch let error as LedgerError where error.kind == .uniqueViolation {
            throw StoreError(.conflict, "transaction \(request.transactionID) has a refund request already")
        }
    }

    /// Written only over the state it was decided from: a concurrent decision in another process wins, this one is refused.
    public func updateRefundRequest(_ request: RefundRequest, from before: RefundRequest.State) throws -> Bool {
        try execute(
            "UPDATE refund_requests SET state = ?, decided_ms = ?, decision_reason = ? WHERE transaction_id = ? AND state = ?",
            [
                Int64(request.state.rawValue), request.decidedMs, request.decisionReason, request.transactionID,
                Int64(before.rawValue),
            ]) > 0
    }

    public func refundRequest(transactionID: String) throws -> RefundRequestRecord? {
        try fetchOne("SELECT * FROM refund_requests WHERE transaction_id = ?", [transactionID]).map(
            RefundRequestRecord.init)
    }
}
