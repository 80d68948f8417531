/// What the ledger keeps of a payment before and after the processor is asked.

/// A payment the store is about to ask the processor for, written to the
/// ledger before the processor is asked (intent before charge), and completed
/// or closed in the same write that records the outcome.
///
/// An intent left `pending` by a crash, or by a processor that did not answer,
/// is settled by the store's reconciliation: the processor is asked whether
/// the payment was charged (``PaymentProcessor/lookup(_:)``); charged → the
/// transaction is recorded and delivered as unfinished; not charged → closed.
public struct PaymentIntent: Hashable, Sendable {
    /// What the payment is for (the domain's ``PaymentKind``).
    public typealias Kind = PaymentKind

    /// Where the intent stands.
    public enum State: String, Sendable, CaseIterable {
        /// Written; the processor may be being asked, or the outcome was never recorded.
        case pending
        /// Charged (or deferred) and recorded.
        case completed
        /// Nothing was charged (declined, cancelled, or found uncharged by reconciliation).
        case closed
    }

    /// `kind:paymentID`.
    public var id: String { "\(kind.rawValue):\(paymentID)" }
    /// What it is for.
    public var kind: Kind
    /// The payment id the processor deduplicates on.
    public var paymentID: String
    /// The transaction it records (a purchase's new id, or the deferred transaction approved).
    public var transactionID: String
    /// The paying account.
    public var accountID: String
    /// The product, and what the catalog said of it when the intent was written.
    public var productID: String
    /// The product's kind.
    public var productType: ProductKind
    /// Credits per unit for a consumable.
    public var creditsPerUnit: UInt64
    /// A subscription's period (`P1M`), empty for other products.
    public var subscriptionPeriod: String
    /// Units bought.
    public var quantity: UInt32
    /// Unit price, decimal string.
    public var unitPrice: String
    /// ISO 4217 currency.
    public var currency: String
    /// The buyer's payment method.
    public var paymentMethod: String
    /// Purchase time, milliseconds since 1970: the transaction's purchase date.
    public var purchaseMs: Int64
    /// The subscription offer the price is under (`introductory` or a promotional offer's id); empty: none.
    public var offerID: String = ""
    /// The storefront the price is in (the account's when the intent was written); empty: before storefronts.
    public var storefront: String = ""
    /// The client's idempotency key, if any.
    public var idempotencyKey: String?
    /// The purchase request's hash, to answer the key later.
    public var requestHash: [UInt8]
    /// Where it stands.
    public var state: State
    /// Why it was closed or how it completed (`charged`, `declined:card_declined`, `reconciled:not_charged`, …).
    public var outcome: String
    /// The store instance that wrote it (the ledger adapter's instance lock).
    public var owner: String
    /// When it was first written (the processor's idempotency key lifetime counts from here).
    public var createdMs: Int64
    /// When it was last attempted (written or reopened by a retry): reconciliation waits from here.
    public var attemptMs: Int64

    /// True for products an account owns at most once: one pending intent per account and product.
    public var exclusive: Bool { productType.isExclusive }

    /// The processor's request for this payment.
    public var request: PaymentRequest {
        PaymentRequest(
            paymentID: paymentID, accountID: accountID, productID: productID, quantity: quantity,
            unitPrice: unitPrice, currency: currency, paymentMethod: paymentMethod, isApproval: kind == .approval,
            isRenewal: kind == .renewal)
    }

    /// An intent as the ledger holds it.
    public init(
        kind: Kind, paymentID: String, transactionID: String, accountID: String, productID: String,
        productType: ProductKind,
        creditsPerUnit: UInt64, subscriptionPeriod: String, quantity: UInt32, unitPrice: String, currency: String,
        paymentMethod: String,
        purchaseMs: Int64, offerID: String = "", idempotencyKey: String?, requestHash: [UInt8], state: State = .pending,
        outcome: String = "",
        owner: String, createdMs: Int64, attemptMs: Int64
    ) {
        self.kind = kind
        self.paymentID = paymentID
        self.transactionID = transactionID
        self.accountID = accountID
        self.productID = productID
        self.productType = productType
        self.creditsPerUnit = creditsPerUnit
        self.subscriptionPeriod = subscriptionPeriod
        self.quantity = quantity
        self.unitPrice = unitPrice
        self.currency = currency
        self.paymentMethod = paymentMethod
        self.purchaseMs = purchaseMs
        self.offerID = offerID
        self.idempotencyKey = idempotencyKey
        self.requestHash = requestHash
        self.state = state
        self.outcome = outcome
        self.owner = owner
        self.createdMs = createdMs
        self.attemptMs = attemptMs
    }
}
