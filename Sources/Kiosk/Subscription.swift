import Foundation
import KioskAPI

@_exported import struct KioskAPI.PromotionalOfferSignature

/// An offer a subscription purchase asks for (StoreKit's `Product.PurchaseOption.promotionalOffer` and
/// introductory offers).
public enum SubscriptionOffer: Hashable, Sendable, Codable {
    /// The product's introductory offer (a free trial or a reduced price), once per group and account.
    case introductory
    /// A promotional offer the app's server signed for this buyer
    /// (`PromotionalOfferSignature.sign(privateKey:keyID:bundleID:productID:offerID:accountID:nonce:timestampMs:)`, in
    /// the `KioskSigning` product, on the server: the app holds no private key).
    case promotional(offerID: String, keyID: String, nonce: String, timestampMs: Int64, signature: [UInt8])

    /// A signed promotional offer.
    public static func promotional(_ signed: PromotionalOfferSignature) -> SubscriptionOffer {
        .promotional(
            offerID: signed.offerID, keyID: signed.keyID, nonce: signed.nonce, timestampMs: signed.timestampMs,
            signature: signed.signature)
    }

    var message: StoreV1.SubscriptionOffer {
        switch self {
        case .introductory:
            StoreV1.SubscriptionOffer(offerID: "introductory")
        case .promotional(let offerID, let keyID, let nonce, let timestampMs, let signature):
            StoreV1.SubscriptionOffer(
                offerID: offerID, keyID: keyID, nonce: nonce, timestampMs: timestampMs, signature: signature)
        }
    }
}

/// A subscription offer's terms, as the catalog states them.
public struct SubscriptionOfferInfo: Hashable, Sendable {
    /// `introductory`, or the promotional offer's id.
    public var id: String
    /// The price of one offer period (0: a free trial).
    public var price: Decimal
    /// One offer period (ISO 8601).
    public var period: String
    /// How many periods the price applies to.
    public var periodCount: UInt32

    init(_ message: StoreV1.OfferInfo) {
        id = message.id
        price = Decimal(string: message.price, locale: Locale(identifier: "en_US_POSIX")) ?? 0
        period = message.period
        periodCount = message.periods
    }
}

/// What the catalog says of an auto-renewable subscription (StoreKit's `Product.SubscriptionInfo`).
public struct SubscriptionInfo: Hashable, Sendable {
    /// The period one payment buys (ISO 8601, e.g. "P1M").
    public var period: String
    /// The subscription group: an account has one active subscription per group.
    public var groupID: String
    /// The product's level in its group, 1 the highest tier.
    public var groupLevel: UInt32
    /// How long a failed renewal keeps the entitlement (ISO 8601); nil: no grace period.
    public var gracePeriod: String?
    /// How long the store retries a failed renewal's payment before the subscription expires (ISO 8601).
    public var billingRetryPeriod: String
    /// The introductory offer, if the product has one.
    public var introductoryOffer: SubscriptionOfferInfo?
    /// The promotional offers the app's server may sign.
    public var promotionalOffers: [SubscriptionOfferInfo]
}

/// Where an auto-renewable subscription stands (the App Store's subscription status).
public struct SubscriptionStatus: Hashable, Sendable, Identifiable {
    /// The states a subscription moves through:
    ///
    /// ```
    /// purchase ─▶ active ──renewal charged──▶ active
    ///              │  │
    ///              │  └─auto-renew off, period ends─▶ expired (cancelled)
    ///              └─renewal declined─▶ inGracePeriod ─grace ends─▶ inBillingRetry ─retry period ends─▶ expired (billingError)
    ///                                       └──────retry charged──────────┴──▶ active (recovered)
    /// refund of the latest transaction ─▶ revoked
    /// ```
    public enum State: String, Hashable, Sendable {
        /// Within a paid (or offer) period; it renews when the period ends unless auto-renew is off.
        case active
        /// A renewal was declined and the product has a grace period: still entitled while the store retries.
        case inGracePeriod = "in-grace-period"
        /// A renewal was declined and no grace period is left: not entitled while the store retries the payment.
        case inBillingRetry = "in-billing-retry"
        /// Ended; ``SubscriptionStatus/expirationReason`` says why.
        case expired
        /// The latest transaction was refunded or revoked: no entitlement.
        case revoked
        /// A state this SDK does not know (a newer store).
        case unknown
    }

    /// Why a subscription expired.
    public enum ExpirationReason: String, Hashable, Sendable {
        /// The buyer turned auto-renew off.
        case cancelled
        /// Every payment retry failed.
        case billingError = "billing-error"
        /// The buyer did not accept a price increase.
        case priceIncreaseNotAccepted = "price-increase-not-accepted"
        /// The product left the catalog.
        case productUnavailable = "product-unavailable"
    }

    /// The original transaction id: the subscription's id.
    public var id: String { originalTransactionID }
    /// The first purchase's transaction id, shared by every renewal.
    public var originalTransactionID: String
    /// The product subscribed to now.
    public var productID: String
    /// The subscription group.
    public var groupID: String
    /// The offer the next renewal is still under, if any (its price is ``renewalPrice``).
    public var renewalOfferID: String?
    /// Where it stands.
    public var state: State
    /// False once the buyer turned auto-renew off.
    public var willAutoRenew: Bool
    /// The end of the current (or last) paid period.
    public var expirationDate: Date
    /// When expired: why.
    public var expirationReason: ExpirationReason?
    /// In the grace period: when the entitlement ends unless a payment retry succeeds.
    public var gracePeriodExpirationDate: Date?
    /// In grace or billing retry: when the store stops retrying.
    public var billingRetryEndDate: Date?
    /// A product switched to at the next renewal.
    public var pendingProductID: String?
    /// What the next renewal charges, and its currency.
    public var renewalPrice: Decimal?
    /// The ISO 4217 currency code of ``renewalPrice``.
    public var currencyCode: String
    /// The storefront the next renewal charges in: the account's now (ISO 3166-1 alpha-3, "FRA").
    public var storefrontCountryCode: String
    /// Periods paid so far.
    public var periodsPaid: UInt32
    /// The newest transaction (the first purchase or the latest renewal).
    public var latestTransaction: Transaction?

    /// True while the buyer is entitled, by the store's clock when it answered: within the paid period, or in
    /// the grace period.
    public var isEntitled: Bool
    /// The price went up since the buyer agreed to one (or the buyer moved to a storefront where it is higher, or in
    /// another currency): unless they consent (``KioskClient/consentToPriceIncrease(originalTransactionID:)``),
    /// the subscription ends with its period, reason `priceIncreaseNotAccepted`.
    public var priceIncreasePending: Bool
    /// In grace or billing retry: the last renewal attempt waits for the buyer to authenticate it (the card
    /// issuer asked for it: SCA). Confirm it on the device with the processor's SDK (Stripe: `handleNextAction` /
    /// `confirmPayment` with ``RenewalAction/clientSecret``), then call
    /// ``KioskClient/confirmRenewal(originalTransactionID:)``: the subscription recovers. Nil otherwise.
    public var pendingAction: RenewalAction?

    /// A renewal payment the buyer must confirm on the device.
    public struct RenewalAction: Hashable, Sendable {
        /// The processor's payment (Stripe: the PaymentIntent's `pi_…` id).
        public var paymentReference: String
        /// What the processor's client SDK confirms the payment with (Stripe: the PaymentIntent's client secret).
        /// Only this account is ever sent it; keep it out of logs.
        public var clientSecret: String
    }

    init(_ message: StoreV1.SubscriptionStatus) {
        originalTransactionID = message.originalTransactionID
        productID = message.productID
        groupID = message.subscriptionGroup
        renewalOfferID = message.renewalOfferID.isEmpty ? nil : message.renewalOfferID
        state =
            switch message.state {
            case .active: .active
            case .inGracePeriod: .inGracePeriod
            case .inBillingRetry: .inBillingRetry
            case .expired: .expired
            case .revoked: .revoked
            default: .unknown
            }
        willAutoRenew = message.willAutoRenew
        expirationDate = Date(milliseconds: message.expiresDateMs)
        expirationReason =
            switch message.expirationReason {
            case .cancelled: .cancelled
            case .billingError: .billingError
            case .priceIncreaseNotAccepted: .priceIncreaseNotAccepted
            case .productUnavailable: .productUnavailable
            default: nil
            }
        gracePeriodExpirationDate =
            message.gracePeriodExpiresMs > 0 ? Date(milliseconds: message.gracePeriodExpiresMs) : nil
        billingRetryEndDate = message.billingRetryEndsMs > 0 ? Date(milliseconds: message.billingRetryEndsMs) : nil
        pendingProductID = message.pendingProductID.isEmpty ? nil : message.pendingProductID
        renewalPrice =
            message.renewalPrice.isEmpty
            ? nil : Decimal(string: message.renewalPrice, locale: Locale(identifier: "en_US_POSIX"))
        currencyCode = message.currency
        storefrontCountryCode = message.storefront
        periodsPaid = message.periodsPaid
        latestTransaction = message.latestTransaction.map(Transaction.init)
        isEntitled = message.entitled
        priceIncreasePending = message.priceIncreasePending
        pendingAction =
            message.actionClientSecret.isEmpty
            ? nil
            : RenewalAction(paymentReference: message.actionPaymentReference, clientSecret: message.actionClientSecret)
    }
}

extension KioskClient {
    /// The buyer agrees to the product's new, higher price: the subscription renews at it (StoreKit's price-increase consent).
    @discardableResult
    public func consentToPriceIncrease(originalTransactionID: String) async throws -> SubscriptionStatus {
        SubscriptionStatus(
            try await storeCall(
                "ConsentToPriceIncrease", StoreV1.SetAutoRenewRequest(originalTransactionID: originalTransactionID),
                StoreV1.SubscriptionStatus.self, doing: "agreeing to a price increase"))
    }

    /// True when the account may have `product`'s introductory offer: it has never subscribed in the product's group
    /// (StoreKit's `isEligibleForIntroOffer`).
    public func isEligibleForIntroOffer(_ product: Product) async throws -> Bool {
        guard let info = product.subscription, info.introductoryOffer != nil else { return false }
        return try await !subscriptionStatus().contains { $0.groupID == info.groupID }
    }

    /// Where the account's auto-renewable subscriptions stand, newest first; or only the one with `originalTransactionID`.
    public func subscriptionStatus(originalTransactionID: String? = nil) async throws -> [SubscriptionStatus] {
        let response = try await storeCall(
            "SubscriptionStatus", StoreV1.SubscriptionStatusRequest(originalTransactionID: originalTransactionID ?? ""),
            StoreV1.SubscriptionStatusResponse.self, doing: "reading subscription status")
        return response.subscriptions.map(SubscriptionStatus.init)
    }

    /// Records a renewal the buyer confirmed on the device (``SubscriptionStatus/pendingAction``): the store asks the
    /// processor, and a charged payment recovers the subscription as a successful retry would.
    /// - Returns: The subscription's new status (``SubscriptionStatus/State/active``).
    /// - Throws: ``KioskError`` with status 9 (failed precondition) when no renewal waits for the buyer, or the
    ///   payment is not confirmed yet; 14 when the processor did not answer (ask again).
    @discardableResult
    public func confirmRenewal(originalTransactionID: String) async throws -> SubscriptionStatus {
        SubscriptionStatus(
            try await storeCall(
                "ConfirmRenewal", StoreV1.SetAutoRenewRequest(originalTransactionID: originalTransactionID),
                StoreV1.SubscriptionStatus.self, doing: "confirming a renewal"))
    }

    /// Replaces the payment method the account's renewals and billing retries are charged to (App Store: the
    /// buyer updates their payment method; the next renewal and any retry of a failed one use it). On Stripe the
    /// store saves the method to the buyer's Customer for off-session use first; nothing is charged.
    /// - Parameter paymentMethod: A `pm_…` id from Stripe.js (`pm_card_visa` in test mode), or a sandbox
    ///   `test-card:…`.
    /// - Returns: The method renewals now charge (the processor's id for it: Stripe saves a `pm_card_…` test method
    ///   under a new `pm_…` id) and how many live subscriptions (active, in grace, in billing retry) it applies to.
    /// - Throws: ``KioskError`` with status 9 (failed precondition) when the processor refuses the method (the
    ///   reason, such as `card_declined` or `authentication_required`, is in the message); 14 when it did not answer.
    @discardableResult
    public func setPaymentMethod(_ paymentMethod: String) async throws -> (paymentMethod: String, subscriptions: Int) {
        let response = try await storeCall(
            "SetPaymentMethod", StoreV1.SetPaymentMethodRequest(paymentMethod: paymentMethod),
            StoreV1.SetPaymentMethodResponse.self, doing: "saving a payment method")
        return (response.paymentMethod, Int(response.subscriptions))
    }

    /// Turns a subscription's auto-renew off (it ends when the paid period does, reason `cancelled`) or on again.
    /// - Throws: ``KioskError`` for an unknown subscription or one that has ended.
    @discardableResult
    public func setAutoRenew(originalTransactionID: String, _ on: Bool) async throws -> SubscriptionStatus {
        SubscriptionStatus(
            try await storeCall(
                "SetAutoRenew",
                StoreV1.SetAutoRenewRequest(originalTransactionID: originalTransactionID, autoRenew: on),
                StoreV1.SubscriptionStatus.self, doing: on ? "turning auto-renew on" : "turning auto-renew off"))
    }
}
