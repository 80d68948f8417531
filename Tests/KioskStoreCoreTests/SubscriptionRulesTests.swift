import KioskStoreCore
import Testing

/// The catalog's subscription rules on an in-memory ledger: renewal terms, price consent, group changes and upgrade prices.
@Suite("Subscription rules")
struct SubscriptionRulesTests {
    static let day: Int64 = 86_400_000
    static let month = SubscriptionPeriod(iso8601: "P1M")!

    static func product(_ id: String, price: String, level: UInt32, offer: OfferTerms? = nil) -> CatalogProduct {
        var product = CatalogProduct(
            id: id, type: .autoRenewableSubscription, title: id, price: price, currency: "USD",
            subscriptionPeriod: month, subscriptionGroup: "pro", groupLevel: level)
        product.introductoryOffer = offer
        return product
    }

    static let intro = OfferTerms(id: OfferTerms.introductoryID, price: "0.99", period: month, periods: 2)
    static func rules(proPrice: String = "9.99", basicPrice: String = "4.99") -> SubscriptionRules {
        SubscriptionRules(
            catalog: Catalog(
                bundleID: "b",
                products: [
                    product("pro", price: proPrice, level: 1),
                    product("basic", price: basicPrice, level: 2, offer: intro),
                    product("basic.yearly", price: "49.99", level: 2),
                    CatalogProduct(id: "sepia", type: .nonConsumable, title: "Sepia", price: "1.99", currency: "USD"),
                ]))
    }

    /// A ledger where account a1 bought `basic` at 0, paid until 30 days, at `price`.
    static func subscribed(price: String = "4.99", offerID: String = "") throws -> InMemoryLedger {
        let ledger = InMemoryLedger()
        ledger.createAccount(id: "a1")
        try ledger.write { db in
            let record = TransactionRecord(
                id: "t1", originalID: "t1", accountID: "a1", productID: "basic",
                productType: .autoRenewableSubscription,
                quantity: 1, state: .purchased, purchaseMs: 0, expiresMs: 30 * day, offerID: offerID, price: price,
                currency: "USD", paymentMethod: "card", paymentID: "p1", environment: .sandbox)
            try db.insertTransaction(record)
            try SubscriptionRules.paid(record, regularPrice: "4.99", nowMs: 0, db)
        }
        return ledger
    }

    @Test func renewalTermsFollowOffersAndPendingProducts() throws {
        let rules = Self.rules()
        var row = try #require(
            try Self.subscribed(offerID: OfferTerms.introductoryID).read { try $0.subscription(originalID: "t1") })
        #expect(
            rules.renewalTerms(row)?.price == "0.99", "one of two offer periods used: the next is at the offer's price")
        row.offerPeriodsUsed = 2
        #expect(rules.renewalTerms(row)?.price == "4.99" && rules.renewalTerms(row)?.offerID == "")
        row.downgradeChosen(to: "basic.yearly", price: "49.99", currency: "USD")
        #expect(rules.renewalTerms(row)?.productID == "basic.yearly" && rules.renewalTerms(row)?.price == "49.99")
        row.productID = "gone"
        row.pendingProductID = ""
        #expect(rules.renewalTerms(row) == nil, "a product no longer sold has no renewal")
    }

    @Test func aPriceRiseIsPendingUntilConsent() throws {
        var row = try #require(try Self.subscribed().read { try $0.subscription(originalID: "t1") })
        #expect(!Self.rules().priceIncreasePending(row))
        #expect(Self.rules(basicPrice: "5.99").priceIncreasePending(row))
        #expect(!Self.rules(basicPrice: "3.99").priceIncreasePending(row), "a lower price needs no consent")
        _ = try row.priceConsented("5.99", currency: "USD")
        #expect(!Self.rules(basicPrice: "5.99").priceIncreasePending(row))
    }

    @Test func buyingAnotherLevelOfTheGroup() throws {
        let ledger = try Self.subscribed()
        let rules = Self.rules()
        let pro = try #require(rules.catalog.product("pro"))
        let yearly = try #require(rules.catalog.product("basic.yearly"))
        let sepia = try #require(rules.catalog.product("sepia"))
        // Half way through the period: 9.99 less half of 4.99 (2.50, rounded half up).
        #expect(
            try ledger.write { try rules.groupChange($0, accountID: "a1", to: pro, nowMs: 15 * Self.day) }
                == .upgrade(price: "7.49"))
        #expect(
            try ledger.write { try rules.groupChange($0, accountID: "a2", to: pro, nowMs: 15 * Self.day) }
                == GroupChange.none)
        #expect(
            try ledger.write { try rules.groupChange($0, accountID: "a1", to: sepia, nowMs: 15 * Self.day) }
                == GroupChange.none)
        guard
            case .atRenewal(let current) = try ledger.write({
                try rules.groupChange($0, accountID: "a1", to: yearly, nowMs: Self.day)
            })
        else {
            Issue.record("a same-level product switches at renewal")
            return
        }
        #expect(current.id == "t1")
        #expect(try ledger.read { try $0.subscription(originalID: "t1") }?.pendingProductID == "basic.yearly")
        #expect(
            try ledger.write { try rules.groupChange($0, accountID: "a1", to: pro, nowMs: 31 * Self.day) }
                == GroupChange.none,
            "an expired subscription is not upgraded: the purchase is a new one")
    }

    @Test func anUpgradeEndsTheOldTransaction() throws {
        let ledger = try Self.subscribed()
        let rules = Self.rules()
        try ledger.write { db in
            let upgrade = TransactionRecord(
                id: "t2", originalID: "t1", accountID: "a1", productID: "pro", productType: .autoRenewableSubscription,
                quantity: 1, state: .purchased, purchaseMs: 15 * Self.day, expiresMs: 45 * Self.day, price: "7.49",
                currency: "USD", paymentMethod: "card", paymentID: "p2", environment: .sandbox)
            try db.insertTransaction(upgrade)
            try rules.bought(upgrade, nowMs: 15 * Self.day, db)
        }
        let old = try #require(try ledger.read { try $0.transaction(id: "t1") })
        #expect(old.revokedMs == 15 * Self.day && old.revocationReason == "upgraded to pro")
        let row = try #require(try ledger.read { try $0.subscription(originalID: "t1") })
        #expect(row.productID == "pro" && row.latestTransactionID == "t2" && row.state == .active)
        #expect(!rules.priceIncreasePending(row), "the agreed price is the one the buyer upgraded at")
    }

    @Test func onePaymentPerGroupAtATime() throws {
        let ledger = try Self.subscribed()
        let rules = Self.rules()
        try ledger.write { db in
            try db.insertIntent(
                PaymentIntent(
                    kind: .purchase, paymentID: "p9", transactionID: "t9", accountID: "a1", productID: "pro",
                    productType: .autoRenewableSubscription,
                    creditsPerUnit: 0, subscriptionPeriod: "P1M", quantity: 1, unitPrice: "9.99", currency: "USD",
                    paymentMethod: "card",
                    purchaseMs: 0, idempotencyKey: nil, requestHash: [], owner: "o1", createdMs: 0, attemptMs: 0),
                nowMs: 0)
        }
        let pending = try ledger.read { try $0.pendingIntentIDs(accountID: "a1", productIDs: ["pro"]) }
        #expect(pending.count == 1)
        #expect(try ledger.write { try rules.groupPaymentInFlight($0, accountID: "a1", productID: "basic.yearly") })
        #expect(
            !(try ledger.write {
                try rules.groupPaymentInFlight($0, accountID: "a1", productID: "basic", except: pending[0])
            }))
        #expect(!(try ledger.write { try rules.groupPaymentInFlight($0, accountID: "a1", productID: "sepia") }))
    }

    @Test func upgradePricesRoundInTheCurrencysMinorUnit() {
        #expect(
            SubscriptionRules.upgradePrice(
                newPrice: "4.99", oldPrice: "1.99", currency: "USD", periodStartMs: 0, periodEndMs: 100, nowMs: 0)
                == "3.00")
        #expect(
            SubscriptionRules.upgradePrice(
                newPrice: "1.00", oldPrice: "9.99", currency: "USD", periodStartMs: 0, periodEndMs: 100, nowMs: 10)
                == "0.00")
        #expect(
            SubscriptionRules.upgradePrice(
                newPrice: "3.000", oldPrice: "1.255", currency: "KWD", periodStartMs: 0, periodEndMs: 100, nowMs: 50)
                == "2.372")
        #expect(
            SubscriptionRules.upgradePrice(
                newPrice: "1000", oldPrice: "500", currency: "JPY", periodStartMs: 0, periodEndMs: 3, nowMs: 1) == "667"
        )
        #expect(
            SubscriptionRules.upgradePrice(
                newPrice: "4.99", oldPrice: "1.99", currency: "USD", periodStartMs: 5, periodEndMs: 5, nowMs: 5)
                == "4.99",
            "an empty period credits nothing")
    }

    @Test func theManualClockMovesOnlyWhenTold() {
        let clock = ManualClock(startMs: 1_000)
        #expect(clock.nowMs == 1_000)
        clock.advance(byMs: Self.day)
        #expect(clock.nowMs == 1_000 + Self.day)
        #expect(SystemClock().nowMs > 1_700_000_000_000)
    }
}
