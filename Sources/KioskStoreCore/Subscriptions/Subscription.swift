/// Where one auto-renewable subscription stands: one per original transaction.
///
/// A value; it changes only through ``SubscriptionLifecycle``'s events (in
/// `SubscriptionLifecycle.swift`), which decide every rule of renewing, failing,
/// cancelling and consenting in one place. The ledger stores it as one row and
/// writes it in the same database transaction as the payment it follows.
public struct Subscription: Hashable, Sendable {
    /// Where the subscription is in its life.
    public enum State: Int32, Hashable, Sendable, CustomStringConvertible {
        /// Paid up to ``Subscription/expiresMs``.
        case active = 1
        /// A renewal was declined; still entitled until ``Subscription/graceEndMs`` while payment is retried.
        case inGracePeriod = 2
        /// A renewal was declined; not entitled; payment is retried until ``Subscription/retryEndMs``.
        case inBillingRetry = 3
        /// Ended; see ``Subscription/expirationReason``.
        case expired = 4
        /// Ended by a refund of its latest transaction.
        case revoked = 5

        public var description: String {
            switch self {
            case .active: "ACTIVE"
            case .inGracePeriod: "IN_GRACE_PERIOD"
            case .inBillingRetry: "IN_BILLING_RETRY"
            case .expired: "EXPIRED"
            case .revoked: "REVOKED"
            }
        }
    }

    /// Why an EXPIRED subscription ended.
    public enum ExpirationReason: Int32, Hashable, Sendable, CustomStringConvertible {
        /// Not expired.
        case unspecified = 0
        /// The buyer turned auto-renew off.
        case cancelled = 1
        /// Every payment retry failed until the billing retry period ended.
        case billingError = 2
        /// The buyer did not consent to a price above the one agreed.
        case priceIncreaseNotAccepted = 3
        /// The product left the catalog.
        case productUnavailable = 4

        public var description: String {
            switch self {
            case .unspecified: "EXPIRATION_REASON_UNSPECIFIED"
            case .cancelled: "CANCELLED"
            case .billingError: "BILLING_ERROR"
            case .priceIncreaseNotAccepted: "PRICE_INCREASE_NOT_ACCEPTED"
            case .productUnavailable: "PRODUCT_UNAVAILABLE"
            }
        }
    }

    /// The first purchase's transaction id, shared by every renewal.
    public var originalID: String
    /// The account.
    public var accountID: String
    /// The product subscribed to now.
    public var productID: String
    /// Where it stands.
    public var state: State
    /// False once the buyer turned auto-renew off. Only the buyer changes it (or its end).
    public var willAutoRenew: Bool
    /// What renewals are charged to: the payment method of the latest purchase.
    public var paymentMethod: String
    /// Periods paid so far (1 after the first purchase); the next renewal's payment id counts from it.
    public var periodsPaid: Int
    /// The end of the current (or last) paid period, milliseconds since 1970.
    public var expiresMs: Int64
    /// IN_GRACE_PERIOD: when the entitlement ends unless a retry succeeds.
    public var graceEndMs: Int64
    /// IN_GRACE_PERIOD, IN_BILLING_RETRY: when the store stops retrying.
    public var retryEndMs: Int64
    /// When the renewal engine looks at it next; 0 once it has ended.
    public var dueMs: Int64
    /// Failed payment attempts for the period being renewed (each attempt has its own payment id).
    public var attempts: Int
    /// EXPIRED: why.
    public var expirationReason: ExpirationReason
    /// A downgrade or crossgrade that takes effect at the next renewal; empty when none.
    public var pendingProductID: String
    /// The newest transaction.
    public var latestTransactionID: String
    /// The offer the subscription runs under (`introductory` or a promotional offer's id); empty: none.
    public var offerID: String
    /// Periods paid under ``offerID`` so far.
    public var offerPeriodsUsed: Int
    /// The regular price the buyer agreed to (by buying, or by consenting to an increase); empty: not
    /// known (a subscription from before the ledger kept it), taken as the current price.
    public var acceptedPrice: String
    /// The currency of ``acceptedPrice``; empty: the renewal's (a subscription from before storefronts).
    public var acceptedCurrency: String = ""
    /// The storefront renewals charge in: the account's (kept in step when the buyer changes it); empty: the
    /// catalog's default.
    public var storefront: String = ""

    /// A subscription about to be paid for the first time (its first period is recorded by
    /// ``SubscriptionLifecycle/purchased(_:)``).
    public init(
        originalID: String, accountID: String, productID: String, paymentMethod: String, expiresMs: Int64,
        latestTransactionID: String
    ) {
        self.originalID = originalID
        self.accountID = accountID
        self.productID = productID
        self.state = .active
        self.willAutoRenew = true
        self.paymentMethod = paymentMethod
        self.periodsPaid = 0
        self.expiresMs = expiresMs
        self.graceEndMs = 0
        self.retryEndMs = 0
        self.dueMs = expiresMs
        self.attempts = 0
        self.expirationReason = .unspecified
        self.pendingProductID = ""
        self.latestTransactionID = latestTransactionID
        self.offerID = ""
        self.offerPeriodsUsed = 0
        self.acceptedPrice = ""
    }

    /// True while the buyer is entitled to the product: paid up, or in the grace period.
    public func isEntitled(atMs nowMs: Int64) -> Bool {
        switch state {
        case .active: nowMs < expiresMs
        case .inGracePeriod: nowMs < graceEndMs
        default: false
        }
    }

    /// True until the subscription has ended (expired or revoked).
    public var isLive: Bool { state == .active || state == .inGracePeriod || state == .inBillingRetry }

    /// The payment id of the next renewal attempt: the same (original transaction, period, attempt) is
    /// charged at most once however many store processes try it; each retry after a decline is a new attempt.
    public var renewalPaymentID: String { "renew_\(originalID)_\(periodsPaid)_\(attempts)" }

    /// The payment id of the period's last failed attempt (the one before ``renewalPaymentID``); nil before any.
    public var lastAttemptPaymentID: String? {
        attempts > 0 ? "renew_\(originalID)_\(periodsPaid)_\(attempts - 1)" : nil
    }
}
