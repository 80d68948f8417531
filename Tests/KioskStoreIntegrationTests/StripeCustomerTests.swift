import AsyncHTTPClient
import Foundation
import Kiosk
import KioskAPI
import KioskStoreCore
import KioskStoreIntegrations
import KioskStoreTestSupport
import NIOCore
import NIOFoundationCompat
import StripeDouble
import Testing

@testable import KioskStore

/// Renewals as Stripe takes them: a Customer per account, the first subscription payment saving its method
/// (`setup_future_usage=off_session`), renewals charging that saved method off-session, and a buyer replacing it.
@Suite(.timeLimit(.minutes(2))) struct StripeCustomerTests {
    static func stripe(_ double: StripeDouble) -> StripePaymentProcessor {
        StripePaymentProcessor(
            secretKey: double.secretKey, baseURL: double.baseURL, requestTimeout: .seconds(5), maxRetries: 1,
            retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
    }

    static func configuration(
        _ directory: String, clock: TestClock, processor: any PaymentProcessor
    ) throws
        -> StoreConfiguration
    {
        let catalog = Catalog(
            bundleID: "com.example.monkeys",
            products: [
                LifecycleDefectTests.product("plus", price: "4.99"),
                CatalogProduct(
                    id: "book", type: .nonConsumable, title: "Book", price: "2.99", currency: "USD",
                    subscriptionPeriod: nil),
            ])
        return try StoreConfiguration(
            dataDirectory: directory, catalog: catalog, paymentProcessor: processor, clock: clock
        ).onTestLedger()
    }

    static func store(_ directory: String, clock: TestClock, processor: any PaymentProcessor) throws -> Store {
        let store = try Store(configuration: try configuration(directory, clock: clock, processor: processor))
        try store.prepareToServe()
        return store
    }

    @Test func aSubscriptionRenewsThreeTimesOffSessionWithTheMethodItsFirstPaymentSaved() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let store = try Self.store(directory, clock: clock, processor: Self.stripe(double))
        let buyer = try LifecycleDefectTests.account(store)

        // A one-off purchase makes no Customer and saves nothing.
        let book = try await store.purchase(
            account: buyer, productID: "book", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
        guard case .purchased = book.result else {
            Issue.record("book not purchased: \(book.result)")
            return
        }
        #expect(double.customers(metadata: "kiosk_account_id", buyer.id).isEmpty)

        let bought = try await store.purchase(
            account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: "sub")
        guard case .purchased(let first) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }
        let customers = double.customers(metadata: "kiosk_account_id", buyer.id)
        #expect(customers.count == 1)
        let customer = try #require(customers.first)
        let firstIntent = try #require(double.paymentIntents(forPaymentID: first.paymentID ?? "").first)
        #expect(firstIntent.customer == customer && firstIntent.setupFutureUsage == "off_session")
        #expect(!firstIntent.offSession)
        let saved = try #require(firstIntent.paymentMethod)
        #expect(saved != "pm_card_visa", "Stripe makes a new PaymentMethod of a test method")
        #expect(double.paymentMethod(saved)?.customer == customer, "the first payment did not save its method")
        let profile = try #require(try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test"))
        #expect(profile.customerID == customer && profile.paymentMethod == saved)

        for period in 1...3 {
            let row = try #require(try store.ledger.subscription(originalID: first.id))
            clock.advance(byMs: row.expiresMs - clock.now)
            let report = try await store.renewDueSubscriptions()
            #expect(report.renewed == 1, "renewal \(period): \(report)")
        }
        let renewals = double.paymentIntents(forAccount: buyer.id).filter(\.offSession)
        #expect(renewals.count == 3)
        #expect(
            renewals.allSatisfy { $0.customer == customer && $0.paymentMethod == saved && $0.status == "succeeded" })
        #expect(renewals.allSatisfy { $0.setupFutureUsage == nil })
        let row = try #require(try store.ledger.subscription(originalID: first.id))
        #expect(row.periodsPaid == 4 && row.state == .active)
        // A second subscription purchase of the same account uses the same Customer.
        #expect(double.customers(metadata: "kiosk_account_id", buyer.id).count == 1)
        try await double.shutdown()
    }

    /// A free trial charges nothing but still saves the buyer's method (a SetupIntent), so its first paid period
    /// renews off-session; a card the issuer refuses fails the trial's purchase.
    @Test func aFreeTrialSavesTheMethodItsFirstPaidPeriodRenewsWith() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let trial = OfferTerms(id: "introductory", price: "0", period: SubscriptionPeriod(iso8601: "P1W")!, periods: 1)
        let store = try LifecycleDefectTests.store(
            directory, clock: clock, processor: Self.stripe(double),
            products: [LifecycleDefectTests.product("plus", price: "4.99", intro: trial)])
        let refused = try LifecycleDefectTests.account(store)
        let declined = try await store.purchase(
            account: refused, productID: "plus", quantity: 1, paymentMethod: "pm_card_chargeDeclined",
            idempotencyKey: nil, offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
        guard case .failed(let failure) = declined.result else {
            Issue.record("a trial with a declining card was granted: \(declined.result)")
            return
        }
        #expect(failure.reason == "card_declined")
        let buyer = try LifecycleDefectTests.account(store)
        let bought = try await store.purchase(
            account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil,
            offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
        guard case .purchased(let first) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }
        #expect(double.chargeCount == 0)
        let profile = try #require(try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test"))
        #expect(double.paymentMethod(profile.paymentMethod)?.customer == profile.customerID)
        let row = try #require(try store.ledger.subscription(originalID: first.id))
        clock.advance(byMs: row.expiresMs - clock.now)
        #expect(try await store.renewDueSubscriptions().renewed == 1)
        let renewal = try #require(double.paymentIntents(forAccount: buyer.id).last)
        #expect(renewal.offSession && renewal.paymentMethod == profile.paymentMethod && renewal.amount == 499)
        try await double.shutdown()
    }

    /// A first payment whose answer was lost is recorded by reconciliation's lookup, and the method it saved is
    /// kept all the same; a Customer Stripe no longer has is forgotten, and a new one is made when the buyer saves
    /// a method again.
    @Test func aLookedUpFirstPaymentKeepsItsMethodAndAGoneCustomerIsReplaced() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let store = try Self.store(directory, clock: clock, processor: Self.stripe(double))
        let buyer = try LifecycleDefectTests.account(store)
        _ = try await store.paymentProfile(accountID: buyer.id)  // the Customer first: the charge's answers are lost
        double.loseNextAnswers(count: 2)
        await #expect(throws: StoreError.self) {
            try await store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: "k")
        }
        clock.advance(byMs: 120_000)
        let reconciled = try await store.reconcile(all: true)
        #expect(reconciled.charged == 1, "\(reconciled)")
        let first = try #require(try store.ledger.transactions(accountID: buyer.id).first)
        let charged = try #require(double.paymentIntents(forPaymentID: first.paymentID ?? "").first)
        let profile = try #require(try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test"))
        #expect(profile.paymentMethod == charged.paymentMethod, "the lookup dropped the saved method")

        // The Customer is gone at Stripe (another account's id, say): the renewal is declined and the id forgotten.
        try await store.ledger.write(account: buyer.id) { db in
            var stale = profile
            stale.customerID = "cus_gone"
            try db.savePaymentProfile(stale)
        }
        let row = try #require(try store.ledger.subscription(originalID: first.id))
        clock.advance(byMs: row.expiresMs - clock.now)
        #expect(try await store.renewDueSubscriptions().failed == 1)
        #expect(try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test")?.customerID == "")
        let saved = try await store.setPaymentMethod(account: buyer, paymentMethod: "pm_card_visa")
        let fresh = try #require(try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test"))
        #expect(fresh.customerID.hasPrefix("cus_") && fresh.customerID != profile.customerID)
        #expect(fresh.paymentMethod == saved.paymentMethod)
        let retrying = try #require(try store.ledger.subscription(originalID: first.id))
        clock.advance(byMs: max(0, retrying.dueMs - clock.now))
        #expect(try await store.renewDueSubscriptions().renewed == 1)
        try await double.shutdown()
    }

    /// Stripe refuses a PaymentMethod used once without a Customer ("may not be used again"): the double does the
    /// same, and Kiosk never sends a renewal without a method saved to the account's Customer. It goes to billing
    /// retry instead, and the method the buyer then saves is charged off-session.
    @Test func anUnsavedMethodIsNeverSentForRenewalAndASavedOneRecovers() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let stripe = Self.stripe(double)

        // The double, as Stripe: a real (not test-name) PaymentMethod used once without a Customer is refused after.
        let object = try await RenewalActionTests.post(
            double, "/v1/payment_methods", "type=card&card%5Btoken%5D=tok_visa")
        let method = try #require(object["id"] as? String)
        func oneOff(_ id: String) -> PaymentRequest {
            PaymentRequest(
                paymentID: id, accountID: "a1", productID: "book", quantity: 1, unitPrice: "2.99", currency: "USD",
                paymentMethod: method)
        }
        guard case .succeeded = try await stripe.charge(oneOff("p1")) else {
            Issue.record("the first use of a fresh PaymentMethod must succeed")
            return
        }
        guard case .declined(let reason, let message) = try await stripe.charge(oneOff("p2")) else {
            Issue.record("a PaymentMethod used without a Customer must be refused the second time")
            return
        }
        #expect(reason == "invalid_payment_method")
        #expect(message.contains("may not be used again"), "\(message)")

        // A store: the subscription's account has a Customer but no saved method (a ledger from before Customers,
        // simulated by clearing it).
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let store = try Self.store(directory, clock: clock, processor: stripe)
        let buyer = try LifecycleDefectTests.account(store)
        let bought = try await store.purchase(
            account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
        guard case .purchased(let first) = bought.result else {
            Issue.record("not purchased: \(bought.result)")
            return
        }
        try await store.ledger.write(account: buyer.id) { db in
            guard var profile = try db.paymentProfile(account: buyer.id, processor: "stripe:test") else { return }
            profile.paymentMethod = ""
            try db.savePaymentProfile(profile)
        }
        let sentBefore = double.requests.count
        let row = try #require(try store.ledger.subscription(originalID: first.id))
        clock.advance(byMs: row.expiresMs - clock.now)
        let report = try await store.renewDueSubscriptions()
        #expect(report.failed == 1 && report.renewed == 0, "\(report)")
        #expect(double.requests.count == sentBefore, "a renewal without a saved method reached Stripe")
        let retrying = try #require(try store.ledger.subscription(originalID: first.id))
        #expect(retrying.state == .inBillingRetry || retrying.state == .inGracePeriod)
        let closed = try #require(try store.ledger.intent(id: "renewal:\(row.renewalPaymentID)"))
        #expect(closed.outcome.contains(Store.methodNotSavedReason), "\(closed.outcome)")

        // A declining card is refused and changes nothing; a good one is saved with a SetupIntent, no charge.
        let chargesBefore = double.chargeCount
        await #expect(throws: StoreError.self) {
            try await store.setPaymentMethod(account: buyer, paymentMethod: "pm_card_chargeDeclined")
        }
        #expect(try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test")?.paymentMethod == "")
        let saved = try await store.setPaymentMethod(account: buyer, paymentMethod: "pm_card_mastercard")
        #expect(
            saved.subscriptions == 1 && saved.paymentMethod.hasPrefix("pm_")
                && saved.paymentMethod != "pm_card_mastercard")
        #expect(double.chargeCount == chargesBefore, "saving a method charged")
        #expect(double.paymentMethod(saved.paymentMethod)?.customer != nil)

        // The billing retry charges the saved method off-session and recovers the subscription.
        clock.advance(byMs: max(0, retrying.dueMs - clock.now))
        #expect(try await store.renewDueSubscriptions().renewed == 1)
        let recovered = try #require(try store.ledger.subscription(originalID: first.id))
        #expect(recovered.state == .active && recovered.periodsPaid == 2)
        let renewal = try #require(double.paymentIntents(forAccount: buyer.id).last)
        #expect(renewal.offSession && renewal.paymentMethod == saved.paymentMethod && renewal.status == "succeeded")
        try await double.shutdown()
    }

    /// Through the SDK over a served store: buy, replace the saved method (`setPaymentMethod`), and the next renewal
    /// charges the new one; a refused method is an error that changes nothing.
    @Test func aBuyerReplacesTheSavedMethodThroughTheSDK() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let server = try StoreServer(
            store: try Self.configuration(directory, clock: clock, processor: Self.stripe(double)))
        try await server.start()
        let (accountID, token) = try server.store.createAccount()
        let state = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: state) }
        let kiosk = try KioskClient(
            configuration: KioskConfiguration(
                storePort: try #require(server.port), token: token, bundleID: "com.example.monkeys",
                stateDirectory: state, callTimeout: .seconds(10)))
        do {
            guard case .success(let first) = try await kiosk.purchase(productID: "plus", paymentMethod: "pm_card_visa")
            else {
                Issue.record("the subscription was not bought")
                return
            }
            do {
                try await kiosk.setPaymentMethod("pm_card_chargeDeclinedInsufficientFunds")
                Issue.record("a declining card was saved")
            } catch let error as KioskError {
                #expect(error.message.contains("insufficient_funds"), "\(error)")
            }
            let saved = try await kiosk.setPaymentMethod("pm_card_amex")
            #expect(saved.subscriptions == 1)
            let row = try #require(try server.store.ledger.subscription(originalID: first.originalID))
            clock.advance(byMs: row.expiresMs - clock.now)
            #expect(try await server.store.renewDueSubscriptions().renewed == 1)
            let renewal = try #require(double.paymentIntents(forAccount: accountID).last)
            #expect(renewal.offSession && renewal.paymentMethod == saved.paymentMethod)
            #expect(try await kiosk.subscriptionStatus().first?.state == .active)
        } catch {
            await kiosk.close()
            await server.shutdown()
            throw error
        }
        await kiosk.close()
        await server.shutdown()
        try await double.shutdown()
    }
}

/// A renewal the card issuer wants authenticated (SCA): billing retry and RENEWAL_NEEDS_ACTION, the client secret
/// to the account's SDK only, the buyer confirms, the subscription recovers; unconfirmed, the next attempt cancels it.
@Suite(.timeLimit(.minutes(2))) struct RenewalActionTests {
    /// POSTs a form to the double with its secret key, as the buyer's app confirms with the client secret.
    static func post(_ double: StripeDouble, _ path: String, _ form: String) async throws -> [String: Any] {
        try await postStripeForm(double.baseURL + path, key: double.secretKey, form)
    }

    @Test func aRenewalThatNeedsAuthenticationRecoversOnceTheBuyerConfirmsIt() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let server = try StoreServer(
            store: try StripeCustomerTests.configuration(
                directory, clock: clock, processor: StripeCustomerTests.stripe(double)))
        try await server.start()
        let store = server.store
        let (accountID, token) = try store.createAccount()
        let state = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: state) }
        let kiosk = try KioskClient(
            configuration: KioskConfiguration(
                storePort: try #require(server.port), token: token, bundleID: "com.example.monkeys",
                stateDirectory: state, callTimeout: .seconds(10)))
        do {
            guard case .success(let first) = try await kiosk.purchase(productID: "plus", paymentMethod: "pm_card_visa")
            else {
                Issue.record("the subscription was not bought")
                return
            }
            let saved = try #require(
                try await store.ledger.paymentProfile(account: accountID, processor: "stripe:test")?.paymentMethod)
            double.requireAuthentication(paymentMethod: saved)
            let row = try #require(try store.ledger.subscription(originalID: first.originalID))
            clock.advance(byMs: row.expiresMs - clock.now)
            let report = try await store.renewDueSubscriptions()
            #expect(report.failed == 1 && report.renewed == 0, "\(report)")
            let attempt = try #require(double.paymentIntents(forAccount: accountID).last)
            #expect(attempt.offSession && attempt.status == "requires_payment_method")

            // The back end hears of it (no secret in the event); the SDK's status carries what the app needs.
            let events = try await store.ledger.events(after: 0, limit: 100).filter { $0.type == .renewalNeedsAction }
            #expect(events.count == 1 && events.first?.reason == "authentication_required")
            #expect(events.first?.originalTransactionID == first.originalID)
            let waiting = try #require(try await kiosk.subscriptionStatus().first)
            #expect(waiting.state == .inGracePeriod || waiting.state == .inBillingRetry)
            let action = try #require(waiting.pendingAction)
            #expect(action.paymentReference == attempt.id && action.clientSecret.hasPrefix("\(attempt.id)_secret_"))
            let retrying = try #require(try store.ledger.subscription(originalID: first.originalID))
            #expect(
                try store.statusMessage(retrying).actionClientSecret.isEmpty, "the secret left the account's status")
            for event in events {
                #expect(!"\(event)".contains(action.clientSecret))
            }

            // Not confirmed yet: refused, nothing recorded.
            do {
                try await kiosk.confirmRenewal(originalTransactionID: first.originalID)
                Issue.record("an unconfirmed payment was recorded")
            } catch let error as KioskError {
                #expect(error.message.contains("not confirmed yet"), "\(error)")
            }

            // Two days later the buyer authenticates in the app; the app tells the store.
            clock.advance(byMs: 2 * 86_400_000)
            let confirmedAtMs = clock.now
            let confirmed = try await Self.post(
                double, "/v1/payment_intents/\(attempt.id)/confirm", "payment_method=\(saved)")
            #expect(confirmed["status"] as? String == "requires_action")
            #expect(double.authenticate(paymentIntent: attempt.id))
            let recovered = try await kiosk.confirmRenewal(originalTransactionID: first.originalID)
            #expect(recovered.state == .active && recovered.periodsPaid == 2 && recovered.pendingAction == nil)
            // Recovered from billing retry, the new period starts at the recovery: no days billed without the entitlement.
            let afterRecovery = try #require(try store.ledger.subscription(originalID: first.originalID))
            #expect(
                afterRecovery.expiresMs >= confirmedAtMs + 28 * 86_400_000, "the period started before the recovery")
            #expect(double.chargeCount == 2)
            do {
                try await kiosk.confirmRenewal(originalTransactionID: first.originalID)
                Issue.record("a second confirmation was taken")
            } catch let error as KioskError {
                #expect(error.message.contains("no renewal"), "\(error)")
            }

            // The issuer is satisfied: the next renewal goes through off-session.
            let next = try #require(try store.ledger.subscription(originalID: first.originalID))
            clock.advance(byMs: next.expiresMs - clock.now)
            #expect(try await store.renewDueSubscriptions().renewed == 1)
            #expect(try store.ledger.subscription(originalID: first.originalID)?.periodsPaid == 3)
            #expect(double.chargeCount == 3)
        } catch {
            await kiosk.close()
            await server.shutdown()
            throw error
        }
        await kiosk.close()
        await server.shutdown()
        try await double.shutdown()
    }

    /// The period's next attempt first asks what became of the one that waited for the buyer: confirmed without
    /// the app telling the store → recorded, not charged again; still unconfirmed → cancelled, then charged anew.
    @Test func theNextAttemptRecordsAConfirmedPaymentOrCancelsAnUnconfirmedOne() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let store = try StripeCustomerTests.store(
            directory, clock: clock, processor: StripeCustomerTests.stripe(double))
        for confirmedByBuyer in [true, false] {
            let buyer = try LifecycleDefectTests.account(store)
            let bought = try await store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased(let first) = bought.result else {
                Issue.record("not purchased: \(bought.result)")
                return
            }
            let saved = try #require(
                try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test")?.paymentMethod)
            double.requireAuthentication(paymentMethod: saved)
            let row = try #require(try store.ledger.subscription(originalID: first.id))
            clock.advance(byMs: max(0, row.expiresMs - clock.now))
            #expect(try await store.renewDueSubscriptions().failed == 1)
            let attempt = try #require(double.paymentIntents(forAccount: buyer.id).last)
            if confirmedByBuyer {
                _ = try await RenewalActionTests.post(
                    double, "/v1/payment_intents/\(attempt.id)/confirm", "payment_method=\(saved)")
                #expect(double.authenticate(paymentIntent: attempt.id))
            }
            let charges = double.chargeCount
            let retrying = try #require(try store.ledger.subscription(originalID: first.id))
            clock.advance(byMs: max(0, retrying.dueMs - clock.now))
            _ = try await store.renewDueSubscriptions()
            let after = try #require(try store.ledger.subscription(originalID: first.id))
            let intents = double.paymentIntents(forAccount: buyer.id)
            if confirmedByBuyer {
                #expect(after.state == .active && after.periodsPaid == 2, "\(after)")
                #expect(double.chargeCount == charges, "the period was charged again")
                #expect(intents.count == 2)
            } else {
                #expect(intents.first { $0.id == attempt.id }?.status == "canceled")
                #expect(intents.count == 3, "no new attempt after the cancelled one")
                #expect(after.periodsPaid == 1 && after.isLive)
            }
        }
        try await double.shutdown()
    }

    /// A payment the buyer could still confirm after its subscription moved on (auto-renew turned off while it
    /// waited) is resolved by reconciliation: confirmed anyway → recorded as a duplicate and refunded; unconfirmed →
    /// cancelled, so it can never be charged.
    @Test func aWaitingPaymentWhoseSubscriptionEndedIsRefundedOrCancelled() async throws {
        let double = StripeDouble()
        try await double.start()
        defer { Task { try? await double.shutdown() } }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let store = try StripeCustomerTests.store(
            directory, clock: clock, processor: StripeCustomerTests.stripe(double))
        for confirmedByBuyer in [true, false] {
            let buyer = try LifecycleDefectTests.account(store)
            let bought = try await store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased(let first) = bought.result else {
                Issue.record("not purchased: \(bought.result)")
                return
            }
            let saved = try #require(
                try await store.ledger.paymentProfile(account: buyer.id, processor: "stripe:test")?.paymentMethod)
            double.requireAuthentication(paymentMethod: saved)
            let row = try #require(try store.ledger.subscription(originalID: first.id))
            clock.advance(byMs: max(0, row.expiresMs - clock.now))
            #expect(try await store.renewDueSubscriptions().failed == 1)
            let attempt = try #require(double.paymentIntents(forAccount: buyer.id).last)
            // The buyer turns auto-renew off: in billing retry it ends at once.
            _ = try await store.setAutoRenew(account: buyer, originalID: first.id, false)
            #expect(try store.ledger.subscription(originalID: first.id)?.isLive == false)
            if confirmedByBuyer {
                _ = try await RenewalActionTests.post(
                    double, "/v1/payment_intents/\(attempt.id)/confirm", "payment_method=\(saved)")
                #expect(double.authenticate(paymentIntent: attempt.id))
            }
            let refundsBefore = double.refundCount
            _ = try await store.reconcile(all: true)
            let settled = try #require(double.paymentIntents(forAccount: buyer.id).first { $0.id == attempt.id })
            if confirmedByBuyer {
                #expect(settled.amountRefunded == settled.amount, "a charge for an ended subscription was kept")
                #expect(double.refundCount == refundsBefore + 1)
                #expect(try store.ledger.subscription(originalID: first.id)?.periodsPaid == 1)
            } else {
                #expect(settled.status == "canceled")
            }
            #expect(try store.ledger.intentsWaitingForBuyer().allSatisfy { $0.accountID != buyer.id })
        }
        try await double.shutdown()
    }
}
