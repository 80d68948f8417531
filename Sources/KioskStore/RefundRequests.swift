import Foundation
import GRDB
import KioskAPI

/// A buyer's request for a refund, as the ledger keeps it: the domain's ``RefundRequest``, pending until an
/// operator grants it (``Store/refund(transactionID:reason:)``) or denies it (``Store/denyRefund(transactionID:reason:)``).
public typealias RefundRequestRecord = RefundRequest

extension RefundRequest {
    init(row: LedgerRow) throws {
        let stateValue = Int32(clamping: try row["state"] as Int64)
        guard let state = State(rawValue: stateValue) else { throw LedgerError(.schema, "refund request row has state \(stateValue)") }
        self.init(transactionID: try row["transaction_id"], accountID: try row["account_id"], productID: try row["product_id"],
                  reason: try row["reason"], state: state, requestedMs: try row["requested_ms"], decidedMs: try row["decided_ms"],
                  decisionReason: try row["decision_reason"])
    }

    /// The state as the wire names it.
    public var wireState: StoreV1.RefundRequestState { StoreV1.RefundRequestState(rawValue: state.rawValue) }

    /// One line of JSON, keys sorted (`kiosk-store refund-requests --json`): the wire's field names, the state by name.
    public var jsonLine: String {
        var object: [String: Any] = [
            "transaction_id": transactionID, "account_id": accountID, "product_id": productID, "reason": reason,
            "state": wireState.name, "requested_ms": requestedMs,
        ]
        if decidedMs > 0 {
            object["decided_ms"] = decidedMs
            object["decision_reason"] = decisionReason
        }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// As the wire carries it.
    public var message: StoreV1.RefundRequestStatus {
        StoreV1.RefundRequestStatus(transactionID: transactionID, accountID: accountID, productID: productID, reason: reason, state: wireState,
                                    requestedMs: requestedMs, decidedMs: decidedMs, decisionReason: decisionReason)
    }
}

/// A page of refund requests and the token of the next.
public struct RefundRequestPage: Hashable, Sendable {
    public var requests: [RefundRequestRecord]
    public var nextPageToken: String
    public var hasMore: Bool
}

extension Ledger {
    /// The longest reason a buyer or operator may give, in bytes of UTF-8.
    public static let maxRefundReasonBytes = FieldLimits.reason


    /// A buyer's or operator's reason: at most ``maxRefundReasonBytes`` of UTF-8 and no control characters
    /// (it is printed to operators; NUL is refused by PostgreSQL).
    /// - Throws: ``StoreError`` 3.
    static func checkReason(_ reason: String) throws {
        guard reason.utf8.count <= maxRefundReasonBytes else {
            throw StoreError.invalid("the reason is \(reason.utf8.count) bytes; at most \(maxRefundReasonBytes)")
        }
        guard !reason.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw StoreError.invalid("the reason holds a control character (a line break, a tab, NUL, an escape): give one line of text")
        }
    }



    /// A pending request for `transactionID` becomes `state` (granted or denied) with the operator's reason;
    /// REFUND_DENIED is recorded for a denial (a grant's event is the REFUNDED its refund records). A refund
    /// after a denial grants the request too (the money went back).
    /// - Returns: the request as it now stands, or nil when it has none to decide.
    @discardableResult
    static func decideRefundRequest(transactionID: String, _ decision: RefundRequest.State, reason: String, nowMs: Int64,
                                    _ db: any StoreRepositories) throws -> RefundRequestRecord? {
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
            try db.recordEvent(EventRecord(.refundDenied, record, nowMs: nowMs, reason: reason))
        }
        return request
    }

    /// Refund requests in one state, oldest first, a page at a time.
    /// - Throws: ``StoreError`` 3 for a page token this store did not give.
    public func refundRequests(state: RefundRequest.State = .pending, limit: UInt32 = 0, pageToken: String = "") throws -> RefundRequestPage {
        var after: (Int64, String)? = nil
        if !pageToken.isEmpty {
            let parts = pageToken.split(separator: ".", maxSplits: 1)
            guard parts.count == 2, parts[0].first == "q", let ms = Int64(parts[0].dropFirst()), ms >= 0 else {
                throw StoreError.invalid("page_token \"\(pageToken.prefix(64))\" is not one this store gave; pass the next_page_token of the page before, or empty for the first page")
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
        return RefundRequestPage(requests: kept, nextPageToken: hasMore ? kept.last.map { "q\($0.requestedMs).\($0.transactionID)" } ?? "" : "",
                                 hasMore: hasMore)
    }

    /// The refund request of `transactionID`, if one was made.
    public func refundRequest(transactionID: String) throws -> RefundRequestRecord? {
        try backend.read { db in try db.refundRequest(transactionID: transactionID) }
    }
}

extension Store {
    /// A buyer asks for a refund of one of their purchased transactions: the request is recorded, pending, with
    /// REFUND_REQUESTED, until an operator grants it (``refund(transactionID:reason:)``) or denies it
    /// (``denyRefund(transactionID:reason:)``). Asking again answers the request already made, whatever its state,
    /// and records nothing (a retry after a lost answer is safe).
    /// - Throws: ``StoreError`` NOT_FOUND for a transaction the account does not have; 9 for one that is not purchased
    ///   or already refunded (with no request); 3 for a reason over ``Ledger/maxRefundReasonBytes`` or with a control character.
    public func requestRefund(accountID: String, transactionID: String, reason: String) async throws -> RefundRequestRecord {
        guard !transactionID.isEmpty else { throw StoreError.invalid("transaction_id is required") }
        try Ledger.checkReason(reason)
        let nowMs = now
        return try await ledger.write(account: accountID) { db in
            // Another account's transaction is as unknown as one that does not exist.
            guard let record = try db.transaction(id: transactionID), record.accountID == accountID else {
                throw StoreError.notFound("no transaction \(transactionID) for this account")
            }
            if let existing = try db.refundRequest(transactionID: transactionID) { return existing }
            let request: RefundRequest
            do {
                request = try RefundRequest.asked(transactionID: transactionID, accountID: accountID, productID: record.productID,
                                                  purchased: record.state == .purchased, refunded: record.revokedMs != 0, reason: reason, atMs: nowMs)
            } catch RefundRequest.Refusal.notPurchased {
                throw StoreError(.conflict, "transaction \(transactionID) is \(record.state.description.lowercased()), not purchased: there is nothing to refund")
            } catch {
                throw StoreError(.conflict, "transaction \(transactionID) was already refunded")
            }
            try db.insertRefundRequest(request)
            try db.recordEvent(EventRecord(.refundRequested, record, nowMs: nowMs, reason: reason))
            return request
        }
    }

    /// Denies a pending refund request: it becomes DENIED with `reason`, REFUND_DENIED is recorded, the
    /// transaction stays as it was.
    /// - Throws: ``StoreError`` NOT_FOUND when the transaction has no refund request; 9 when it is not pending.
    @discardableResult
    public func denyRefund(transactionID: String, reason: String) async throws -> RefundRequestRecord {
        guard !transactionID.isEmpty, !reason.isEmpty else { throw StoreError.invalid("transaction_id and reason are required") }
        try Ledger.checkReason(reason)
        guard let request = try await ledger.offload({ [ledger] in try ledger.refundRequest(transactionID: transactionID) }) else {
            throw StoreError.notFound("transaction \(transactionID) has no refund request")
        }
        let nowMs = now
        return try await ledger.write(account: request.accountID) { db in
            if let denied = try Ledger.decideRefundRequest(transactionID: transactionID, .denied, reason: reason, nowMs: nowMs, db) { return denied }
            let current = try db.refundRequest(transactionID: transactionID)
            throw StoreError(.conflict, "the refund request of \(transactionID) is \(current.map { "\($0.state)" } ?? "gone"), not pending")
        }
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
                    """, [request.transactionID, request.accountID, request.productID, request.reason, Int64(request.state.rawValue),
                          request.requestedMs])
        } catch let error as LedgerError where error.kind == .uniqueViolation {
            throw StoreError(.conflict, "transaction \(request.transactionID) has a refund request already")
        }
    }

    /// Written only over the state it was decided from: a concurrent decision in another process wins, this one is refused.
    public func updateRefundRequest(_ request: RefundRequest, from before: RefundRequest.State) throws -> Bool {
        try execute("UPDATE refund_requests SET state = ?, decided_ms = ?, decision_reason = ? WHERE transaction_id = ? AND state = ?",
                    [Int64(request.state.rawValue), request.decidedMs, request.decisionReason, request.transactionID, Int64(before.rawValue)]) > 0
    }

    public func refundRequest(transactionID: String) throws -> RefundRequestRecord? {
        try fetchOne("SELECT * FROM refund_requests WHERE transaction_id = ?", [transactionID]).map(RefundRequestRecord.init)
    }
}
