import Foundation
import KioskAPI

extension RefundRequest {
    /// The state as the wire names it.
    public var wireState: StoreV1.RefundRequestState { StoreV1.RefundRequestState(rawValue: state.rawValue) }

    /// One line of JSON, keys sorted (`kiosk-store refund-requests --json`): the wire's field names, the state by name.
    public var jsonLine: String { JSONLine.encode(RefundRequestDocument(self)) }

    /// As the wire carries it.
    public var message: StoreV1.RefundRequestStatus {
        StoreV1.RefundRequestStatus(
            transactionID: transactionID, accountID: accountID, productID: productID, reason: reason, state: wireState,
            requestedMs: requestedMs, decidedMs: decidedMs, decisionReason: decisionReason)
    }
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
            throw StoreError.invalid(
                "the reason holds a control character (a line break, a tab, NUL, an escape): give one line of text")
        }
    }
}

extension Store {
    /// A buyer asks for a refund of one of their purchased transactions: the request is recorded, pending, with
    /// REFUND_REQUESTED, until an operator grants it (``refund(transactionID:reason:)``) or denies it
    /// (``denyRefund(transactionID:reason:)``). Asking again answers the request already made, whatever its state,
    /// and records nothing (a retry after a lost answer is safe).
    /// - Throws: ``StoreError`` NOT_FOUND for a transaction the account does not have; 9 for one that is not purchased
    ///   or already refunded (with no request); 3 for a reason over ``Ledger/maxRefundReasonBytes`` or with a control character.
    public func requestRefund(
        accountID: String, transactionID: String, reason: String
    ) async throws -> RefundRequestRecord {
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
                request = try RefundRequest.asked(
                    transactionID: transactionID, accountID: accountID, productID: record.productID,
                    purchased: record.state == .purchased, refunded: record.revokedMs != 0, reason: reason, atMs: nowMs)
            } catch RefundRequest.Refusal.notPurchased {
                throw StoreError(
                    .conflict,
                    "transaction \(transactionID) is \(record.state.description.lowercased()), not purchased: there is nothing to refund"
                )
            } catch {
                throw StoreError(.conflict, "transaction \(transactionID) was already refunded")
            }
            try db.insertRefundRequest(request)
            try db.appendEvent(EventRecord(.refundRequested, record, nowMs: nowMs, reason: reason))
            return request
        }
    }

    /// Denies a pending refund request: it becomes DENIED with `reason`, REFUND_DENIED is recorded, the
    /// transaction stays as it was.
    /// - Throws: ``StoreError`` NOT_FOUND when the transaction has no refund request; 9 when it is not pending.
    @discardableResult
    public func denyRefund(transactionID: String, reason: String) async throws -> RefundRequestRecord {
        guard !transactionID.isEmpty, !reason.isEmpty else {
            throw StoreError.invalid("transaction_id and reason are required")
        }
        try Ledger.checkReason(reason)
        let ledger = self.ledger
        guard let request = try await ledger.offload({ try ledger.refundRequest(transactionID: transactionID) }) else {
            throw StoreError.notFound("transaction \(transactionID) has no refund request")
        }
        let nowMs = now
        return try await ledger.write(account: request.accountID) { db in
            if let denied = try Ledger.decideRefundRequest(
                transactionID: transactionID, .denied, reason: reason, nowMs: nowMs, db)
            {
                return denied
            }
            let current = try db.refundRequest(transactionID: transactionID)
            throw StoreError(
                .conflict,
                "the refund request of \(transactionID) is \(current.map { "\($0.state)" } ?? "gone"), not pending")
        }
    }
}

/// A refund request as `kiosk-store refund-requests --json` prints it; the decision's fields only once decided.
struct RefundRequestDocument: Encodable {
    var transactionID: String, accountID: String, productID: String, reason: String, state: String, requestedMs: Int64
    var decidedMs: Int64?, decisionReason: String?

    enum CodingKeys: String, CodingKey {
        case transactionID = "transaction_id", accountID = "account_id", productID = "product_id", reason, state
        case requestedMs = "requested_ms", decidedMs = "decided_ms", decisionReason = "decision_reason"
    }

    init(_ request: RefundRequest) {
        transactionID = request.transactionID
        accountID = request.accountID
        productID = request.productID
        reason = request.reason
        state = request.wireState.name
        requestedMs = request.requestedMs
        decidedMs = request.decidedMs > 0 ? request.decidedMs : nil
        decisionReason = request.decidedMs > 0 ? request.decisionReason : nil
    }
}
