import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskTesting
import NIOConcurrencyHelpers
import StripeDouble
import Testing

@testable import KioskStore
@testable import KioskStoreIntegrations

/// The store's money rules where the ledger, the processor and the wire meet: each was a defect where two
/// places decided one rule differently, and each is now decided by the domain's lifecycle
/// (KioskStoreCoreTests test the rules alone).
@Suite struct LifecycleDefectTests {
    static let day: Int64 = 86_400_000

    /// A processor whose renewal charges wait until the test lets them go, so a buyer can act while one is in flight.
    final class GatedRenewals: PaymentProcessor {
        private let simulated = SimulatedPaymentProcessor()
        private let state = NIOLockedValueBox<
            (
                arrived: CheckedContinuation<Void, Never>?, release: CheckedContinuation<Void, Never>?,
                arrivedEarly: Bool, released: Bool, renewals: Int
            )
        >((nil, nil, false, false, 0))
        var name: String { "gated" }
        var isSimulated: Bool { true }
        var renewals: Int { state.withLockedValue { $0.renewals } }

        func charge(_ request: PaymentRequest) async throws -> PaymentOutcome {
            guard request.isRenewal else { return await simulated.charge(request) }
            let arrived = state.withLockedValue { state in
                state.renewals += 1
                let waiter = state.arrived
                state.arrived = nil
                if waiter == nil { state.arrivedEarly = true }
                return waiter
            }
            arrived?.resume()
            await withCheckedContinuation { continuation in
                let go = state.withLockedValue { state in
                    if state.released { return true }
                    state.release = continuation
                    return false
                }
                if go { continuation.resume() }
            }
            return await simulated.charge(request)
        }
        func approve(_ request: PaymentRequest) async throws -> PaymentOutcome { await simulated.approve(request) }
        func lookup(_ request: PaymentRequest) async throws -> PaymentLookup { await simulated.lookup(request) }
        func refund(_ request: PaymentRequest, reason: String) async throws {}

        /// Returns once a renewal charge is waiting.
        func renewalArrived() async {
            await withCheckedContinuation { continuation in
                let already = state.withLockedValue { state in
                    if state.arrivedEarly { return true }
                    state.arrived = continuation
                    return false
                }
                if already { continuation.resume() }
            }
        }

        /// Lets every waiting and later renewal charge through.
        func release() {
            let waiter = state.withLockedValue { state in
                state.released = true
                let waiter = state.release
                state.release = nil
                return waiter
            }
            waiter?.resume()
        }
    }

    static func product(
        _ id: String, price: String, currency: String = "USD", intro: OfferTerms? = nil
    ) -> CatalogProduct {
        var product = CatalogProduct(
            id: id, type: .autoRenewableSubscription, title: id, price: price, currency: currency,
            subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"))
        product.introductoryOffer = intro
        return product
    }

    static func store(
        _ directory: String, clock: TestClock, processor: any PaymentProcessor, products: [CatalogProduct]
    ) throws -> Store {
        let catalog = Catalog(bundleID: "com.example.monkeys", products: products)
        let configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: catalog, paymentProcessor: processor,
            clock: clock
        ).onTestLedger()
        let store = try Store(configuration: configuration)
        try store.prepareToServe()
        return store
    }

    static func account(_ store: Store) throws -> AccountRecord {
        let (id, _) = try store.createAccount()
        return try #require(try store.ledger.account(id: id))
    }

    @Test func autoRenewTurnedOffWhileARenewalIsChargedStaysOff() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let gate = GatedRenewals()
        let store = try Self.store(
            directory, clock: clock, processor: gate, products: [Self.product("pro.monthly", price: "4.99")])
        let buyer = try Self.account(store)
        let bought = try await store.purchase(
            account: buyer, productID: "pro.monthly", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
        guard case .purchased(let first) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }
        clock.advance(byMs: first.expiresMs - clock.now)

        let renewing = Task { try await store.renewDueSubscriptions() }
        await gate.renewalArrived()
        // The buyer turns auto-renew off while the renewal's charge is at the processor.
        let status = try await store.setAutoRenew(account: buyer, originalID: first.id, false)
        #expect(!status.willAutoRenew)
        gate.release()
        #expect(try await renewing.value.renewed == 1)

        let row = try #require(try store.ledger.subscription(originalID: first.id))
        #expect(row.state == .active && row.periodsPaid == 2)
        #expect(!row.willAutoRenew, "the renewal's write turned auto-renew back on")
        // The period after is not charged: it expires, CANCELLED.
        clock.advance(byMs: row.expiresMs - clock.now)
        let next = try await store.renewDueSubscriptions()
        #expect(next.expired == 1 && next.renewed == 0)
        #expect(gate.renewals == 1)
        #expect(try store.ledger.subscription(originalID: first.id)?.expirationReason == .cancelled)
    }

    @Test func aPriceRaisedDuringAnIntroductoryOfferIsNotChargedWithoutConsent() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let payments = TestPaymentProcessor()
        let intro = OfferTerms(
            id: "introductory", price: "0.99", period: SubscriptionPeriod(iso8601: "P1M")!, periods: 2)
        let before = try Self.store(
            directory, clock: clock, processor: payments, products: [Self.product("plus", price: "4.99", intro: intro)])
        let buyer = try Self.account(before)
        let bought = try await before.purchase(
            account: buyer, productID: "plus", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil,
            offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
        guard case .purchased(let first) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }

        // The operator raises the price to 6.99 (a store restarted with the new catalog) while the offer runs.
        let store = try Self.store(
            directory, clock: clock, processor: payments, products: [Self.product("plus", price: "6.99", intro: intro)])
        #expect(try store.subscriptionStatuses(account: buyer).first?.priceIncreasePending == true)
        // The offer's second period is charged at the offer's price.
        clock.advance(byMs: first.expiresMs - clock.now)
        #expect(try await store.renewDueSubscriptions().renewed == 1)
        let afterOffer = try #require(try store.ledger.subscription(originalID: first.id))
        #expect(try store.ledger.transaction(id: afterOffer.latestTransactionID)?.price == "0.99")
        #expect(afterOffer.acceptedPrice == "4.99", "a renewal changed the price the buyer agreed to")
        // The offer is over: 6.99 was never agreed, so the subscription ends instead of charging it.
        clock.advance(byMs: afterOffer.expiresMs - clock.now)
        let report = try await store.renewDueSubscriptions()
        #expect(report.renewed == 0 && report.expired == 1)
        let ended = try #require(try store.ledger.subscription(originalID: first.id))
        #expect(ended.state == .expired && ended.expirationReason == .priceIncreaseNotAccepted)
        #expect(payments.renewalChargeCount == 1)
    }

    @Test func anAskToBuyApprovedAfterAPriceRiseAgreesToThePriceAskedFor() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let payments = TestPaymentProcessor()
        let before = try Self.store(
            directory, clock: clock, processor: payments, products: [Self.product("pro", price: "4.99")])
        let child = try Self.account(before)
        let asked = try await before.purchase(
            account: child, productID: "pro", quantity: 1, paymentMethod: "test-ask", idempotencyKey: nil)
        guard case .deferred(let deferred) = asked.result else {
            Issue.record("not deferred: \(asked.result)")
            return
        }
        let store = try Self.store(
            directory, clock: clock, processor: payments, products: [Self.product("pro", price: "6.99")])
        let approved = try await store.approve(transactionID: deferred.id)
        #expect(approved.price == "4.99", "charged at the price asked for")
        let row = try #require(try store.ledger.subscription(originalID: approved.originalID))
        #expect(row.acceptedPrice == "4.99")
        #expect(try store.subscriptionStatuses(account: child).first?.priceIncreasePending == true)
        clock.advance(byMs: row.expiresMs - clock.now)
        let report = try await store.renewDueSubscriptions()
        #expect(report.renewed == 0 && report.expired == 1, "6.99 was charged without consent")
    }

    /// A catalog price Stripe cannot take (1.255 KWD: Stripe takes three-decimal currencies in whole hundredths) is
    /// refused before the store serves, naming the product and the field, not at each purchase; the simulated
    /// processor takes it.
    @Test func aPriceStripeCannotChargeIsRefusedBeforeServing() async throws {
        let stripe = StripePaymentProcessor(secretKey: "sk_test_unused", baseURL: "http://127.0.0.1:9")
        let book = CatalogProduct(
            id: "book.kw", type: .nonConsumable, title: "Book", price: "1.255", currency: "KWD", subscriptionPeriod: nil
        )
        let offer = OfferTerms(
            id: "introductory", price: "0.505", period: SubscriptionPeriod(iso8601: "P1M")!, periods: 1)
        // Another storefront's price is checked as the default one is.
        var usBook = book
        usBook.price = "2.99"
        usBook.currency = "USD"
        usBook.storefrontPrices = ["KWT": StorefrontPrice(price: "1.255", currency: "KWD")]
        for (products, named) in [
            ([book], "book.kw price 1.255 KWD"),
            ([usBook], "book.kw price 1.255 KWD (storefront KWT)"),
            (
                [Self.product("plus.kw", price: "2.500", currency: "KWD", intro: offer)],
                "plus.kw offer introductory 0.505"
            ),
        ] {
            let directory = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let refused = #expect(throws: StoreError.self) {
                try Self.store(directory, clock: TestClock(), processor: stripe, products: products)
            }
            #expect(refused?.kind == .invalidRequest)
            #expect(refused?.message.contains(named) == true, "\(refused?.message ?? "")")
            #expect(refused?.message.contains("whole hundredths") == true)
        }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try Self.store(directory, clock: TestClock(), processor: TestPaymentProcessor(), products: [book])
        let chargeable = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: chargeable) }
        var whole = book
        whole.price = "1.250"
        _ = try Self.store(chargeable, clock: TestClock(), processor: stripe, products: [whole])
    }

    /// A three-decimal and a zero-decimal price go to Stripe in the units Stripe counts them in, and their refunds
    /// give back exactly that: 1.250 KWD is 1250 fils, 500 JPY is 500 yen.
    @Test func kwdAndJPYAreChargedAndRefundedInStripesUnits() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let stripe = StripePaymentProcessor(
            secretKey: double.secretKey, baseURL: double.baseURL, requestTimeout: .seconds(5), maxRetries: 1,
            retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Self.store(
            directory, clock: TestClock(), processor: stripe,
            products: [
                CatalogProduct(
                    id: "book.kw", type: .nonConsumable, title: "Book", price: "1.250", currency: "KWD",
                    subscriptionPeriod: nil),
                CatalogProduct(
                    id: "book.jp", type: .nonConsumable, title: "Book", price: "500", currency: "JPY",
                    subscriptionPeriod: nil),
            ])
        let buyer = try Self.account(store)
        for (product, amount, currency) in [("book.kw", Int64(1250), "kwd"), ("book.jp", Int64(500), "jpy")] {
            let bought = try await store.purchase(
                account: buyer, productID: product, quantity: 1, paymentMethod: "pm_card_visa",
                idempotencyKey: "buy-\(product)")
            guard case .purchased(let record) = bought.result else {
                Issue.record("\(product) not purchased: \(bought.result)")
                continue
            }
            let charged = try #require(double.paymentIntents(forPaymentID: record.paymentID ?? "").first)
            #expect(charged.amount == amount && charged.currency == currency, "\(product): \(charged)")
            _ = try await store.refund(transactionID: record.id, reason: "asked")
            let refunded = try #require(double.paymentIntents(forPaymentID: record.paymentID ?? "").first)
            #expect(refunded.amountRefunded == amount, "\(product): \(refunded)")
        }
        try await double.shutdown()
    }

    @Test func aFreeTrialIsRefundedUnderStripeWithoutAskingStripe() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let stripe = StripePaymentProcessor(
            secretKey: double.secretKey, baseURL: double.baseURL, requestTimeout: .seconds(5), maxRetries: 1,
            retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let trial = OfferTerms(id: "introductory", price: "0", period: SubscriptionPeriod(iso8601: "P1W")!, periods: 1)
        let store = try Self.store(
            directory, clock: TestClock(), processor: stripe,
            products: [Self.product("plus", price: "2.99", intro: trial)])
        let buyer = try Self.account(store)
        let bought = try await store.purchase(
            account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil,
            offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
        guard case .purchased(let free) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }
        #expect(free.price == "0")
        let revocation = try await store.refund(transactionID: free.id, reason: "trial revoked")
        #expect(revocation.transactionID == free.id)
        #expect(try store.ledger.transaction(id: free.id)?.revokedMs != 0)
        #expect(double.refundCount == 0)
        try await double.shutdown()
    }

    @Test func aThreeDecimalPriceIsBoughtInFils() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let payments = TestPaymentProcessor()
        let catalog = Catalog(
            bundleID: "com.example.monkeys",
            products: [
                CatalogProduct(
                    id: "book.kw", type: .nonConsumable, title: "Book", price: "1.255", currency: "KWD",
                    subscriptionPeriod: nil)
            ])
        let store = try Store(
            configuration: try StoreConfiguration(
                dataDirectory: directory, catalog: catalog, paymentProcessor: payments
            )
            .onTestLedger())
        try store.prepareToServe()
        let buyer = try Self.account(store)
        let bought = try await store.purchase(
            account: buyer, productID: "book.kw", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
        guard case .purchased(let record) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }
        #expect(record.price == "1.255" && record.currency == "KWD")
        #expect(payments.chargeCount == 1)
        #expect(
            StripeAmount.apiAmount(
                PaymentRequest(
                    paymentID: "p", accountID: "a", productID: "book.kw", quantity: 2, unitPrice: "1.255",
                    currency: "KWD", paymentMethod: "pm_card_visa")) == 2510)
        // Stripe takes three-decimal currencies in whole hundredths only: 1.255 KWD alone cannot go to Stripe.
        #expect(
            StripeAmount.apiAmount(
                PaymentRequest(
                    paymentID: "p", accountID: "a", productID: "book.kw", quantity: 1, unitPrice: "1.255",
                    currency: "KWD", paymentMethod: "pm_card_visa")) == nil)
        #expect(
            StripeAmount.apiAmount(
                PaymentRequest(
                    paymentID: "p", accountID: "a", productID: "x", quantity: 1, unitPrice: "500",
                    currency: "JPY", paymentMethod: "pm_card_visa")) == 500)
        #expect(
            StripeAmount.apiAmount(
                PaymentRequest(
                    paymentID: "p", accountID: "a", productID: "x", quantity: 1, unitPrice: "4.99",
                    currency: "USD", paymentMethod: "pm_card_visa")) == 499)
    }

    @Test func oversizedFieldsAreRefusedBeforeAnythingIsWritten() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let rows = {
                try fixture.store.ledger.backend.read { db in
                    (
                        try db.value(Int64.self, "SELECT COUNT(*) FROM transactions") ?? -1,
                        try db.value(Int64.self, "SELECT COUNT(*) FROM payment_intents") ?? -1
                    )
                }
            }
            let huge = String(repeating: "x", count: FieldLimits.paymentMethod + 1)
            for _ in 0..<3 {
                let error = await #expect(throws: RPCError.self) {
                    try await fixture.buy("filter.sepia", method: huge, token: token)
                }
                #expect(error?.code == .invalidArgument)
                #expect(error?.message.contains("payment_method") == true)
            }
            let key = String(repeating: "k", count: FieldLimits.idempotencyKey + 1)
            await #expect(throws: RPCError.self) { try await fixture.buy("filter.sepia", token: token, key: key) }
            let refund = StoreV1.RequestRefundRequest(
                transactionID: "t", reason: String(repeating: "r", count: FieldLimits.reason + 1))
            let refused = await #expect(throws: RPCError.self) {
                try await fixture.call("RequestRefund", refund, as: StoreV1.RefundRequestStatus.self, token: token)
            }
            #expect(refused?.code == .invalidArgument)
            #expect(try rows() == (0, 0), "a refused request wrote to the ledger")
            // At the limit it is an ordinary (declined) purchase.
            let atLimit = String(repeating: "x", count: FieldLimits.paymentMethod)
            let declined = try await fixture.buy("filter.sepia", method: atLimit, token: token)
            #expect(declined.transaction?.state == .failed)
            let after = try rows()
            #expect(after.1 == 1, "the declined purchase is its closed intent: \(after)")
        }
    }

    @Test func pagesReadOnlyTheColumnsTheySend() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Self.store(
            directory, clock: TestClock(), processor: TestPaymentProcessor(),
            products: [Self.product("pro", price: "4.99")])
        let buyer = try Self.account(store)
        let method = "test-card:4242424242424242" + String(repeating: "0", count: FieldLimits.paymentMethod - 26)
        let bought = try await store.purchase(
            account: buyer, productID: "pro", quantity: 1, paymentMethod: method, idempotencyKey: nil)
        guard case .purchased(let record) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }
        #expect(try store.ledger.transaction(id: record.id)?.paymentMethod == method)
        let page = try await store.ledger.page(.history, accountID: buyer.id, pageSize: 10, pageToken: "")
        #expect(page.transactions.map(\.id) == [record.id])
        #expect(page.transactions.first?.paymentMethod == "", "a page read the payment method it never sends")
        #expect(!TransactionRecord.pageColumns.contains("payment_method"))
    }

    @Test func theLedgerIsTheOwnersOnlyWhateverTheUmask() throws {
        guard !TestLedger.isPostgres else { return }
        let directory = temporaryDirectory() + "/data"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let old = umask(0o022)
        defer { umask(old) }
        let ledger = try Ledger(directory: directory)
        _ = try ledger.backend.read { db in try db.value(Int64.self, "SELECT 1", []) }
        func mode(_ path: String) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber)?.intValue ?? -1
        }
        #expect(try mode(directory) == 0o700)
        let file = directory + "/" + Ledger.fileName
        #expect(try mode(file) == 0o600)
        for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: file + suffix) {
            #expect(try mode(file + suffix) == 0o600)
        }
    }
}
