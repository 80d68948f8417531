// The life of an auto-renewable subscription, decided in one place.
//
// States (``Subscription/State``) and what moves them:
//
//   (new) ──purchased──► ACTIVE
//   ACTIVE ──renewalDue: charge──► (payment in flight; the state does not move)
//   ACTIVE ──renewed──► ACTIVE (next period)
//   ACTIVE ──renewalDeclined──► IN_GRACE_PERIOD (product has grace) | IN_BILLING_RETRY
//   IN_GRACE_PERIOD ──renewalDeclined, grace over──► IN_BILLING_RETRY
//   IN_GRACE_PERIOD | IN_BILLING_RETRY ──renewed──► ACTIVE (recovered)
//   IN_GRACE_PERIOD | IN_BILLING_RETRY ──retry period over──► EXPIRED (BILLING_ERROR)
//   any live ──renewalDue, auto-renew off──► EXPIRED (CANCELLED)
//   any live ──renewalDue, regular price above the agreed one──► EXPIRED (PRICE_INCREASE_NOT_ACCEPTED)
//   any live ──renewalDue, product gone──► EXPIRED (PRODUCT_UNAVAILABLE)
//   IN_GRACE_PERIOD | IN_BILLING_RETRY ──autoRenewSet(false)──► EXPIRED (CANCELLED) at once
//   any live ──expiredNow──► EXPIRED
//   EXPIRED | REVOKED ──purchased──► ACTIVE (a resubscription continues the same subscription)
//
// The rules the money depends on, each decided here only:
// - Only the buyer changes auto-renew (``autoRenewSet(_:)``, or buying again). A renewal, whatever
//   happened while its charge was in flight, leaves it as it finds it.
// - The agreed price changes only when the buyer pays with the price in front of them (a purchase,
//   an approved ask-to-buy, at the price asked for) or consents to the current one. A renewal never
//   changes it, under an offer or not; a renewal at a regular price above it is never charged.
// - An offer's price is what the buyer agreed to for the offer's periods; after them the regular
//   price applies, against the agreed price.

/// The terms the next renewal would be charged at.
public struct RenewalTerms: Hashable, Sendable {
    /// The product renewed: the current one, or a pending downgrade's.
    public var productID: String
    /// The price charged for the period: the offer's while periods of it are left, else the regular price.
    public var price: String
    /// The product's currency.
    public var currency: String
    /// The period bought.
    public var period: SubscriptionPeriod
    /// The offer the renewal is under; empty: the regular price.
    public var offerID: String

    /// Creates terms.
    public init(productID: String, price: String, currency: String, period: SubscriptionPeriod, offerID: String) {
        self.productID = productID
        self.price = price
        self.currency = currency
        self.period = period
        self.offerID = offerID
    }
}

/// A period paid for: what ``Subscription/purchased(_:)`` and ``Subscription/renewed(_:)`` record.
public struct PaidPeriod: Hashable, Sendable {
    /// The transaction that paid it.
    public var transactionID: String
    /// The product paid for.
    public var productID: String
    /// The end of the period paid.
    public var expiresMs: Int64
    /// The payment method charged.
    public var paymentMethod: String
    /// The offer it was paid under; empty: none.
    public var offerID: String
    /// The regular price the buyer had in front of them when paying (a purchase's current catalog price,
    /// an approved ask-to-buy's price as asked); ignored for renewals.
    public var regularPrice: String
    /// The currency of ``regularPrice`` (and of the payment).
    public var currency: String = ""
    /// The storefront it was paid in.
    public var storefront: String = ""

    /// Creates a paid period.
    public init(
        transactionID: String, productID: String, expiresMs: Int64, paymentMethod: String, offerID: String,
        regularPrice: String, currency: String = "", storefront: String = ""
    ) {
        self.transactionID = transactionID
        self.productID = productID
        self.expiresMs = expiresMs
        self.paymentMethod = paymentMethod
        self.offerID = offerID
        self.regularPrice = regularPrice
        self.currency = currency
        self.storefront = storefront
    }
}

/// How a declined renewal is retried: the product's grace and billing-retry periods, in the store's time scale.
public struct RetryPolicy: Hashable, Sendable {
    /// The grace period (entitlement kept while retrying); nil: none.
    public var gracePeriod: SubscriptionPeriod?
    /// How long payment is retried after the period's end.
    public var billingRetryPeriod: SubscriptionPeriod
    /// A sandbox store's time scale (720 makes a month an hour); 1 in production.
    public var timeScale: Double

    /// Creates a policy.
    public init(gracePeriod: SubscriptionPeriod?, billingRetryPeriod: SubscriptionPeriod, timeScale: Double) {
        self.gracePeriod = gracePeriod
        self.billingRetryPeriod = billingRetryPeriod
        self.timeScale = timeScale
    }

    /// How long after the `attempt`th declined renewal the store tries again: 1 day, doubling per attempt, at
    /// most 8 days (in the time scale).
    public func retryDelayMs(afterAttempt attempt: Int) -> Int64 {
        let days = Int64(1) << Int64(min(max(attempt - 1, 0), 3))
        return max(1, Int64((Double(days * 86_400_000) / timeScale).rounded()))
    }
}

/// What the renewal engine must do for a due subscription.
public enum RenewalDecision: Hashable, Sendable {
    /// Not due, or not live: nothing.
    case nothing
    /// It ended (the subscription's state is EXPIRED with this reason): write it.
    case expire(Subscription.ExpirationReason)
    /// Charge these terms for a period starting at `periodStartMs`.
    case charge(RenewalTerms, periodStartMs: Int64)
}

/// What a buyer's auto-renew change did.
public enum AutoRenewChange: Hashable, Sendable {
    /// It was already so.
    case unchanged
    /// It changed (an AUTO_RENEW_CHANGED event is due); `endedNow` when a subscription in grace or billing
    /// retry ended with it.
    case changed(endedNow: Bool)
}

/// Why a subscription event was refused.
public enum SubscriptionRefusal: Error, Hashable, Sendable {
    /// The subscription has ended (expired or revoked).
    case ended(Subscription.State, Subscription.ExpirationReason)
}

extension Subscription {
    // MARK: Events

    /// The buyer paid (a purchase, an approved ask-to-buy, an upgrade or a resubscription): ACTIVE for the
    /// period, renewing, at the regular price the buyer had in front of them.
    public mutating func purchased(_ paid: PaidPeriod) {
        enterPaidPeriod(paid)
        willAutoRenew = true
        paymentMethod = paid.paymentMethod
        pendingProductID = ""
        if !paid.regularPrice.isEmpty {
            acceptedPrice = paid.regularPrice
            acceptedCurrency = paid.currency
        }
        if !paid.storefront.isEmpty { storefront = paid.storefront }
        if paid.offerID.isEmpty {
            offerID = ""
            offerPeriodsUsed = 0
        } else {
            offerID = paid.offerID
            offerPeriodsUsed = 1
        }
    }

    /// The store's renewal charge was recorded: ACTIVE for the next period. Auto-renew and the agreed price are
    /// left as they are (the buyer may have turned auto-renew off while the charge was in flight: the next
    /// renewal then expires the subscription). A pending downgrade takes effect, at the price the buyer chose it at.
    public mutating func renewed(_ paid: PaidPeriod) {
        let switched = paid.productID != productID
        enterPaidPeriod(paid)
        // A switch renews at the price it was charged (which needed no consent only up to the one agreed when it was
        // chosen); a subscription from before the ledger kept an agreed price agrees to the first regular one it pays.
        if !paid.regularPrice.isEmpty, switched || acceptedPrice.isEmpty {
            acceptedPrice = paid.regularPrice
            acceptedCurrency = paid.currency
        }
        // An agreed price from before storefronts is in the currency its renewals were charged in.
        if acceptedCurrency.isEmpty, !acceptedPrice.isEmpty { acceptedCurrency = paid.currency }
        pendingProductID = ""
        if paid.offerID.isEmpty {
            offerID = ""
            offerPeriodsUsed = 0
        } else if offerID == paid.offerID {
            offerPeriodsUsed += 1
        } else {
            offerID = paid.offerID
            offerPeriodsUsed = 1
        }
    }

    private mutating func enterPaidPeriod(_ paid: PaidPeriod) {
        productID = paid.productID
        state = .active
        periodsPaid += 1
        expiresMs = paid.expiresMs
        graceEndMs = 0
        retryEndMs = 0
        dueMs = paid.expiresMs
        attempts = 0
        expirationReason = .unspecified
        latestTransactionID = paid.transactionID
    }

    /// The renewal engine looks at the subscription at `nowMs` with `terms` (nil: the product left the catalog).
    /// - Parameter latenessMs: how late past the period's end a renewal still starts when the period ended; nil:
    ///   always (a store catching up period by period).
    public mutating func renewalDue(atMs nowMs: Int64, terms: RenewalTerms?, latenessMs: Int64?) -> RenewalDecision {
        guard isLive, dueMs <= nowMs else { return .nothing }
        if !willAutoRenew { return expire(.cancelled) }
        guard let terms else { return expire(.productUnavailable) }
        if state != .active, nowMs >= retryEndMs { return expire(.billingError) }
        if needsConsent(toRenewAt: terms) { return expire(.priceIncreaseNotAccepted) }
        // Renewed on time (or within grace), the new period follows the old one; recovered from billing retry,
        // or renewed late (the store was down), it starts now: past periods are never billed.
        let late = latenessMs.map { state == .active && nowMs - expiresMs > $0 } ?? false
        let start = state == .inBillingRetry || late ? nowMs : expiresMs
        return .charge(terms, periodStartMs: start)
    }

    /// A renewal charge was declined at `nowMs`: into grace or billing retry (or EXPIRED, BILLING_ERROR, once the
    /// retry period is over), the next attempt scheduled. Auto-renew is left as it is.
    public mutating func renewalDeclined(atMs nowMs: Int64, policy: RetryPolicy) {
        guard isLive else { return }
        attempts += 1
        if state == .active {
            // The first failure, at the end of the period.
            let end = expiresMs
            retryEndMs = policy.billingRetryPeriod.end(fromMs: end, timeScale: policy.timeScale)
            if let grace = policy.gracePeriod {
                state = .inGracePeriod
                graceEndMs = min(grace.end(fromMs: end, timeScale: policy.timeScale), retryEndMs)
            } else {
                state = .inBillingRetry
            }
        }
        if state == .inGracePeriod, nowMs >= graceEndMs { state = .inBillingRetry }
        if nowMs >= retryEndMs {
            _ = expire(.billingError)
        } else {
            var due = min(nowMs + policy.retryDelayMs(afterAttempt: attempts), retryEndMs)
            if state == .inGracePeriod { due = min(due, graceEndMs) }
            dueMs = due
        }
    }

    /// The buyer turns auto-renew on or off. Off, an ACTIVE subscription ends with its period (reason CANCELLED,
    /// at the next renewal); one in grace or billing retry ends now.
    public mutating func autoRenewSet(_ on: Bool) throws(SubscriptionRefusal) -> AutoRenewChange {
        guard isLive else { throw .ended(state, expirationReason) }
        guard willAutoRenew != on else { return .unchanged }
        willAutoRenew = on
        if !on, state != .active {
            _ = expire(.cancelled)
            return .changed(endedNow: true)
        }
        return .changed(endedNow: false)
    }

    /// The buyer consents to `regularPrice` in `currency`, the product's price now in the subscription's storefront:
    /// renewals are charged at it.
    /// - Returns: true when the agreed price changed (a PRICE_CHANGED event is due).
    public mutating func priceConsented(_ regularPrice: String, currency: String) throws(SubscriptionRefusal) -> Bool {
        guard isLive else { throw .ended(state, expirationReason) }
        // An agreed price of a subscription from before storefronts is in the renewal's currency already.
        guard acceptedPrice != regularPrice || (!acceptedCurrency.isEmpty && acceptedCurrency != currency) else {
            acceptedCurrency = currency
            return false
        }
        acceptedPrice = regularPrice
        acceptedCurrency = currency
        return true
    }

    /// The buyer switches to a product of the same group at a lower or equal level at `price` (its regular price
    /// now): it takes effect at the next renewal, which renews (the buyer chose it) at no more than that price
    /// without consent.
    public mutating func downgradeChosen(to productID: String, price: String, currency: String) {
        pendingProductID = productID
        willAutoRenew = true
        acceptedPrice = price
        acceptedCurrency = currency
    }

    /// An operator moved the renewal date to `newEndMs` (later than the period's end): the paid period lasts until
    /// then and the next renewal (or, with auto-renew off, the expiry) comes then.
    /// - Returns: false, changing nothing, unless the subscription is ACTIVE and `newEndMs` is later.
    public mutating func extended(toMs newEndMs: Int64) -> Bool {
        guard state == .active, newEndMs > expiresMs else { return false }
        expiresMs = newEndMs
        dueMs = newEndMs
        return true
    }

    /// Ends the subscription now (an operator's or the sandbox's "expire"): no entitlement, nothing renews.
    public mutating func expiredNow(atMs nowMs: Int64, reason: ExpirationReason) {
        guard isLive else { return }
        _ = expire(reason)
        expiresMs = min(expiresMs, nowMs)
    }

    /// Its latest transaction's revocation was undone at `nowMs` (the merchant won the dispute): entitled again to
    /// the end of that period, auto-renew off (the buyer disputed the charge: nothing is charged again unasked), so
    /// ACTIVE until then and EXPIRED (CANCELLED) after, as a subscription turned off; already past: EXPIRED now.
    /// - Returns: false when it was not REVOKED (nothing changes).
    public mutating func reinstated(atMs nowMs: Int64) -> Bool {
        guard state == .revoked else { return false }
        willAutoRenew = false
        graceEndMs = 0
        retryEndMs = 0
        attempts = 0
        expirationReason = .unspecified
        if expiresMs > nowMs {
            state = .active
            dueMs = expiresMs
        } else {
            _ = expire(.cancelled)
        }
        return true
    }

    private mutating func expire(_ reason: ExpirationReason) -> RenewalDecision {
        state = .expired
        expirationReason = reason
        willAutoRenew = false
        dueMs = 0
        return .expire(reason)
    }

    // MARK: Questions

    /// True when renewing at `terms` would charge a regular price above the one the buyer agreed to (for a pending
    /// downgrade, its price when chosen). An offer's price is the offer's.
    public func needsConsent(toRenewAt terms: RenewalTerms) -> Bool {
        // Another currency than the one agreed (the buyer moved storefront) is never charged unasked, an offer's
        // price included.
        if !acceptedCurrency.isEmpty, acceptedCurrency != terms.currency { return true }
        guard terms.offerID.isEmpty else { return false }
        return isAbove(terms.price, currency: terms.currency)
    }

    /// True when the regular price the next renewal is at (the product's, or a pending downgrade's) is above the
    /// agreed one, so the buyer must consent first (also while an offer's periods run: the increase applies when
    /// they end).
    public func priceIncreasePending(regularPrice: String, currency: String) -> Bool {
        guard isLive else { return false }
        return isAbove(regularPrice, currency: currency)
    }

    private func isAbove(_ price: String, currency: String) -> Bool {
        guard !acceptedPrice.isEmpty else { return false }
        // A price in another currency (the buyer moved to another storefront) is never taken as agreed.
        if !acceptedCurrency.isEmpty, acceptedCurrency != currency { return true }
        // A price that cannot be read in the currency is never taken as agreed.
        guard let next = Money(decimal: price, currency: currency),
            let agreed = Money(decimal: acceptedPrice, currency: currency)
        else {
            return true
        }
        return next > agreed
    }
}
