/// A charge the store asks a payment processor to make.
public struct PaymentRequest: Hashable, Sendable {
    /// A stable id for this payment: the same purchase retried (same account and
    /// idempotency key) gets the same id, so a processor that deduplicates on it
    /// never charges twice.
    public var paymentID: String
    /// The account paying.
    public var accountID: String
    /// The product bought.
    public var productID: String
    /// Units bought.
    public var quantity: UInt32
    /// The price of one unit, as a decimal string.
    public var unitPrice: String
    /// ISO 4217 currency code.
    public var currency: String
    /// The payment method the buyer chose, e.g. `test-card:4242424242424242`.
    public var paymentMethod: String
}

/// What a payment processor answered.
public enum PaymentOutcome: Hashable, Sendable {
    /// Charged; `reference` is the processor's id for the charge.
    case succeeded(reference: String)
    /// Refused; `reason` is machine-readable (`card_declined`, `insufficient_funds`, …).
    case declined(reason: String, message: String)
    /// The buyer cancelled.
    case cancelled
    /// Waiting for someone's approval (ask to buy); charge on ``PaymentProcessor/approve(_:)``.
    case deferred
}

/// Takes payments. The store ships ``SimulatedPaymentProcessor``; a real
/// processor plugs in by conforming to this protocol.
///
/// Implementations must deduplicate on ``PaymentRequest/paymentID``: the store
/// may ask again for the same payment after a crash between charging and
/// recording the charge.
public protocol PaymentProcessor: Sendable {
    /// Charges (or refuses, or defers) a payment.
    func charge(_ request: PaymentRequest) async -> PaymentOutcome
    /// Charges a deferred payment once it was approved.
    func approve(_ request: PaymentRequest) async -> PaymentOutcome
}

/// A payment processor for development and tests, driven by the payment method:
///
/// | payment method | outcome |
/// |---|---|
/// | `test-card:4242424242424242` (and any other number) | charged |
/// | `test-card:4000000000000002` | declined: `card_declined` |
/// | `test-card:4000000000009995` | declined: `insufficient_funds` |
/// | `test-cancel` | cancelled by the user |
/// | `test-ask` | deferred until approved (ask to buy) |
/// | anything else | declined: `invalid_payment_method` |
public struct SimulatedPaymentProcessor: PaymentProcessor {
    /// Creates the simulated processor.
    public init() {}

    public func charge(_ request: PaymentRequest) async -> PaymentOutcome {
        let method = request.paymentMethod
        switch method {
        case "test-cancel":
            return .cancelled
        case "test-ask":
            return .deferred
        case "test-card:4000000000000002":
            return .declined(reason: "card_declined", message: "the card was declined")
        case "test-card:4000000000009995":
            return .declined(reason: "insufficient_funds", message: "the card has insufficient funds")
        default:
            let prefix = "test-card:"
            guard method.hasPrefix(prefix), method.count > prefix.count + 11,
                  method.dropFirst(prefix.count).allSatisfy({ $0.isASCII && $0.isNumber }) else {
                return .declined(reason: "invalid_payment_method", message: "unknown payment method \"\(method)\"; use test-card:<number>, test-cancel or test-ask")
            }
            return .succeeded(reference: "sim_" + request.paymentID)
        }
    }

    public func approve(_ request: PaymentRequest) async -> PaymentOutcome {
        .succeeded(reference: "sim_" + request.paymentID)
    }
}
