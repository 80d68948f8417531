import KioskStoreCore
import Testing

/// Random event sequences against a plain model of what the buyer agreed to: whatever the order of
/// purchases, renewals in flight, declines, auto-renew changes, catalog price changes and consents, no
/// renewal is charged after the buyer turned auto-renew off and none at a regular price above the one
/// the buyer agreed to.
@Suite("Subscription lifecycle, random sequences")
struct SubscriptionPropertyTests {
    /// A small deterministic generator (SplitMix64), so a failing seed can be replayed.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    enum Step: CaseIterable {
        case purchase, purchaseWithOffer, renewalDue, chargeSucceeds, chargeDeclined, autoRenewOff, autoRenewOn,
            priceUp, priceDown,
            consent, advance, expireNow
    }

    @Test("no charge after auto-renew off, none above the agreed price", arguments: 0..<200)
    func randomSequences(seed: Int) throws {
        var random = SplitMix(state: UInt64(seed) &* 7919 &+ 1)
        let day: Int64 = 86_400_000
        let month = SubscriptionPeriod(iso8601: "P1M")!
        let policy = RetryPolicy(
            gracePeriod: SubscriptionPeriod(iso8601: "P3D"), billingRetryPeriod: SubscriptionPeriod(iso8601: "P20D")!,
            timeScale: 1)
        var now: Int64 = 0
        var catalogCents: Int64 = 499
        func price(_ cents: Int64) -> String { Money(minorUnits: cents, currency: "USD").decimalString }
        let offerPrice = "0.99"
        let offerPeriods = 2

        var subscription: Subscription?
        // The model: what the buyer agreed to, and whether they want renewals.
        var modelAgreedCents: Int64 = 0
        var modelWantsRenewal = false
        var inFlight: (RenewalTerms, Int64)?
        var serial = 0

        for _ in 0..<60 {
            let step = Step.allCases.randomElement(using: &random)!
            serial += 1
            switch step {
            case .purchase, .purchaseWithOffer:
                guard inFlight == nil, subscription.map({ !$0.isEntitled(atMs: now) }) ?? true else { continue }
                let offer = step == .purchaseWithOffer && subscription == nil
                let paid = PaidPeriod(
                    transactionID: "t\(serial)", productID: "pro", expiresMs: month.end(fromMs: now),
                    paymentMethod: "card",
                    offerID: offer ? "introductory" : "", regularPrice: price(catalogCents))
                var next =
                    subscription
                    ?? Subscription(
                        originalID: "o", accountID: "a", productID: "pro", paymentMethod: "card",
                        expiresMs: paid.expiresMs, latestTransactionID: paid.transactionID)
                next.purchased(paid)
                subscription = next
                modelAgreedCents = catalogCents
                modelWantsRenewal = true
            case .renewalDue:
                guard var current = subscription, inFlight == nil else { continue }
                now = max(now, current.dueMs)
                let regular = RenewalTerms(
                    productID: "pro", price: price(catalogCents), currency: "USD", period: month, offerID: "")
                let terms =
                    current.offerID == "introductory" && current.offerPeriodsUsed < offerPeriods
                    ? RenewalTerms(
                        productID: "pro", price: offerPrice, currency: "USD", period: month, offerID: "introductory")
                    : regular
                let decision = current.renewalDue(atMs: now, terms: terms, latenessMs: nil)
                if case .charge(let charged, let start) = decision {
                    #expect(
                        modelWantsRenewal, "seed \(seed): a renewal was charged after the buyer turned auto-renew off")
                    if charged.offerID.isEmpty {
                        let cents = Money(decimal: charged.price, currency: "USD")!.minorUnits
                        #expect(
                            cents <= modelAgreedCents,
                            "seed \(seed): charged \(charged.price) with \(price(modelAgreedCents)) agreed")
                    }
                    inFlight = (charged, start)
                }
                subscription = current
            case .chargeSucceeds:
                guard var current = subscription, let (terms, start) = inFlight else { continue }
                let wantedBefore = current.willAutoRenew
                current.renewed(
                    PaidPeriod(
                        transactionID: "t\(serial)", productID: terms.productID,
                        expiresMs: terms.period.end(fromMs: start),
                        paymentMethod: "card", offerID: terms.offerID, regularPrice: price(catalogCents)))
                #expect(current.willAutoRenew == wantedBefore, "seed \(seed): a renewal changed auto-renew")
                subscription = current
                inFlight = nil
            case .chargeDeclined:
                guard var current = subscription, inFlight != nil else { continue }
                let wantedBefore = current.willAutoRenew
                current.renewalDeclined(atMs: now, policy: policy)
                if current.isLive { #expect(current.willAutoRenew == wantedBefore) }
                subscription = current
                inFlight = nil
            case .autoRenewOff, .autoRenewOn:
                guard var current = subscription, current.isLive else { continue }
                _ = try current.autoRenewSet(step == .autoRenewOn)
                modelWantsRenewal = step == .autoRenewOn && current.isLive
                subscription = current
            case .priceUp:
                catalogCents += Int64.random(in: 1...300, using: &random)
            case .priceDown:
                catalogCents = max(1, catalogCents - Int64.random(in: 1...300, using: &random))
            case .consent:
                guard var current = subscription, current.isLive else { continue }
                _ = try current.priceConsented(price(catalogCents), currency: "USD")
                modelAgreedCents = catalogCents
                subscription = current
            case .advance:
                now += Int64.random(in: 1...40, using: &random) * day
            case .expireNow:
                guard var current = subscription, inFlight == nil else { continue }
                current.expiredNow(atMs: now, reason: .cancelled)
                if !current.isLive { modelWantsRenewal = false }
                subscription = current
            }
            if let current = subscription, !current.isLive {
                #expect(current.dueMs == 0, "seed \(seed): an ended subscription is still due")
                modelWantsRenewal = false
            }
        }
    }
}
