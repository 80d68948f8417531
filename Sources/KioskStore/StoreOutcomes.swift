import KioskAPI
import KioskSigning

/// A purchase the store answered without recording it: nothing was charged.
public struct FailedPurchase: Hashable, Sendable {
    /// Why, as StoreKit's `SKError` codes.
    public enum Code: UInt32, Hashable, Sendable {
        /// Unknown.
        case unknown = 0
        /// The buyer cancelled.
        case paymentCancelled = 2
        /// The payment was declined or its method is not accepted here.
        case paymentInvalid = 3
        /// Purchases are disabled for the account.
        case paymentNotAllowed = 4
        /// The product is not in the catalog.
        case productUnavailable = 5
        /// The subscription offer asked for does not exist for the product.
        case invalidOfferIdentifier = 11
        /// A promotional offer's signature is not valid (unknown key, altered, expired, its nonce used).
        case invalidSignature = 12
        /// A promotional offer without its key id, nonce, timestamp or signature.
        case missingOfferParams = 13
        /// The account may not have the offer (an introductory offer the second time).
        case ineligibleForOffer = 18
    }

    /// Why.
    public var code: Code
    /// Machine-readable: `card_declined`, `payment_cancelled`, `test_payment_method`, ….
    public var reason: String
    /// Readable.
    public var message: String
    /// The id the attempt was given (never recorded).
    public var transactionID: String
    /// The buyer.
    public var accountID: String
    /// The product asked for.
    public var productID: String
    /// Its kind, when the catalog has it.
    public var productType: ProductKind?
    /// Units asked for.
    public var quantity: UInt32
    /// When, milliseconds since 1970.
    public var dateMs: Int64
    /// Unit price and currency, when the catalog has the product.
    public var price: String, currency: String
    /// The store's environment.
    public var environment: StoreEnvironment
}

/// What a purchase came to.
public struct PurchaseOutcome: Hashable, Sendable {
    /// The transaction, or why there is none.
    public enum Result: Hashable, Sendable {
        /// Charged and recorded (or, with ``PurchaseOutcome/alreadyOwned``, bought before and not charged again).
        case purchased(TransactionRecord)
        /// Recorded, waiting for approval (ask to buy); charged when approved.
        case deferred(TransactionRecord)
        /// Not charged, not recorded.
        case failed(FailedPurchase)
    }

    /// The transaction, or why there is none.
    public var result: Result
    /// The answer stored for the idempotency key (or the ledger's record of its payment), sent again.
    public var replayed = false
    /// A product bought once that the account already owns: not charged again.
    public var alreadyOwned = false

    /// The transaction's id (a failed attempt's too).
    public var transactionID: String {
        switch result {
        case .purchased(let record), .deferred(let record): record.id
        case .failed(let failure): failure.transactionID
        }
    }

    /// The recorded transaction; nil for a failed purchase.
    public var record: TransactionRecord? {
        switch result {
        case .purchased(let record), .deferred(let record): record
        case .failed: nil
        }
    }

    /// True when the purchase was charged (now or before).
    public var isPurchased: Bool {
        if case .purchased = result { return true }
        return false
    }
}

/// What spending credits came to.
public struct SpendOutcome: Hashable, Sendable {
    /// The balance after the spend.
    public var balance: UInt64
    /// The answer stored for the idempotency key, sent again.
    public var replayed = false
}

/// The store's verdict on a receipt: the verifier's check, the account, and what only the ledger knows.
public struct ReceiptVerdict: Hashable, Sendable {
    /// Signature, environment, expiry; `accountNotFound` (21010) when the store does not know the account.
    public var check: ReceiptCheck
    /// The refund, when the transaction was refunded: milliseconds since 1970 (0: not refunded) and why.
    public var revocationMs: Int64 = 0
    /// Why it was refunded.
    public var revocationReason = ""
    /// Auto-renewable subscriptions: the newest transaction of the receipt's subscription.
    public var latestTransaction: StoreV1.Transaction?
    /// Auto-renewable subscriptions: where the subscription stands.
    public var subscription: StoreV1.SubscriptionStatus?
    /// When asked for: the receipt's account's active entitlements.
    public var entitlements: [ActiveEntitlement] = []
}
