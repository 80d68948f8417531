import Foundation
import KioskAPI

/// A refund the buyer asked for (``KioskClient/requestRefund(transactionID:reason:)``): pending until the
/// store's operator grants it — the transaction is then refunded and comes back on
/// ``KioskClient/transactionUpdates`` with its revocation date — or denies it.
public struct RefundRequest: Hashable, Sendable {
    /// Where a refund request stands.
    public enum State: String, Hashable, Sendable {
        /// `pending`: waiting for the operator; `granted`: the transaction was refunded; `denied`: refused.
        case pending, granted, denied
        /// A state this SDK does not know (a newer store).
        case unknown
    }

    /// The transaction to be refunded.
    public var transactionID: String
    /// The product of the transaction to be refunded.
    public var productID: String
    /// The buyer's words.
    public var reason: String
    /// Where the request stands: pending until the operator grants or denies it.
    public var state: State
    /// When it was asked.
    public var requestDate: Date
    /// When the operator granted or denied it.
    public var decisionDate: Date?
    /// The operator's reason.
    public var decisionReason: String?

    init(_ message: StoreV1.RefundRequestStatus) {
        transactionID = message.transactionID
        productID = message.productID
        reason = message.reason
        state =
            switch message.state {
            case .pending: .pending
            case .granted: .granted
            case .denied: .denied
            default: .unknown
            }
        requestDate = Date(milliseconds: message.requestedMs)
        decisionDate = message.decidedMs > 0 ? Date(milliseconds: message.decidedMs) : nil
        decisionReason = message.decidedMs > 0 ? message.decisionReason : nil
    }
}

extension KioskClient {
    /// Asks the store for a refund of one of the account's purchased transactions, as StoreKit's
    /// `beginRefundRequest` does: the answer is the request, pending until the operator decides. Asking
    /// again for the same transaction answers the request already made (whatever its state), so a retry is safe.
    /// - Parameters:
    ///   - transactionID: the purchased transaction to refund, one of the account's.
    ///   - reason: the buyer's words (at most 1,000 bytes of UTF-8).
    /// - Throws: ``KioskError``: not found for a transaction the account does not have; a conflict for one
    ///   that is not purchased or already refunded.
    public func requestRefund(transactionID: String, reason: String) async throws -> RefundRequest {
        RefundRequest(
            try await storeCall(
                "RequestRefund", StoreV1.RequestRefundRequest(transactionID: transactionID, reason: reason),
                StoreV1.RefundRequestStatus.self, doing: "requesting a refund of \(transactionID)"))
    }
}
