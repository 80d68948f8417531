/// A request the store refuses as an error (not a transaction outcome), in
/// the store's own terms; the store's RPC services map each kind to a call status.
public struct StoreError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of refusal.
    public enum Kind: String, Hashable, Sendable {
        /// The request is malformed: a missing field, a quantity out of range, a bad page token.
        case invalidRequest = "invalid request"
        /// No valid bearer token.
        case unauthenticated
        /// No such transaction, account or product.
        case notFound = "not found"
        /// The idempotency key was used for a different request.
        case keyReused = "idempotency key reused"
        /// The ledger's state does not allow it: insufficient credits, not waiting for
        /// approval, already refunded or owned, the wrong environment or processor.
        case conflict
        /// Another payment for the same owned-once product is in flight: try again.
        case inProgress = "in progress"
        /// The payment processor did not answer; the payment is pending.
        case processorUnavailable = "processor unavailable"
        /// The store failed (its ledger or data dir).
        case internalFailure = "internal failure"
        /// Too many attempts of something guessable (offer codes): refused without looking; try again later.
        case rateLimited = "rate limited"
    }

    /// What kind of refusal.
    public var kind: Kind
    /// A readable reason.
    public var message: String

    /// Creates an error.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { "\(kind.rawValue): \(message)" }

    public static func unauthenticated(_ message: String) -> StoreError { StoreError(.unauthenticated, message) }
    public static func invalid(_ message: String) -> StoreError { StoreError(.invalidRequest, message) }
    public static func notFound(_ message: String) -> StoreError { StoreError(.notFound, message) }
}
