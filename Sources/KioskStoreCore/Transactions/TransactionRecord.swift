/// What the ledger records of a purchase: transactions, accounts and revocations, as the domain
/// sees them. The wire's `StoreV1.Transaction` and the receipt's `ReceiptV1` enums are mapped to
/// and from these at the store's edge; the ledger stores the raw values below.

/// A product's kind. Raw values are the ledger's `product_type` column (and, as it happens, the
/// receipt format's `ProductType`).
public enum ProductKind: Int32, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Bought, used up, bought again (credits).
    case consumable = 1
    /// Owned once, for good.
    case nonConsumable = 2
    /// A fixed period; buying again stacks another period.
    case nonRenewingSubscription = 3
    /// Renews itself until the buyer turns auto-renew off.
    case autoRenewableSubscription = 4
    /// An operator's grant of an entitlement for a time, no charge: not a catalog product (its product id is
    /// ``EntitlementMap/grantProductID(_:)``), revocable as a refund is.
    case grant = 5

    /// True for kinds an account owns at most once at a time.
    public var isExclusive: Bool { self == .nonConsumable || self == .autoRenewableSubscription }

    public var description: String {
        switch self {
        case .consumable: "CONSUMABLE"
        case .nonConsumable: "NON_CONSUMABLE"
        case .nonRenewingSubscription: "NON_RENEWING_SUBSCRIPTION"
        case .autoRenewableSubscription: "AUTO_RENEWABLE_SUBSCRIPTION"
        case .grant: "GRANT"
        }
    }
}

/// Where a transaction stands. Raw values are the ledger's `state` column.
public enum TransactionState: Int32, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Charged (or free) and granted.
    case purchased = 1
    /// Refused: nothing charged, nothing granted.
    case failed = 2
    /// Waiting for approval (ask to buy).
    case deferred = 3

    public var description: String {
        switch self {
        case .purchased: "PURCHASED"
        case .failed: "FAILED"
        case .deferred: "DEFERRED"
        }
    }

    /// `PURCHASED`, `FAILED` or `DEFERRED`.
    public var name: String { description }
}

/// Which money a store takes: test money or real. Raw values are the ledger's `environment` column.
public enum StoreEnvironment: Int32, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    case sandbox = 1
    case production = 2

    /// `sandbox` or `production`.
    public var name: String { self == .sandbox ? "sandbox" : "production" }

    /// Parses `sandbox` or `production` (any case).
    public init?(name: String) {
        switch name.lowercased() {
        case "sandbox": self = .sandbox
        case "production": self = .production
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .sandbox: "SANDBOX"
        case .production: "PRODUCTION"
        }
    }
}

/// One transaction: a purchase, renewal, failure or ask-to-buy request.
public struct TransactionRecord: Hashable, Sendable {
    /// The id.
    public var id: String
    /// The original transaction id (a renewal keeps its first purchase's).
    public var originalID: String
    /// The account.
    public var accountID: String
    /// The product.
    public var productID: String
    /// The product's kind.
    public var productType: ProductKind
    /// Units bought.
    public var quantity: UInt32
    /// PURCHASED, FAILED or DEFERRED.
    public var state: TransactionState
    /// Purchase (or approval) time, milliseconds since 1970.
    public var purchaseMs: Int64
    /// Subscription expiry, milliseconds since 1970; 0 = none.
    public var expiresMs: Int64
    /// Subscriptions: the start of the period paid for (a stacked non-renewing period starts when the one before ends); 0 = none.
    public var periodStartMs: Int64
    /// Subscriptions bought or renewed under an offer: `introductory` or the promotional offer's id; empty: none.
    public var offerID: String
    /// Unit price, decimal string.
    public var price: String
    /// ISO 4217 currency code.
    public var currency: String
    /// The payment method used.
    public var paymentMethod: String
    /// The payment's stable id; unique, so one payment is recorded (and charged) once.
    public var paymentID: String?
    /// FAILED: StoreKit error code.
    public var errorCode: UInt32
    /// FAILED: machine-readable reason.
    public var errorReason: String
    /// FAILED: readable message.
    public var errorMessage: String
    /// The encoded `SignedReceipt`, for PURCHASED transactions.
    public var receipt: [UInt8]?
    /// True once the app finished it.
    public var finished: Bool
    /// Revocation (refund) time, milliseconds since 1970; 0 = not revoked.
    public var revokedMs: Int64
    /// Why it was revoked.
    public var revocationReason: String
    /// Sandbox or production.
    public var environment: StoreEnvironment
    /// Credits this transaction added to the balance.
    public var credits: UInt64
    /// A refunded consumable: credits the refund could not take back (already spent).
    public var refundCreditShortfall: UInt64
    /// The storefront the price is in (ISO 3166-1 alpha-3); empty: recorded before the ledger kept storefronts.
    public var storefront: String = ""

    /// A transaction with nothing yet charged, failed, finished or revoked.
    public init(
        id: String, originalID: String, accountID: String, productID: String, productType: ProductKind,
        quantity: UInt32,
        state: TransactionState, purchaseMs: Int64, expiresMs: Int64 = 0, periodStartMs: Int64 = 0,
        offerID: String = "",
        price: String, currency: String, paymentMethod: String, paymentID: String?, errorCode: UInt32 = 0,
        errorReason: String = "",
        errorMessage: String = "", receipt: [UInt8]? = nil, finished: Bool = false, revokedMs: Int64 = 0,
        revocationReason: String = "", environment: StoreEnvironment, credits: UInt64 = 0,
        refundCreditShortfall: UInt64 = 0
    ) {
        self.id = id
        self.originalID = originalID
        self.accountID = accountID
        self.productID = productID
        self.productType = productType
        self.quantity = quantity
        self.state = state
        self.purchaseMs = purchaseMs
        self.expiresMs = expiresMs
        self.periodStartMs = periodStartMs
        self.offerID = offerID
        self.price = price
        self.currency = currency
        self.paymentMethod = paymentMethod
        self.paymentID = paymentID
        self.errorCode = errorCode
        self.errorReason = errorReason
        self.errorMessage = errorMessage
        self.receipt = receipt
        self.finished = finished
        self.revokedMs = revokedMs
        self.revocationReason = revocationReason
        self.environment = environment
        self.credits = credits
        self.refundCreditShortfall = refundCreditShortfall
    }
}

/// An account.
public struct AccountRecord: Hashable, Sendable {
    /// The id.
    public var id: String
    /// False when payments are disabled (restrictions).
    public var paymentsAllowed: Bool
    /// Credits held.
    public var creditBalance: UInt64
    /// The storefront the account buys in (ISO 3166-1 alpha-3); empty: the catalog's default (an account from before
    /// storefronts). ``Catalog/storefront(_:)`` reads it.
    public var storefront: String

    public init(id: String, paymentsAllowed: Bool, creditBalance: UInt64, storefront: String = "") {
        self.id = id
        self.paymentsAllowed = paymentsAllowed
        self.creditBalance = creditBalance
        self.storefront = storefront
    }
}

/// A revocation: a refunded or revoked transaction, in the order the feed serves them.
public struct RevocationRecord: Hashable, Sendable {
    /// The revocation's position in the feed.
    public var cursor: UInt64
    /// The revoked transaction.
    public var transactionID: String
    /// Its original transaction.
    public var originalTransactionID: String
    /// The account.
    public var accountID: String
    /// Revocation (refund) time, milliseconds since 1970.
    public var revokedMs: Int64
    /// Why.
    public var reason: String
    /// Credits the refund could not take back because they were spent.
    public var creditShortfall: UInt64

    public init(
        cursor: UInt64, transactionID: String, originalTransactionID: String, accountID: String, revokedMs: Int64,
        reason: String, creditShortfall: UInt64
    ) {
        self.cursor = cursor
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.accountID = accountID
        self.revokedMs = revokedMs
        self.reason = reason
        self.creditShortfall = creditShortfall
    }
}
