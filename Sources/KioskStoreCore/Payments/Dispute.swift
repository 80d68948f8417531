/// A dispute (chargeback) of a payment, as the processor reported it (Stripe's `du_…`) and as far as the store
/// followed it. Kept by the dispute's id, so its events act right in any order: the opening revokes, the closing
/// won restores what this dispute revoked (and nothing else), a closing lost that came first revokes.
public struct Dispute: Hashable, Sendable {
    /// Where the dispute stands.
    public enum State: String, Hashable, Sendable {
        /// Opened; the money is held by the bank.
        case open
        /// Closed in the merchant's favour: the money stays.
        case won
        /// Closed in the buyer's favour: the money went back.
        case lost
    }

    /// The processor's id of the dispute.
    public var id: String
    /// The Kiosk transaction whose payment is disputed.
    public var transactionID: String
    /// Where it stands.
    public var state: State
    /// True when this dispute revoked the transaction (so winning it restores the transaction). False when the
    /// transaction was revoked before it (a refund) or not at all.
    public var revokedTransaction: Bool
    /// When the store last changed it, milliseconds since 1970.
    public var updatedMs: Int64

    public init(id: String, transactionID: String, state: State, revokedTransaction: Bool, updatedMs: Int64) {
        self.id = id
        self.transactionID = transactionID
        self.state = state
        self.revokedTransaction = revokedTransaction
        self.updatedMs = updatedMs
    }
}
