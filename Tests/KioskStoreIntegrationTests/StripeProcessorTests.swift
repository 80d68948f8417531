import AsyncHTTPClient
import Foundation
import KioskTesting
import StripeDouble
import Testing

@testable import KioskStore
@testable import KioskStoreIntegrations

/// `StripePaymentProcessor` against `StripeDouble`, a local stand-in for Stripe's API.
@Suite(.timeLimit(.minutes(1))) struct StripeProcessorTests {
    // MARK: Charging

    @Test func aGoodCardIsCharged() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_visa", unitPrice: "4.99", quantity: 2)
            let outcome = try await stripe.charge(request)
            let intent = try #require(double.paymentIntents(forPaymentID: request.paymentID).first)
            #expect(outcome == .succeeded(reference: intent.id))
            #expect(intent.id.hasPrefix("pi_"))
            #expect(intent.amount == 998 && intent.currency == "usd" && intent.status == "succeeded")
            #expect(
                intent.metadata == [
                    "kiosk_payment_id": request.paymentID, "kiosk_account_id": "account-1",
                    "kiosk_product_id": "credits.5",
                ])
            #expect(double.chargeCount == 1)
            #expect(double.chargesByPaymentID == [request.paymentID: 1])
            #expect(double.requests.map(\.idempotencyKey) == [request.paymentID])
        }
    }

    @Test func aDeclinedCardIsDeclinedWithStripesCode() async throws {
        try await withStripe { double, stripe in
            let outcome = try await stripe.charge(stripePayment(method: "pm_card_chargeDeclined"))
            #expect(outcome == .declined(reason: "card_declined", message: "Your card was declined."))
            #expect(double.chargeCount == 0)
        }
    }

    @Test func aCardWithoutFundsSaysSo() async throws {
        try await withStripe { double, stripe in
            let outcome = try await stripe.charge(stripePayment(method: "pm_card_chargeDeclinedInsufficientFunds"))
            #expect(outcome == .declined(reason: "insufficient_funds", message: "Your card has insufficient funds."))
            #expect(double.chargeCount == 0)
        }
    }

    @Test func confidentialDeclineCodesAreNotShown() async throws {
        try await withStripe { _, stripe in
            let outcome = try await stripe.charge(stripePayment(method: "pm_card_chargeDeclinedStolenCard"))
            #expect(outcome == .declined(reason: "card_declined", message: "Your card was declined."))
        }
    }

    @Test func aCardThatNeedsAuthenticationIsDeclinedAndCancelled() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_authenticationRequired")
            let outcome = try await stripe.charge(request)
            guard case .declined(let reason, _) = outcome else {
                Issue.record("expected a decline, got \(outcome)")
                return
            }
            #expect(reason == "authentication_required")
            #expect(double.paymentIntents(forPaymentID: request.paymentID).map(\.status) == ["canceled"])
            #expect(double.chargeCount == 0)
        }
    }

    @Test func kioskTestMethodsAndBadAmountsAreDeclinedWithoutAskingStripe() async throws {
        try await withStripe { double, stripe in
            let testCard = try await stripe.charge(stripePayment(method: "test-card:4242424242424242"))
            guard case .declined(let reason, _) = testCard else {
                Issue.record("expected a decline, got \(testCard)")
                return
            }
            #expect(reason == "invalid_payment_method")
            let badPrice = try await stripe.charge(stripePayment(method: "pm_card_visa", unitPrice: "1.234"))
            guard case .declined(let amountReason, _) = badPrice else {
                Issue.record("expected a decline, got \(badPrice)")
                return
            }
            #expect(amountReason == "invalid_amount")
            let fractionalYen = try await stripe.charge(
                stripePayment(method: "pm_card_visa", unitPrice: "500.50", quantity: 1, currency: "JPY"))
            guard case .declined(let yenReason, _) = fractionalYen else {
                Issue.record("expected a decline, got \(fractionalYen)")
                return
            }
            #expect(yenReason == "invalid_amount")
            #expect(double.requests.isEmpty)
        }
    }

    @Test func anUnknownPaymentMethodOrTooSmallAmountIsDeclined() async throws {
        try await withStripe { double, stripe in
            let unknown = try await stripe.charge(stripePayment(method: "pm_does_not_exist"))
            guard case .declined(let reason, let message) = unknown else {
                Issue.record("expected a decline, got \(unknown)")
                return
            }
            #expect(reason == "invalid_payment_method")
            #expect(message.contains("pm_does_not_exist"))
            let tiny = try await stripe.charge(stripePayment(method: "pm_card_visa", unitPrice: "0.10", quantity: 1))
            guard case .declined(let tinyReason, _) = tiny else {
                Issue.record("expected a decline, got \(tiny)")
                return
            }
            #expect(tinyReason == "invalid_amount")
            #expect(double.paymentIntentCount == 0)
        }
    }

    @Test func zeroDecimalCurrenciesAreSentInWholeUnits() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_visa", unitPrice: "500", quantity: 1, currency: "JPY")
            guard case .succeeded = try await stripe.charge(request) else {
                Issue.record("not charged")
                return
            }
            let intent = try #require(double.paymentIntents(forPaymentID: request.paymentID).first)
            #expect(intent.amount == 500 && intent.currency == "jpy")
        }
    }

    // MARK: Idempotency and retries

    @Test func chargingTheSamePaymentTwiceChargesOnce() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_visa")
            let first = try await stripe.charge(request)
            let second = try await StripePaymentProcessor(secretKey: double.secretKey, baseURL: double.baseURL).charge(
                request)
            let approved = try await stripe.approve(request)
            #expect(first == second && second == approved)
            #expect(double.chargeCount == 1 && double.paymentIntentCount == 1)
            #expect(double.requests.map(\.replayed) == [false, true, true])
        }
    }

    @Test func theSamePaymentIDWithOtherParametersIsRefusedNotCharged() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_visa")
            _ = try await stripe.charge(request)
            var changed = request
            changed.quantity += 1
            let error = await #expect(throws: PaymentProcessorError.self) { try await stripe.charge(changed) }
            #expect(error?.message.contains("idempotency_error") == true)
            #expect(double.chargeCount == 1)
        }
    }

    @Test func serverErrorsAreRetriedWithTheSameIdempotencyKey() async throws {
        try await withStripe { double, stripe in
            double.failNext(count: 2, status: 500)
            double.failNext(count: 1, status: 429)
            let request = stripePayment(method: "pm_card_visa")
            let outcome = try await stripe.charge(request)
            guard case .succeeded = outcome else {
                Issue.record("expected a charge, got \(outcome)")
                return
            }
            #expect(double.requests.map(\.status) == [500, 500, 429, 200])
            #expect(double.requests.allSatisfy { $0.idempotencyKey == request.paymentID })
            #expect(double.chargeCount == 1)
        }
    }

    @Test func serverErrorsPastTheRetryBudgetLeaveTheOutcomeUnknown() async throws {
        try await withStripe { double, stripe in
            double.failNext(count: 4, status: 503)
            let request = stripePayment(method: "pm_card_visa")
            let error = await #expect(throws: PaymentProcessorError.self) { try await stripe.charge(request) }
            #expect(error?.message.contains("503") == true)
            #expect(double.requests.count == 4)
            #expect(double.chargeCount == 0)
            let found = try await stripe.lookup(request)
            #expect(found == .notCharged)
        }
    }

    @Test func aLostAnswerIsRecoveredByTheRetry() async throws {
        try await withStripe { double, stripe in
            double.loseNextAnswers(count: 1)
            let request = stripePayment(method: "pm_card_visa")
            let outcome = try await stripe.charge(request)
            let intent = try #require(double.paymentIntents(forPaymentID: request.paymentID).first)
            #expect(outcome == .succeeded(reference: intent.id))
            #expect(double.requests.map(\.replayed) == [false, true])
            #expect(double.chargeCount == 1)
        }
    }

    @Test func chargedButAnswerLostThenLookupFindsTheCharge() async throws {
        try await withStripe { double, stripe in
            double.loseNextAnswers(count: 4)
            let request = stripePayment(method: "pm_card_visa")
            await #expect(throws: PaymentProcessorError.self) { try await stripe.charge(request) }
            #expect(double.chargeCount == 1)
            // A fresh processor (the store restarted) has only Stripe to ask.
            let restarted = stripeProcessor(double)
            let intent = try #require(double.paymentIntents(forPaymentID: request.paymentID).first)
            #expect(try await restarted.lookup(request) == .charged(reference: intent.id))
            // Asking to charge it again answers the same charge.
            #expect(try await restarted.charge(request) == .succeeded(reference: intent.id))
            #expect(double.chargeCount == 1)
        }
    }

    @Test func aTimeoutAfterChargingIsAnUnknownOutcome() async throws {
        try await withStripe(requestTimeout: .milliseconds(300), maxRetries: 1) { double, stripe in
            double.loseNextAnswers(count: 2, hang: true)
            let request = stripePayment(method: "pm_card_visa")
            await #expect(throws: PaymentProcessorError.self) { try await stripe.charge(request) }
            let intent = try #require(double.paymentIntents(forPaymentID: request.paymentID).first)
            #expect(try await stripeProcessor(double).lookup(request) == .charged(reference: intent.id))
            #expect(double.chargeCount == 1)
        }
    }

    // MARK: Lookup

    @Test func lookingUpANeverChargedPaymentChargesNothing() async throws {
        try await withStripe { double, stripe in
            let found = try await stripe.lookup(stripePayment(method: "pm_card_visa"))
            #expect(found == .notCharged)
            #expect(double.chargeCount == 0 && double.paymentIntentCount == 0)
            #expect(double.requests.map(\.method) == ["GET"])
        }
    }

    @Test func lookingUpADeclinedPaymentCancelsItsIntent() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_chargeDeclined")
            _ = try await stripe.charge(request)
            #expect(try await stripe.lookup(request) == .notCharged)
            #expect(double.paymentIntents(forPaymentID: request.paymentID).map(\.status) == ["canceled"])
        }
    }

    @Test func searchQueriesAreEscaped() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_visa", paymentID: "it's \\ odd")
            guard case .succeeded(let reference, _) = try await stripe.charge(request) else {
                Issue.record("not charged")
                return
            }
            #expect(try await stripeProcessor(double).lookup(request) == .charged(reference: reference))
            #expect(
                try await stripeProcessor(double).lookup(stripePayment(method: "pm_card_visa", paymentID: "it's"))
                    == .notCharged)
        }
    }

    // MARK: Refunds

    @Test func refundingTwiceRefundsOnce() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_visa")
            _ = try await stripe.charge(request)
            try await stripe.refund(request, reason: "customer asked")
            try await stripe.refund(request, reason: "customer asked again")
            // Another process, which finds the intent by search.
            try await stripeProcessor(double).refund(request, reason: "admin")
            #expect(double.refundCount == 1)
            // Stripe forgets keys after a day; a refund then is `charge_already_refunded`, which counts as done.
            double.forgetIdempotencyKeys()
            try await stripeProcessor(double).refund(request, reason: "a day later")
            #expect(double.refundCount == 1)
            #expect(double.paymentIntents(forPaymentID: request.paymentID).first?.amountRefunded == 1000)
        }
    }

    @Test func aRefundRightAfterTheChargeDoesNotNeedTheSearchIndex() async throws {
        try await withStripe { double, stripe in
            double.searchLag = .seconds(60)
            let request = stripePayment(method: "pm_card_visa")
            _ = try await stripe.charge(request)
            try await stripe.refund(request, reason: "at once")
            #expect(double.refundCount == 1)
            // A process that did not charge it cannot see it yet: that is an error to retry, not a refund of nothing.
            let other = stripePayment(method: "pm_card_visa")
            _ = try await stripe.charge(other)
            await #expect(throws: PaymentProcessorError.self) {
                try await stripeProcessor(double).refund(other, reason: "too soon")
            }
        }
    }

    // MARK: Configuration errors

    @Test func aBadAPIKeyIsAClearError() async throws {
        try await withStripe { double, _ in
            let stripe = StripePaymentProcessor(
                secretKey: "sk_test_not_the_right_key", baseURL: double.baseURL, retryBaseDelay: .milliseconds(10))
            let error = await #expect(throws: PaymentProcessorError.self) {
                try await stripe.charge(stripePayment(method: "pm_card_visa"))
            }
            #expect(error?.message.contains("rejected the API key") == true)
            #expect(error?.message.contains("Invalid API Key provided") == true)
            #expect(double.requests.count == 1)
            #expect(double.chargeCount == 0)
        }
    }

    @Test func theProcessorIsRealEvenWithATestKey() {
        let stripe = StripePaymentProcessor(secretKey: "sk_test_123")
        #expect(stripe.name == "stripe" && !stripe.isSimulated && stripe.isTestMode)
        #expect(stripe.lookupDelay == .seconds(60))
        #expect(stripe.longestRequest == .seconds(120) + .milliseconds(3500))
        #expect(!StripePaymentProcessor(secretKey: "sk_live_123").isTestMode)
    }

    @Test func theCreateRequestIsFormEncodedAsStripeReadsIt() {
        let request = stripePayment(method: "pm_card_visa", paymentID: "a b&c=[d]")
        let body = StripeForm.encode(StripePaymentProcessor.createForm(request, amount: 1000))
        #expect(body.hasPrefix("amount=1000&currency=usd&payment_method=pm_card_visa&confirm=true&"))
        #expect(body.contains("automatic_payment_methods%5Ballow_redirects%5D=never"))
        #expect(body.contains("metadata%5Bkiosk_payment_id%5D=a%20b%26c%3D%5Bd%5D"))
        #expect(StripeSearch.metadataEquals("kiosk_payment_id", "it's") == #"metadata['kiosk_payment_id']:'it\'s'"#)
    }

    // MARK: The double's own endpoint

    @Test func theDoubleReportsItsCounts() async throws {
        try await withStripe { double, stripe in
            let request = stripePayment(method: "pm_card_visa")
            _ = try await stripe.charge(request)
            _ = try await stripe.charge(stripePayment(method: "pm_card_chargeDeclined"))
            try await stripe.refund(request, reason: "test")
            let response = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: double.baseURL + "/_double/stats"), timeout: .seconds(5))
            let body = try await response.body.collect(upTo: 1 << 16)
            let stats = try JSONDecoder().decode([String: Int].self, from: Data(body.readableBytesView))
            #expect(stats == ["charges": 1, "refunds": 1, "payment_intents": 2])
        }
    }
}

/// The same scenarios against Stripe's test mode, when `KIOSK_STRIPE_TEST_KEY`
/// holds a test secret key (`sk_test_…`); skipped otherwise.
@Suite(.timeLimit(.minutes(5))) struct StripeTestModeTests {
    static let key = ProcessInfo.processInfo.environment["KIOSK_STRIPE_TEST_KEY"]

    @Test(.enabled(if: key != nil, "KIOSK_STRIPE_TEST_KEY not set"))
    func scenariosAgainstStripeTestMode() async throws {
        let key = try #require(Self.key)
        try #require(
            key.hasPrefix("sk_test_") || key.hasPrefix("rk_test_"), "KIOSK_STRIPE_TEST_KEY must be a test-mode key")
        let stripe = StripePaymentProcessor(secretKey: key)
        let run = UUID().uuidString.prefix(8)

        let good = stripePayment(method: "pm_card_visa", paymentID: "kiosk-test-\(run)-good")
        guard case .succeeded(let reference, _) = try await stripe.charge(good) else {
            Issue.record("pm_card_visa was not charged")
            return
        }
        #expect(reference.hasPrefix("pi_"))
        #expect(try await stripe.charge(good) == .succeeded(reference: reference))

        let declined = try await stripe.charge(
            stripePayment(method: "pm_card_chargeDeclined", paymentID: "kiosk-test-\(run)-declined"))
        guard case .declined(let reason, _) = declined else {
            Issue.record("expected a decline, got \(declined)")
            return
        }
        #expect(reason == "card_declined")
        let poor = try await stripe.charge(
            stripePayment(method: "pm_card_chargeDeclinedInsufficientFunds", paymentID: "kiosk-test-\(run)-poor"))
        guard case .declined(let poorReason, _) = poor else {
            Issue.record("expected a decline, got \(poor)")
            return
        }
        #expect(poorReason == "insufficient_funds")

        try await stripe.refund(good, reason: "test")
        try await stripe.refund(good, reason: "test")
        #expect(
            try await stripe.lookup(stripePayment(method: "pm_card_visa", paymentID: "kiosk-test-\(run)-never"))
                == .notCharged)

        // A process that did not make the charge finds it once Stripe's search index has it (under a minute).
        let restarted = StripePaymentProcessor(secretKey: key)
        var found = try await restarted.lookup(good)
        for _ in 0..<18 where found == .notCharged {
            try await Task.sleep(for: .seconds(5))
            found = try await restarted.lookup(good)
        }
        #expect(found == .charged(reference: reference))

        let wrongKey = StripePaymentProcessor(secretKey: "sk_test_not_a_real_key_000000000000")
        await #expect(throws: PaymentProcessorError.self) {
            try await wrongKey.charge(stripePayment(method: "pm_card_visa"))
        }
    }

    @Test func reportsWhetherStripeTestModeRan() {
        if Self.key == nil { print("skipped: KIOSK_STRIPE_TEST_KEY not set (Stripe test-mode scenarios)") }
    }
}

// MARK: - Fixtures

/// A payment of `unitPrice × quantity` (10.00 USD by default) with a fresh id.
private func stripePayment(
    method: String, unitPrice: String = "5.00", quantity: UInt32 = 2, currency: String = "USD",
    paymentID: String = "pay-\(UUID().uuidString)"
) -> PaymentRequest {
    PaymentRequest(
        paymentID: paymentID, accountID: "account-1", productID: "credits.5", quantity: quantity, unitPrice: unitPrice,
        currency: currency, paymentMethod: method)
}

/// A processor for `double` with quick retries and no lookup delay (the double indexes at once).
private func stripeProcessor(
    _ double: StripeDouble, requestTimeout: Duration = .seconds(5), maxRetries: Int = 3
) -> StripePaymentProcessor {
    StripePaymentProcessor(
        secretKey: double.secretKey, baseURL: double.baseURL, requestTimeout: requestTimeout, maxRetries: maxRetries,
        retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
}

/// Runs `body` with a started double and a processor for it, and stops the double after.
private func withStripe(
    requestTimeout: Duration = .seconds(5), maxRetries: Int = 3,
    _ body: (StripeDouble, StripePaymentProcessor) async throws -> Void
) async throws {
    let double = StripeDouble()
    try await double.start()
    do {
        try await body(double, stripeProcessor(double, requestTimeout: requestTimeout, maxRetries: maxRetries))
    } catch {
        try? await double.shutdown()
        throw error
    }
    try await double.shutdown()
}
