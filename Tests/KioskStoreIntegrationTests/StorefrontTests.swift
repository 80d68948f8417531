import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskTesting
import KioskWire
import Testing

@testable import KioskStore

/// Storefronts: the catalog prices products per storefront; an account buys in its own, and its transactions,
/// receipts and events say which storefront and currency. A storefront change leaves the period paid alone and
/// renews in the new storefront's price, with consent when that is higher or in another currency. The clock is
/// driven; the RPC test serves the store on 127.0.0.1.
@Suite(.timeLimit(.minutes(5))) struct StorefrontTests {
    static let catalog: Catalog = {
        var pro = CatalogProduct(
            id: "pro.monthly", type: .autoRenewableSubscription, title: "Pro", price: "4.99", currency: "USD",
            subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"), subscriptionGroup: "pro")
        pro.introductoryOffer = OfferTerms(
            id: OfferTerms.introductoryID, price: "0.99", period: SubscriptionPeriod(iso8601: "P1M")!, periods: 1)
        pro.storefrontPrices = [
            "FRA": StorefrontPrice(price: "5.49", currency: "EUR", offerPrices: ["introductory": "1.09"]),
            "ECU": StorefrontPrice(price: "3.99", currency: "USD", offerPrices: ["introductory": "0.79"]),
            "PRI": StorefrontPrice(price: "5.99", currency: "USD", offerPrices: ["introductory": "0.99"]),
            "JPN": StorefrontPrice(price: "750", currency: "JPY", offerPrices: ["introductory": "150"]),
        ]
        var sepia = CatalogProduct(
            id: "filter.sepia", type: .nonConsumable, title: "Sepia", price: "2.99", currency: "USD")
        sepia.storefrontPrices = [
            "FRA": StorefrontPrice(price: "3.49", currency: "EUR"),
            "JPN": StorefrontPrice(price: "450", currency: "JPY"),
            "ECU": StorefrontPrice(price: "1.99", currency: "USD"),
        ]
        let credits = CatalogProduct(
            id: "credits.5", type: .consumable, title: "5 credits", price: "0.99", currency: "USD", credits: 5,
            maxQuantity: 10)
        return Catalog(
            bundleID: "com.example.monkeys", products: [pro, sepia, credits],
            entitlements: [CatalogEntitlement(id: "pro", title: "Pro", productIDs: ["pro.monthly"])])
    }()

    static func account(_ f: EntitlementTests.Fixture, _ storefront: String = "") throws -> AccountRecord {
        let (id, _) = try f.store.createAccount(storefront: storefront)
        return try #require(try f.store.ledger.account(id: id))
    }

    static func status(
        _ f: EntitlementTests.Fixture, _ account: AccountRecord, _ originalID: String
    ) throws
        -> StoreV1.SubscriptionStatus
    {
        try #require(try f.store.subscriptionStatuses(account: account, originalID: originalID).first)
    }

    @Test func aBuyerInAnotherStorefrontSeesAndPaysItsPrice() async throws {
        try await SupportToolTests.withStore(catalog: Self.catalog) { f in
            let french = try Self.account(f, "FRA")
            #expect(french.storefront == "FRA")
            #expect(try Self.account(f).storefront == "USA", "no storefront given: the catalog's default")

            // Listed in the buyer's storefront; a storefront the catalog does not price pays the default price.
            let listed = f.store.products(ids: ["filter.sepia", "credits.5"], storefront: "FRA").found
            #expect(listed.map { "\($0.price) \($0.currency)" } == ["3.49 EUR", "0.99 USD"])
            #expect(f.store.products(ids: ["filter.sepia"], storefront: "DEU").found.first?.price == "2.99")

            // Charged there: the transaction, its receipt and its PURCHASED event say so.
            let sepia = try await f.buy(french, "filter.sepia")
            #expect(sepia.price == "3.49" && sepia.currency == "EUR" && sepia.storefront == "FRA")
            let receipt = try #require(sepia.receipt)
            let payload = try #require(try await f.store.verifyReceipt(receipt).check.payload)
            #expect(payload.storefront == "FRA" && payload.currency == "EUR")
            let purchased = try await f.store.ledger.events(after: 0, accountID: french.id, types: [.purchased])
            #expect(purchased.map { "\($0.storefront) \($0.currency)" } == ["FRA EUR"])
            #expect(sepia.message.storefront == "FRA")

            // A yen price has no decimals; the introductory offer has its own price per storefront.
            let japanese = try Self.account(f, "JPN")
            let trial = try await f.store.purchase(
                account: japanese, productID: "pro.monthly", quantity: 1, paymentMethod: goodCard,
                idempotencyKey: nil, offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
            guard case .purchased(let first) = trial.result else {
                Issue.record("not purchased: \(trial.result)")
                return
            }
            #expect(first.price == "150" && first.currency == "JPY" && first.offerID == "introductory")
            let status = try Self.status(f, japanese, first.id)
            #expect(status.renewalPrice == "750" && status.currency == "JPY" && status.storefront == "JPN")
            #expect(!status.priceIncreasePending)

            // Malformed storefronts are refused, and nothing is created.
            for bad in ["fr", "FRAN", "fra", "F1A"] {
                #expect(throws: StoreError.self) { _ = try f.store.createAccount(storefront: bad) }
                await #expect(throws: StoreError.self) { _ = try await f.store.setStorefront(account: french, to: bad) }
            }
            #expect(try f.store.ledger.account(id: french.id)?.storefront == "FRA")
        }
    }

    /// Moves a subscriber from the USA (4.99 USD) to `storefront`, then lets the period end: what the renewal does.
    func moveThenRenew(
        to storefront: String, consent: Bool,
        _ check: (EntitlementTests.Fixture, TransactionRecord, Subscription)
            async throws -> Void
    ) async throws {
        try await SupportToolTests.withStore(catalog: Self.catalog) { f in
            let buyer = try Self.account(f)
            let first = try await f.buy(buyer, "pro.monthly")
            #expect(first.price == "4.99" && first.currency == "USD" && first.storefront == "USA")
            let moved = try await f.store.setStorefront(account: buyer, to: storefront)
            #expect(moved.storefront == storefront)
            // The period paid is untouched.
            let row = try #require(try f.store.ledger.subscription(originalID: first.id))
            #expect(row.expiresMs == first.expiresMs && row.storefront == storefront && row.acceptedPrice == "4.99")
            let changed = try await f.store.ledger.events(after: 0, accountID: buyer.id, types: [.storefrontChanged])
            #expect(changed.map { "\($0.storefront) \($0.reason)" } == ["\(storefront) from USA"])
            if consent {
                _ = try await f.store.consentToPriceIncrease(account: buyer, originalID: first.id)
            }
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            _ = try await f.store.renewDueSubscriptions()
            try await check(f, first, try #require(try f.store.ledger.subscription(originalID: first.id)))
        }
    }

    @Test func anotherCurrencyNeedsConsentOrTheSubscriptionEndsWithItsPeriod() async throws {
        try await moveThenRenew(to: "FRA", consent: false) { f, first, row async throws in
            #expect(row.state == .expired && row.expirationReason == .priceIncreaseNotAccepted)
            #expect(try f.store.ledger.transactions(accountID: first.accountID).count == 1, "nothing charged")
        }
    }

    @Test func withConsentItRenewsInTheNewStorefrontsPriceAndCurrency() async throws {
        try await moveThenRenew(to: "FRA", consent: true) { f, first, row async throws in
            #expect(row.state == .active && row.acceptedPrice == "5.49" && row.acceptedCurrency == "EUR")
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.id != first.id && renewal.originalID == first.id)
            #expect(renewal.price == "5.49" && renewal.currency == "EUR" && renewal.storefront == "FRA")
            let events = try await f.store.ledger.events(
                after: 0, accountID: first.accountID, types: [.priceChanged, .renewed])
            #expect(
                events.map { "\($0.type.shortName) \($0.storefront) \($0.currency)" } == [
                    "PRICE_CHANGED FRA EUR", "RENEWED FRA EUR",
                ])
            #expect(events.first?.price == "5.49")
        }
    }

    @Test func aLowerPriceInTheSameCurrencyRenewsWithoutAsking() async throws {
        try await moveThenRenew(to: "ECU", consent: false) { f, first, row async throws in
            #expect(row.state == .active)
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.price == "3.99" && renewal.currency == "USD" && renewal.storefront == "ECU")
        }
    }

    @Test func aHigherPriceInTheSameCurrencyNeedsConsent() async throws {
        try await moveThenRenew(to: "PRI", consent: false) { f, first, row async throws in
            #expect(row.state == .expired && row.expirationReason == .priceIncreaseNotAccepted)
        }
        try await moveThenRenew(to: "PRI", consent: true) { f, first, row async throws in
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.price == "5.99" && renewal.storefront == "PRI")
        }
    }

    @Test func theStatusShowsThePendingPriceBeforeTheRenewal() async throws {
        try await SupportToolTests.withStore(catalog: Self.catalog) { f in
            let buyer = try Self.account(f)
            let first = try await f.buy(buyer, "pro.monthly")
            #expect(!(try Self.status(f, buyer, first.id)).priceIncreasePending)
            _ = try await f.store.setStorefront(account: buyer, to: "FRA")
            let status = try Self.status(f, buyer, first.id)
            #expect(status.priceIncreasePending && status.renewalPrice == "5.49" && status.currency == "EUR")
            #expect(status.storefront == "FRA" && status.expiresDateMs == first.expiresMs)
            // Back home before the renewal: nothing to agree to.
            _ = try await f.store.setStorefront(
                account: try #require(try f.store.ledger.account(id: buyer.id)), to: "USA")
            #expect(!(try Self.status(f, buyer, first.id)).priceIncreasePending)
            // The same storefront again changes nothing and records nothing.
            _ = try await f.store.setStorefront(account: buyer, to: "USA")
            #expect(
                try await f.store.ledger.events(after: 0, accountID: buyer.id, types: [.storefrontChanged]).count == 2)
        }
    }

    @Test func aFreeTrialCreditsNothingToAnUpgradeAfterAMove() async throws {
        var basic = CatalogProduct(
            id: "basic.monthly", type: .autoRenewableSubscription, title: "Basic", price: "1.99", currency: "USD",
            subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"), subscriptionGroup: "pro", groupLevel: 2)
        basic.introductoryOffer = OfferTerms(
            id: OfferTerms.introductoryID, price: "0", period: SubscriptionPeriod(iso8601: "P1M")!, periods: 1)
        basic.storefrontPrices = ["FRA": StorefrontPrice(price: "2.29", currency: "EUR")]
        let catalog = Catalog(bundleID: "com.example.monkeys", products: Self.catalog.products + [basic])
        try await SupportToolTests.withStore(catalog: catalog) { f in
            let buyer = try Self.account(f)
            let trial = try await f.store.purchase(
                account: buyer, productID: "basic.monthly", quantity: 1, paymentMethod: goodCard,
                idempotencyKey: nil, offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
            guard case .purchased(let first) = trial.result, Money.isZero(first.price) else {
                Issue.record("no free trial: \(trial.result)")
                return
            }
            _ = try await f.store.setStorefront(account: buyer, to: "FRA")
            f.clock.advance(byMs: 86_400_000)
            let upgrade = try await f.buy(try #require(try f.store.ledger.account(id: buyer.id)), "pro.monthly")
            #expect(upgrade.currency == "EUR" && upgrade.price == "5.49", "nothing paid, nothing credited")
        }
    }

    @Test func anOfferRenewalInAnotherCurrencyNeedsConsentToo() async throws {
        var pro = try #require(Self.catalog.product("pro.monthly"))
        pro.introductoryOffer = OfferTerms(
            id: OfferTerms.introductoryID, price: "0.99", period: SubscriptionPeriod(iso8601: "P1M")!, periods: 3)
        let catalog = Catalog(bundleID: "com.example.monkeys", products: [pro])
        try await SupportToolTests.withStore(catalog: catalog) { f in
            let buyer = try Self.account(f)
            let trial = try await f.store.purchase(
                account: buyer, productID: "pro.monthly", quantity: 1, paymentMethod: goodCard,
                idempotencyKey: nil, offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
            guard case .purchased(let first) = trial.result else {
                Issue.record("not purchased: \(trial.result)")
                return
            }
            _ = try await f.store.setStorefront(account: buyer, to: "JPN")
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            _ = try await f.store.renewDueSubscriptions()
            let row = try #require(try f.store.ledger.subscription(originalID: first.id))
            #expect(row.state == .expired && row.expirationReason == .priceIncreaseNotAccepted)
            #expect(try f.store.ledger.transactions(accountID: buyer.id).count == 1, "no yen charged unasked")
        }
    }

    @Test func anUpgradeAfterAMoveCreditsTheUnusedPartInTheNewCurrency() async throws {
        var basic = CatalogProduct(
            id: "basic.monthly", type: .autoRenewableSubscription, title: "Basic", price: "1.99", currency: "USD",
            subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"), subscriptionGroup: "pro", groupLevel: 2)
        basic.storefrontPrices = ["FRA": StorefrontPrice(price: "2.29", currency: "EUR")]
        let catalog = Catalog(bundleID: "com.example.monkeys", products: Self.catalog.products + [basic])
        try await SupportToolTests.withStore(catalog: catalog) { f in
            let buyer = try Self.account(f)
            let first = try await f.buy(buyer, "basic.monthly")
            _ = try await f.store.setStorefront(account: buyer, to: "FRA")
            // Half the period used: charged 5.49 EUR less half of basic's 2.29 EUR (1.15, rounded half up).
            f.clock.advance(byMs: (first.expiresMs - first.periodStartMs) / 2)
            let upgrade = try await f.buy(try #require(try f.store.ledger.account(id: buyer.id)), "pro.monthly")
            #expect(upgrade.currency == "EUR" && upgrade.price == "4.34" && upgrade.storefront == "FRA")
        }
    }

    @Test func aDiscountedCodeIsRefusedInAnotherCurrencyAndKeptForItsOwn() async throws {
        try await SupportToolTests.withStore(catalog: Self.catalog) { f in
            let made = try await f.store.createOfferCodes(
                batchID: "sepia-half", productID: "filter.sepia", count: 1, price: "1.49")
            let french = try Self.account(f, "FRA")
            let refused = try await f.store.redeemOfferCode(
                account: french, code: made.codes[0], paymentMethod: goodCard, idempotencyKey: UUID().uuidString)
            guard case .failed(let failure) = refused.result else {
                Issue.record("redeemed in EUR: \(refused.result)")
                return
            }
            #expect(failure.reason == "offer_code_storefront")
            // Not used up: a buyer paying in USD redeems it.
            let american = try Self.account(f)
            let kept = try await f.store.redeemOfferCode(
                account: american, code: made.codes[0], paymentMethod: goodCard, idempotencyKey: UUID().uuidString)
            guard case .purchased(let record) = kept.result else {
                Issue.record("not redeemed: \(kept.result)")
                return
            }
            #expect(record.price == "1.49" && record.currency == "USD")
            // A free code is free in every storefront.
            let free = try await f.store.createOfferCodes(batchID: "sepia-free", productID: "filter.sepia", count: 1)
            let gift = try await f.store.redeemOfferCode(
                account: french, code: free.codes[0], idempotencyKey: UUID().uuidString)
            guard case .purchased(let given) = gift.result else {
                Issue.record("not redeemed: \(gift.result)")
                return
            }
            #expect(given.currency == "EUR" && given.storefront == "FRA" && Money.isZero(given.price))
            // A code never costs more than the regular price where the buyer is: 1.99 USD in ECU, not the code's 2.49.
            let dear = try await f.store.createOfferCodes(
                batchID: "sepia-dear", productID: "filter.sepia", count: 1, price: "2.49")
            let ecuadorian = try Self.account(f, "ECU")
            let capped = try await f.store.redeemOfferCode(
                account: ecuadorian, code: dear.codes[0], paymentMethod: goodCard, idempotencyKey: UUID().uuidString)
            guard case .purchased(let cheap) = capped.result else {
                Issue.record("not redeemed: \(capped.result)")
                return
            }
            #expect(cheap.price == "1.99" && cheap.currency == "USD" && cheap.storefront == "ECU")
        }
    }

    @Test func overRPCProductsFollowTheCallersStorefrontAndSetStorefrontMovesIt() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: Self.catalog, paymentProcessor: SimulatedPaymentProcessor(),
            clock: TestClock()
        ).onTestLedger()
        let server = try StoreServer(store: configuration)
        try await server.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(server.port))
        func call<Request: WireMessage, Response: WireMessage>(
            _ method: String, _ request: Request, _ response: Response.Type, token: String?
        ) async throws -> Response {
            var metadata = Metadata()
            if let token { metadata.add("authorization", "Bearer \(token)") }
            return try await client.unary(
                "/kiosk.store.v1.Store/\(method)", request: request, response: response,
                options: CallOptions(timeout: .seconds(20), metadata: metadata))
        }
        func list(_ storefront: String = "", token: String?) async throws -> StoreV1.ListProductsResponse {
            try await call(
                "ListProducts", StoreV1.ListProductsRequest(productIDs: ["filter.sepia"], storefront: storefront),
                StoreV1.ListProductsResponse.self, token: token)
        }
        do {
            let token = try server.store.createAccount(storefront: "JPN").token
            let anonymous = try await list(token: nil)
            #expect(anonymous.storefront == "USA" && anonymous.products.first?.currency == "USD")
            let mine = try await list(token: token)
            #expect(mine.storefront == "JPN" && mine.products.first?.price == "450")
            #expect(try await list("FRA", token: token).products.first?.price == "3.49")
            let account = try await call("GetAccount", StoreV1.GetAccountRequest(), StoreV1.Account.self, token: token)
            #expect(account.storefront == "JPN")
            let moved = try await call(
                "SetStorefront", StoreV1.SetStorefrontRequest(storefront: "FRA"), StoreV1.Account.self, token: token)
            #expect(moved.storefront == "FRA")
            #expect(try await list(token: token).products.first?.currency == "EUR")
            // Refused: a malformed storefront, a token that is not valid, a call without an account.
            await #expect(throws: RPCError.self) {
                _ = try await call(
                    "SetStorefront", StoreV1.SetStorefrontRequest(storefront: "france"), StoreV1.Account.self,
                    token: token)
            }
            await #expect(throws: RPCError.self) { _ = try await list("fr", token: nil) }
            await #expect(throws: RPCError.self) { _ = try await list(token: "kiosk_nonsense") }
            await #expect(throws: RPCError.self) {
                _ = try await call(
                    "SetStorefront", StoreV1.SetStorefrontRequest(storefront: "FRA"), StoreV1.Account.self, token: nil)
            }
        } catch {
            await client.close()
            await server.shutdown()
            throw error
        }
        await client.close()
        await server.shutdown()
    }
}
