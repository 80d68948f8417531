// A buyer's request for a refund, decided in one place.
//
// States (``RefundRequest/State``):
//
//   (none) ──asked──► PENDING          (only for a PURCHASED transaction not yet refunded; asking again
//                                       answers the request already made, whatever its state)
//   PENDING ──granted──► GRANTED       (the operator refunds the transaction)
//   PENDING ──denied───► DENIED
//   DENIED  ──granted──► GRANTED       (an operator may still refund a transaction whose request was denied)
//   GRANTED ──any──► refused; DENIED ──denied──► refused

/// A buyer's request for a refund of one of their transactions.
public struct RefundRequest: Hashable, Sendable {
    /// Where the request stands.
    public enum State: Int32, Hashable, Sendable, CustomStringConvertible {
        /// Waiting for an operator.
        case pending = 1
        /// The transaction was refunded.
        case granted = 2
        /// An operator said no.
        case denied = 3

        public var description: String {
            switch self {
            case .pending: "pending"
            case .granted: "granted"
            case .denied: "denied"
            }
        }
    }

    /// Why a refund request event was refused.
    public enum Refusal: Error, Hashable, Sendable {
        /// The transaction is not a purchase (failed or waiting for approval): nothing to refund.
        case notPurchased
        /// The transaction was refunded already.
        case alreadyRefunded
        /// The request was decided already (a deny of a request that is not pending).
        case decided(State)
    }

    /// The transaction whose refund is asked for.
    public var transactionID: String
    /// The buyer.
    public var accountID: String
    /// The product of the transaction.
    public var productID: String
    /// The buyer's words.
    public var reason: String
    /// Where it stands.
    public var state: State
    /// When it was asked, milliseconds since 1970.
    public var requestedMs: Int64
    /// When it was granted or denied (0 while pending).
    public var decidedMs: Int64
    /// The operator's reason (the refund's reason when granted).
    public var decisionReason: String

    /// A request as the ledger keeps it.
    public init(
        transactionID: String, accountID: String, productID: String, reason: String, state: State, requestedMs: Int64,
        decidedMs: Int64 = 0, decisionReason: String = ""
    ) {
        self.transactionID = transactionID
        self.accountID = accountID
        self.productID = productID
        self.reason = reason
        self.state = state
        self.requestedMs = requestedMs
        self.decidedMs = decidedMs
        self.decisionReason = decisionReason
    }

    /// The buyer asks for a refund of a transaction that is `purchased` and `refunded` or not: a PENDING request.
    public static func asked(
        transactionID: String, accountID: String, productID: String, purchased: Bool, refunded: Bool,
        reason: String, atMs nowMs: Int64
    ) throws(Refusal) -> RefundRequest {
        guard purchased else { throw .notPurchased }
        guard !refunded else { throw .alreadyRefunded }
        return RefundRequest(
            transactionID: transactionID, accountID: accountID, productID: productID, reason: reason, state: .pending,
            requestedMs: nowMs)
    }

    /// The transaction was refunded: a pending or denied request is GRANTED with the refund's reason.
    /// - Returns: false when it was granted already (nothing to write).
    public mutating func granted(reason: String, atMs nowMs: Int64) -> Bool {
        guard state != .granted else { return false }
        state = .granted
        decidedMs = nowMs
        decisionReason = reason
        return true
    }

    /// An operator denies the request: PENDING → DENIED.
    public mutating func denied(reason: String, atMs nowMs: Int64) throws(Refusal) {
        guard state == .pending else { throw .decided(state) }
        state = .denied
        decidedMs = nowMs
        decisionReason = reason
    }
}
