// The payment processor port: what the store asks of Stripe, the simulated processor or any other.

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
    /// True for the charge of an approved ask-to-buy request (``PaymentProcessor/approve(_:)``).
    public var isApproval: Bool
    /// True for a subscription renewal the store charges at the end of a period, without the buyer present
    /// (a merchant-initiated charge of the stored payment method).
    public var isRenewal: Bool
    /// The account's customer at the processor (``PaymentProcessor/createCustomer(accountID:generation:)``), set for a
    /// subscription's payments when the processor ``PaymentProcessor/keepsCustomers``: a renewal charges the
    /// customer's saved ``paymentMethod`` without the buyer (off-session); nil otherwise.
    public var customer: String?
    /// True for a subscription's first payment (a purchase, an approval, an upgrade) with a ``customer``: the
    /// processor saves the method to the customer for the renewals, and answers the saved method's id in
    /// ``PaymentOutcome/succeeded(reference:savedMethod:)``.
    public var savesMethod: Bool

    /// Creates a request.
    public init(
        paymentID: String, accountID: String, productID: String, quantity: UInt32, unitPrice: String, currency: String,
        paymentMethod: String,
        isApproval: Bool = false, isRenewal: Bool = false, customer: String? = nil, savesMethod: Bool = false
    ) {
        self.isApproval = isApproval
        self.isRenewal = isRenewal
        self.customer = customer
        self.savesMethod = savesMethod
        self.paymentID = paymentID
        self.accountID = accountID
        self.productID = productID
        self.quantity = quantity
        self.unitPrice = unitPrice
        self.currency = currency
        self.paymentMethod = paymentMethod
    }

    /// The total, `unitPrice × quantity`, or nil when the price is not a decimal with at most the
    /// currency's ISO 4217 decimals (or the total overflows).
    public var amount: Money? {
        Money(decimal: unitPrice, currency: currency)?.times(quantity)
    }

    /// The total in the currency's minor unit (cents, yen, fils), or nil as for ``amount``.
    public var amountMinorUnits: Int64? { amount?.minorUnits }
}

/// What a payment processor answered.
public enum PaymentOutcome: Hashable, Sendable {
    /// Charged; `reference` is the processor's id for the charge. `savedMethod`: for a request that
    /// ``PaymentRequest/savesMethod``, the id of the method now saved to the customer (a processor may give a
    /// one-time method a new id when it saves it); renewals charge it.
    case succeeded(reference: String, savedMethod: String? = nil)
    /// Refused; `reason` is machine-readable (`card_declined`, `insufficient_funds`, …).
    case declined(reason: String, message: String)
    /// The buyer cancelled.
    case cancelled
    /// Waiting for someone's approval (ask to buy); charge on ``PaymentProcessor/approve(_:)``.
    case deferred
    /// A renewal the card issuer wants the buyer to authenticate (SCA): nothing is charged yet. `reference` is the
    /// processor's payment (a Stripe PaymentIntent) that the buyer confirms in the app with `clientSecret`; the
    /// store asks ``PaymentProcessor/resolveAction(reference:cancelling:)`` what became of it. Answered for
    /// renewals only (a purchase's buyer is there: the processor declines with `authentication_required`).
    case needsAction(reference: String, clientSecret: String)
}

extension PaymentOutcome {
    /// The decline reason of a processor that no longer has the customer the store kept for the account (deleted,
    /// or another processor account's): the store forgets it, and makes a new one when it next needs one.
    public static let customerMissingReason = "customer_missing"
}

/// What a processor knows of a payment id, asked when the store reconciles a
/// payment whose outcome it never recorded (it crashed, or the processor did
/// not answer).
public enum PaymentLookup: Hashable, Sendable {
    /// The payment was charged; record it. `savedMethod` as in ``PaymentOutcome/succeeded(reference:savedMethod:)``.
    case charged(reference: String, savedMethod: String? = nil)
    /// The processor deferred it (ask to buy): record it as DEFERRED, charged when approved.
    case deferred
    /// Nothing was charged, and nothing will be for this id (a pending attempt
    /// was cancelled by the lookup if the processor had one).
    case notCharged

    /// The saved method a ``charged(reference:savedMethod:)`` lookup answered.
    public var savedMethod: String? {
        if case .charged(_, let savedMethod) = self { return savedMethod }
        return nil
    }
}

/// The processor could not say what happened (network error, 5xx, timeout):
/// the payment may or may not have been charged. The store keeps the
/// payment's intent open and reconciles it later with ``PaymentProcessor/lookup(_:)``.
public struct PaymentProcessorError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong.
    public var message: String
    /// Creates the error.
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Takes payments. The store ships ``SimulatedPaymentProcessor`` (sandbox) and
/// ``StripePaymentProcessor``; others plug in by conforming to this protocol.
///
/// Implementations must deduplicate on ``PaymentRequest/paymentID``: the store
/// asks again for the same payment when a client retries a purchase whose
/// outcome it never recorded. Throw ``PaymentProcessorError`` when the outcome
/// is unknown; never answer `declined` for a charge that may have gone through.
public protocol PaymentProcessor: Sendable {
    /// A short name for logs and errors: `simulated`, `stripe`, ….
    var name: String { get }
    /// True for processors that take no real money at all; production refuses them.
    var isSimulated: Bool { get }
    /// True when the processor is in its test mode (a Stripe `sk_test_` key): no real money moves, and a
    /// production store refuses it; a sandbox store refuses a processor that is not in test mode.
    var isTestMode: Bool { get }
    /// How long ``lookup(_:)`` may lag behind a charge (Stripe's search index: up to a minute); pending
    /// payments are not looked up before they are this old.
    var lookupDelay: Duration { get }
    /// Charges (or refuses, or defers) a payment.
    func charge(_ request: PaymentRequest) async throws -> PaymentOutcome
    /// Charges a deferred payment once it was approved.
    func approve(_ request: PaymentRequest) async throws -> PaymentOutcome
    /// Whether the payment with `request.paymentID` was charged. Must not charge.
    func lookup(_ request: PaymentRequest) async throws -> PaymentLookup
    /// Gives back a charged payment's money; asking twice refunds once.
    func refund(_ request: PaymentRequest, reason: String) async throws
    /// Why this processor could never charge `price` (one unit at a catalog price), or nil when it can: asked for
    /// every catalog price and offer before the store serves, so such a price is refused then, not at each purchase.
    func refusal(toCharge price: Money) -> String?

    /// True for a processor that charges renewals to a customer's saved method (Stripe): the store keeps one
    /// customer per account (``createCustomer(accountID:generation:)``, its id in the ledger), a subscription's first payment
    /// saves its method to it (``PaymentRequest/savesMethod``), and renewals charge that customer's saved method
    /// off-session. A subscription with no saved method is never sent for renewal. False (the default): renewals
    /// charge the subscription's last payment method as it is.
    var keepsCustomers: Bool { get }
    /// Creates the account's customer and answers its id; asked again for the same account and `generation`,
    /// answers the same customer (idempotent, so two store processes racing make one). `generation` is empty the
    /// first time; after the store forgot a customer the processor no longer has, it names that change, so a new
    /// customer is made. Only asked when ``keepsCustomers``.
    func createCustomer(accountID: String, generation: String) async throws -> String
    /// Saves `method` for charges without the buyer (renewals, billing retries): to `customer` when the processor
    /// ``keepsCustomers``. Answers the saved method's id, or why it was refused. Must not charge. The default
    /// takes any method as it is.
    func saveMethod(_ method: String, customer: String?, accountID: String) async throws -> MethodSaving
    /// What became of a payment that needed the buyer: charged, still waiting, or ended. With `cancelling`, one
    /// still waiting is cancelled first (so it can never be charged) and answered `ended`, unless it was charged
    /// meanwhile. Must not charge. Only asked of a processor that answered
    /// ``PaymentOutcome/needsAction(reference:clientSecret:)``.
    func resolveAction(reference: String, cancelling: Bool) async throws -> ActionResolution
}

/// What became of a payment that needed the buyer (``PaymentOutcome/needsAction(reference:clientSecret:)``).
public enum ActionResolution: Hashable, Sendable {
    /// The buyer confirmed it and it was charged; `reference` as in ``PaymentOutcome/succeeded(reference:savedMethod:)``.
    case charged(reference: String)
    /// Still waiting for the buyer.
    case waiting
    /// It can no longer be charged (cancelled, or failed for good).
    case ended
}

/// What a processor answered when asked to save a payment method for renewals.
public enum MethodSaving: Hashable, Sendable {
    /// Saved; renewals charge `method` (the processor's id for it).
    case saved(method: String)
    /// Refused; `reason` is machine-readable (`card_declined`, `invalid_payment_method`,
    /// `authentication_required`, …).
    case declined(reason: String, message: String)
}

extension PaymentProcessor {
    public var isTestMode: Bool { isSimulated }
    public var lookupDelay: Duration { .zero }
    public func refusal(toCharge price: Money) -> String? { nil }
    public var keepsCustomers: Bool { false }
    public func createCustomer(accountID: String, generation: String) async throws -> String {
        throw PaymentProcessorError("\(name) keeps no customers")
    }
    public func saveMethod(_ method: String, customer: String?, accountID: String) async throws -> MethodSaving {
        .saved(method: method)
    }
    public func resolveAction(reference: String, cancelling: Bool) async throws -> ActionResolution {
        throw PaymentProcessorError("\(name) never asks the buyer to confirm a payment")
    }
}
