import KioskStoreCore
import Testing

/// Every state of ``Subscription`` × every event of its lifecycle, and the money rules, without a ledger.
@Suite("Subscription lifecycle")
struct SubscriptionLifecycleTests {
    static let day: Int64 = 86_400_000
    static let month = SubscriptionPeriod(iso8601: "P1M")!
    static let policy = RetryPolicy(
        gracePeriod: SubscriptionPeriod(iso8601: "P3D"), billingRetryPeriod: SubscriptionPeriod(iso8601: "P30D")!,
        timeScale: 1)
    static let noGrace = RetryPolicy(
        gracePeriod: nil, billingRetryPeriod: SubscriptionPeriod(iso8601: "P30D")!, timeScale: 1)

    static func regular(_ price: String = "4.99") -> RenewalTerms {
        RenewalTerms(productID: "pro.monthly", price: price, currency: "USD", period: month, offerID: "")
    }

    static func paid(
        _ id: String, expiresMs: Int64, offerID: String = "", regularPrice: String = "4.99",
        productID: String = "pro.monthly"
    ) -> PaidPeriod {
        PaidPeriod(
            transactionID: id, productID: productID, expiresMs: expiresMs, paymentMethod: "card", offerID: offerID,
            regularPrice: regularPrice)
    }

    /// A subscription bought at 0, paid until 30 days.
    static func bought(offerID: String = "") -> Subscription {
        var subscription = Subscription(
            originalID: "o1", accountID: "a1", productID: "pro.monthly", paymentMethod: "card",
            expiresMs: 30 * day, latestTransactionID: "t1")
        subscription.purchased(paid("t1", expiresMs: 30 * day, offerID: offerID))
        return subscription
    }

    static func inState(_ state: Subscription.State) -> Subscription {
        var subscription = bought()
        switch state {
        case .active: break
        case .inGracePeriod: subscription.renewalDeclined(atMs: 30 * day, policy: policy)
        case .inBillingRetry: subscription.renewalDeclined(atMs: 30 * day, policy: noGrace)
        case .expired: subscription.expiredNow(atMs: day, reason: .cancelled)
        case .revoked:
            subscription.state = .revoked
            subscription.dueMs = 0
        }
        #expect(subscription.state == state)
        return subscription
    }

    static let allStates: [Subscription.State] = [.active, .inGracePeriod, .inBillingRetry, .expired, .revoked]

    // MARK: purchased

    @Test("a purchase makes any state ACTIVE, renewing, at the price in front of the buyer", arguments: allStates)
    func purchasedFromEveryState(_ state: Subscription.State) {
        var subscription = Self.inState(state)
        subscription.willAutoRenew = false
        subscription.purchased(Self.paid("t9", expiresMs: 90 * Self.day, regularPrice: "5.99"))
        #expect(subscription.state == .active)
        #expect(subscription.willAutoRenew)
        #expect(subscription.acceptedPrice == "5.99")
        #expect(subscription.expiresMs == 90 * Self.day && subscription.dueMs == 90 * Self.day)
        #expect(
            subscription.latestTransactionID == "t9" && subscription.attempts == 0
                && subscription.expirationReason == .unspecified)
    }

    // MARK: renewalDue

    @Test("renewal due: live and auto-renewing charges; ended states do nothing", arguments: allStates)
    func renewalDueFromEveryState(_ state: Subscription.State) {
        var subscription = Self.inState(state)
        let decision = subscription.renewalDue(
            atMs: subscription.dueMs == 0 ? 31 * Self.day : subscription.dueMs, terms: Self.regular(),
            latenessMs: Self.day)
        switch state {
        case .active:
            #expect(decision == .charge(Self.regular(), periodStartMs: 30 * Self.day))
        case .inGracePeriod:
            #expect(decision == .charge(Self.regular(), periodStartMs: 30 * Self.day))
        case .inBillingRetry:
            // Recovered from billing retry, the new period starts now.
            #expect(decision == .charge(Self.regular(), periodStartMs: subscription.dueMs))
        case .expired, .revoked:
            #expect(decision == .nothing)
        }
    }

    @Test("renewal not yet due does nothing")
    func notDue() {
        var subscription = Self.bought()
        #expect(subscription.renewalDue(atMs: 29 * Self.day, terms: Self.regular(), latenessMs: nil) == .nothing)
        #expect(subscription.state == .active)
    }

    @Test("renewal due with auto-renew off expires it, CANCELLED", arguments: [Subscription.State.active])
    func dueWithAutoRenewOff(_ state: Subscription.State) throws {
        var subscription = Self.inState(state)
        #expect(try subscription.autoRenewSet(false) == .changed(endedNow: false))
        #expect(
            subscription.renewalDue(atMs: 30 * Self.day, terms: Self.regular(), latenessMs: nil) == .expire(.cancelled))
        #expect(subscription.state == .expired && subscription.dueMs == 0 && !subscription.willAutoRenew)
    }

    @Test("renewal due with the product gone expires it, PRODUCT_UNAVAILABLE")
    func dueWithProductGone() {
        var subscription = Self.bought()
        #expect(
            subscription.renewalDue(atMs: 30 * Self.day, terms: nil, latenessMs: nil) == .expire(.productUnavailable))
    }

    @Test("renewal due after the billing retry period expires it, BILLING_ERROR")
    func dueAfterRetry() {
        var subscription = Self.inState(.inBillingRetry)
        #expect(
            subscription.renewalDue(atMs: subscription.retryEndMs, terms: Self.regular(), latenessMs: nil)
                == .expire(.billingError))
    }

    @Test("a late renewal starts now; catching up starts at the period's end")
    func lateness() {
        var late = Self.bought()
        #expect(
            late.renewalDue(atMs: 40 * Self.day, terms: Self.regular(), latenessMs: Self.day)
                == .charge(Self.regular(), periodStartMs: 40 * Self.day))
        var catchingUp = Self.bought()
        #expect(
            catchingUp.renewalDue(atMs: 40 * Self.day, terms: Self.regular(), latenessMs: nil)
                == .charge(Self.regular(), periodStartMs: 30 * Self.day))
    }

    // MARK: renewed

    @Test("a renewal leaves auto-renew off when the buyer turned it off while the charge was in flight")
    func renewalRaceKeepsAutoRenewOff() throws {
        var subscription = Self.bought()
        guard case .charge = subscription.renewalDue(atMs: 30 * Self.day, terms: Self.regular(), latenessMs: nil) else {
            Issue.record("expected a charge")
            return
        }
        _ = try subscription.autoRenewSet(false)
        subscription.renewed(Self.paid("t2", expiresMs: 60 * Self.day))
        #expect(subscription.state == .active && subscription.periodsPaid == 2)
        #expect(!subscription.willAutoRenew)
        // The next period is not charged: it expires, CANCELLED.
        #expect(
            subscription.renewalDue(atMs: 60 * Self.day, terms: Self.regular(), latenessMs: nil) == .expire(.cancelled))
    }

    @Test("a renewal recovers grace and billing retry", arguments: [Subscription.State.inGracePeriod, .inBillingRetry])
    func renewalRecovers(_ state: Subscription.State) {
        var subscription = Self.inState(state)
        subscription.renewed(Self.paid("t2", expiresMs: 62 * Self.day))
        #expect(
            subscription.state == .active && subscription.attempts == 0 && subscription.graceEndMs == 0
                && subscription.retryEndMs == 0)
        #expect(subscription.dueMs == 62 * Self.day)
    }

    @Test("a renewal never changes the agreed price; a pending downgrade's price is the new one")
    func renewalKeepsAgreedPrice() {
        var subscription = Self.bought()
        subscription.renewed(Self.paid("t2", expiresMs: 60 * Self.day, regularPrice: "9.99"))
        #expect(subscription.acceptedPrice == "4.99")
        subscription.downgradeChosen(to: "pro.basic", price: "2.99", currency: "USD")
        subscription.renewed(Self.paid("t3", expiresMs: 90 * Self.day, regularPrice: "2.99", productID: "pro.basic"))
        #expect(
            subscription.productID == "pro.basic" && subscription.acceptedPrice == "2.99"
                && subscription.pendingProductID.isEmpty)
    }

    // MARK: prices and offers

    @Test("a price raised during an introductory offer needs consent when the offer ends")
    func priceRaisedDuringOffer() throws {
        var subscription = Self.bought(offerID: "introductory")
        #expect(
            subscription.acceptedPrice == "4.99" && subscription.offerID == "introductory"
                && subscription.offerPeriodsUsed == 1)
        let offer = RenewalTerms(
            productID: "pro.monthly", price: "0.99", currency: "USD", period: Self.month, offerID: "introductory")
        // The catalog price rises to 6.99 while the offer runs: the offer's periods are still charged at the offer's price.
        #expect(subscription.priceIncreasePending(regularPrice: "6.99", currency: "USD"))
        #expect(
            subscription.renewalDue(atMs: 30 * Self.day, terms: offer, latenessMs: nil)
                == .charge(offer, periodStartMs: 30 * Self.day))
        subscription.renewed(Self.paid("t2", expiresMs: 60 * Self.day, offerID: "introductory", regularPrice: "6.99"))
        #expect(subscription.acceptedPrice == "4.99" && subscription.offerPeriodsUsed == 2)
        // The offer is over: the regular 6.99 is above the agreed 4.99, so nothing is charged without consent.
        var unconsented = subscription
        #expect(
            unconsented.renewalDue(atMs: 60 * Self.day, terms: Self.regular("6.99"), latenessMs: nil)
                == .expire(.priceIncreaseNotAccepted))
        #expect(try subscription.priceConsented("6.99", currency: "USD"))
        #expect(!subscription.priceIncreasePending(regularPrice: "6.99", currency: "USD"))
        #expect(
            subscription.renewalDue(atMs: 60 * Self.day, terms: Self.regular("6.99"), latenessMs: nil)
                == .charge(Self.regular("6.99"), periodStartMs: 60 * Self.day))
    }

    @Test("a price lowered needs no consent; prices compare as money, not text")
    func priceLowered() {
        var subscription = Self.bought()
        #expect(!subscription.needsConsent(toRenewAt: Self.regular("3.99")))
        // A price that cannot be read in its currency is never charged as if it were agreed.
        #expect(subscription.needsConsent(toRenewAt: Self.regular("4.990")))
        subscription.acceptedPrice = "10.00"
        #expect(!subscription.needsConsent(toRenewAt: Self.regular("9.99")))
        #expect(subscription.needsConsent(toRenewAt: Self.regular("10.01")))
    }

    @Test("a price in another currency (the buyer moved storefront) always needs consent; consent agrees to it")
    func anotherCurrencyNeedsConsent() throws {
        var subscription = Self.bought()
        subscription.acceptedCurrency = "USD"
        let euros = RenewalTerms(
            productID: "pro.monthly", price: "0.99", currency: "EUR", period: Self.month, offerID: "")
        #expect(subscription.needsConsent(toRenewAt: euros), "lower in number, but not comparable")
        #expect(subscription.priceIncreasePending(regularPrice: "0.99", currency: "EUR"))
        #expect(try subscription.priceConsented("0.99", currency: "EUR"))
        #expect(subscription.acceptedPrice == "0.99" && subscription.acceptedCurrency == "EUR")
        #expect(!subscription.needsConsent(toRenewAt: euros))
        #expect(subscription.needsConsent(toRenewAt: Self.regular("0.99")), "and back to dollars asks again")
        // A subscription from before storefronts agreed in the renewal's currency: consenting to the same price
        // records the currency, and is no change.
        var legacy = Self.bought()
        #expect(legacy.acceptedCurrency == "")
        #expect(!legacy.needsConsent(toRenewAt: Self.regular("4.99")))
        #expect(try legacy.priceConsented("4.99", currency: "USD") == false)
        #expect(legacy.acceptedCurrency == "USD")
        // An offer's price in another currency needs consent as well.
        let offer = RenewalTerms(
            productID: "pro.monthly", price: "150", currency: "JPY", period: Self.month, offerID: "introductory")
        #expect(subscription.needsConsent(toRenewAt: offer))
        // A renewal of a subscription from before storefronts learns its agreed price's currency.
        var older = Self.bought()
        older.renewed(Self.paid("t2", expiresMs: 60 * Self.day))
        #expect(older.acceptedCurrency == "")
        var paid = Self.paid("t3", expiresMs: 90 * Self.day)
        paid.currency = "USD"
        older.renewed(paid)
        #expect(older.acceptedCurrency == "USD" && older.acceptedPrice == "4.99")
    }

    @Test("a pending downgrade renews at the price the buyer chose it at, and not above it without consent")
    func downgradeNeedsConsentOnlyAboveItsPrice() {
        var subscription = Self.bought()
        subscription.downgradeChosen(to: "pro.basic", price: "2.99", currency: "USD")
        #expect(
            !subscription.needsConsent(
                toRenewAt: RenewalTerms(
                    productID: "pro.basic", price: "2.99", currency: "USD", period: Self.month, offerID: "")))
        #expect(
            subscription.needsConsent(
                toRenewAt: RenewalTerms(
                    productID: "pro.basic", price: "3.49", currency: "USD", period: Self.month, offerID: "")))
        #expect(!subscription.priceIncreasePending(regularPrice: "2.99", currency: "USD"))
    }

    @Test("a subscription with no agreed price agrees to the first regular price it renews at")
    func legacyRowsGetAnAgreedPrice() {
        var subscription = Self.bought()
        subscription.acceptedPrice = ""
        #expect(!subscription.needsConsent(toRenewAt: Self.regular("9.99")))
        subscription.renewed(Self.paid("t2", expiresMs: 60 * Self.day, regularPrice: "4.99"))
        #expect(subscription.acceptedPrice == "4.99")
        #expect(subscription.needsConsent(toRenewAt: Self.regular("5.99")))
    }

    // MARK: renewalDeclined

    @Test("a declined renewal: grace, then billing retry, then BILLING_ERROR; auto-renew untouched")
    func declines() {
        var subscription = Self.bought()
        subscription.renewalDeclined(atMs: 30 * Self.day, policy: Self.policy)
        #expect(subscription.state == .inGracePeriod && subscription.attempts == 1 && subscription.willAutoRenew)
        #expect(subscription.graceEndMs == 33 * Self.day && subscription.retryEndMs == 60 * Self.day)
        #expect(subscription.dueMs == 31 * Self.day)
        subscription.renewalDeclined(atMs: 33 * Self.day, policy: Self.policy)
        #expect(subscription.state == .inBillingRetry && subscription.dueMs == 35 * Self.day)
        subscription.renewalDeclined(atMs: 60 * Self.day, policy: Self.policy)
        #expect(
            subscription.state == .expired && subscription.expirationReason == .billingError && subscription.dueMs == 0)
    }

    @Test("a decline of an ended subscription changes nothing", arguments: [Subscription.State.expired, .revoked])
    func declineEnded(_ state: Subscription.State) {
        var subscription = Self.inState(state)
        let before = subscription
        subscription.renewalDeclined(atMs: 40 * Self.day, policy: Self.policy)
        #expect(subscription == before)
    }

    // MARK: autoRenewSet, priceConsented, expiredNow

    @Test(
        "auto-renew off: ACTIVE runs to its end; grace and billing retry end now; ended ones refuse",
        arguments: allStates)
    func autoRenewOff(_ state: Subscription.State) throws {
        var subscription = Self.inState(state)
        switch state {
        case .active:
            #expect(try subscription.autoRenewSet(false) == .changed(endedNow: false))
            #expect(subscription.state == .active && !subscription.willAutoRenew)
            #expect(try subscription.autoRenewSet(false) == .unchanged)
            #expect(try subscription.autoRenewSet(true) == .changed(endedNow: false))
        case .inGracePeriod, .inBillingRetry:
            #expect(try subscription.autoRenewSet(false) == .changed(endedNow: true))
            #expect(subscription.state == .expired && subscription.expirationReason == .cancelled)
        case .expired, .revoked:
            #expect(throws: SubscriptionRefusal.self) { try subscription.autoRenewSet(true) }
        }
    }

    @Test("consent is refused once ended, a no-op when already agreed", arguments: allStates)
    func consent(_ state: Subscription.State) throws {
        var subscription = Self.inState(state)
        if subscription.isLive {
            #expect(try subscription.priceConsented("4.99", currency: "USD") == false)
            #expect(try subscription.priceConsented("5.99", currency: "USD") == true)
        } else {
            #expect(throws: SubscriptionRefusal.self) { try subscription.priceConsented("5.99", currency: "USD") }
        }
    }

    @Test("expiring now ends live subscriptions and leaves ended ones", arguments: allStates)
    func expireNow(_ state: Subscription.State) {
        var subscription = Self.inState(state)
        let wasLive = subscription.isLive
        subscription.expiredNow(atMs: 2 * Self.day, reason: .cancelled)
        if wasLive {
            #expect(
                subscription.state == .expired && subscription.expiresMs == 2 * Self.day
                    && !subscription.isEntitled(atMs: 2 * Self.day))
        } else {
            #expect(subscription.state == state)
        }
    }

    @Test(
        "a reinstated revocation restores a REVOKED subscription to its period's end, auto-renew off",
        arguments: allStates)
    func reinstated(_ state: Subscription.State) {
        var subscription = Self.inState(state)
        let before = subscription
        let changed = subscription.reinstated(atMs: 2 * Self.day)
        guard state == .revoked else {
            #expect(!changed && subscription == before, "only a revoked subscription is reinstated")
            return
        }
        #expect(changed && subscription.state == .active && !subscription.willAutoRenew)
        #expect(subscription.dueMs == 30 * Self.day && subscription.isEntitled(atMs: 29 * Self.day))
        // At its end it expires as a subscription turned off: nothing is charged.
        let decision = subscription.renewalDue(atMs: 30 * Self.day, terms: Self.regular(), latenessMs: nil)
        #expect(decision == .expire(.cancelled))

        // Reinstated after its period ended: EXPIRED, not entitled.
        var late = Self.inState(.revoked)
        let lateChanged = late.reinstated(atMs: 31 * Self.day)
        #expect(lateChanged)
        #expect(late.state == .expired && late.expirationReason == .cancelled && !late.isEntitled(atMs: 31 * Self.day))
    }
}
