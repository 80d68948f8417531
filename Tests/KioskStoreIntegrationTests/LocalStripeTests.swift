import AsyncHTTPClient
import Foundation
import KioskStore
import KioskStoreIntegrations
import NIOCore
import Testing

/// A second opinion on the Stripe processor: `localstripe` (PyPI), an independent Stripe emulator, run by
/// `Scripts/localstripe.sh`, which sets `KIOSK_LOCALSTRIPE_URL`; skipped otherwise. Only what localstripe does as
/// Stripe does is checked here; where it differs (no idempotency keys, no Search API, no decline test cards, refunds
/// past the amount charged) is written down in docs/payments.md.
@Suite(.timeLimit(.minutes(1))) struct LocalStripeTests {
    static let url = ProcessInfo.processInfo.environment["KIOSK_LOCALSTRIPE_URL"]
    static let key = "sk_test_kiosk_localstripe"

    /// A payment, charged as Stripe would charge it: a confirmed PaymentIntent of the amount in Stripe's units, in
    /// the currency, carrying the payment id; then refunded in full.
    @Test(.enabled(if: url != nil, "KIOSK_LOCALSTRIPE_URL not set (Scripts/localstripe.sh sets it)"))
    func paymentsAreChargedAndRefundedInStripesUnits() async throws {
        let url = try #require(Self.url)
        let stripe = StripePaymentProcessor(
            secretKey: Self.key, baseURL: url, requestTimeout: .seconds(10), maxRetries: 1,
            retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
        for (price, currency, amount) in [("4.99", "USD", 499), ("1.250", "KWD", 1250), ("500", "JPY", 500)] {
            let request = PaymentRequest(
                paymentID: "kiosk-localstripe-\(UUID().uuidString)", accountID: "account-1", productID: "book",
                quantity: 1, unitPrice: price, currency: currency, paymentMethod: "pm_card_visa")
            guard case .succeeded(let reference, _) = try await stripe.charge(request) else {
                Issue.record("\(price) \(currency) was not charged")
                continue
            }
            let charged = try await Self.intent(reference, at: url)
            #expect(charged["status"] as? String == "succeeded")
            #expect(charged["amount"] as? Int == amount, "\(price) \(currency): \(charged["amount"] ?? "none")")
            #expect(charged["currency"] as? String == currency.lowercased())
            #expect((charged["metadata"] as? [String: Any])?["kiosk_payment_id"] as? String == request.paymentID)
            try await stripe.refund(request, reason: "second opinion")
            let refunded = try await Self.intent(reference, at: url)
            let charge = ((refunded["charges"] as? [String: Any])?["data"] as? [[String: Any]])?.first
            #expect(charge?["amount_refunded"] as? Int == amount, "\(price) \(currency) not refunded in full")
        }
    }

    /// A renewal as Kiosk sends it: the account's Customer made by the processor, a method saved to it, and the
    /// charge with `customer`, that method and `off_session=true`. localstripe refuses `setup_future_usage` and a
    /// SetupIntent confirmed at creation, so the method is attached here as those would attach it.
    @Test(.enabled(if: url != nil, "KIOSK_LOCALSTRIPE_URL not set (Scripts/localstripe.sh sets it)"))
    func renewalsChargeTheCustomersSavedMethodOffSession() async throws {
        let url = try #require(Self.url)
        let stripe = StripePaymentProcessor(
            secretKey: Self.key, baseURL: url, requestTimeout: .seconds(10), maxRetries: 1,
            retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
        let (account, customer, methodID) = try await Self.customerWithCard(
            stripe, number: "4242424242424242", at: url)
        #expect(customer.hasPrefix("cus_"))
        let renewal = PaymentRequest(
            paymentID: "renew_kiosk-localstripe-\(UUID().uuidString)_1_0", accountID: account, productID: "plus",
            quantity: 1, unitPrice: "4.99", currency: "USD", paymentMethod: methodID, isRenewal: true,
            customer: customer)
        guard case .succeeded(let reference, _) = try await stripe.charge(renewal) else {
            Issue.record("the renewal was not charged")
            return
        }
        let charged = try await Self.intent(reference, at: url)
        #expect(charged["status"] as? String == "succeeded")
        #expect(charged["customer"] as? String == customer)
        #expect(charged["payment_method"] as? String == methodID)
        #expect(charged["amount"] as? Int == 499)
    }

    /// A renewal of a card that always wants 3-D Secure (4000002760003184): Kiosk keeps the PaymentIntent for the
    /// buyer (its client secret), and asks later what became of it: charged once the buyer authenticated
    /// (localstripe's `_authenticate`, standing in for the buyer's app); an unconfirmed one is cancelled.
    @Test(.enabled(if: url != nil, "KIOSK_LOCALSTRIPE_URL not set (Scripts/localstripe.sh sets it)"))
    func aRenewalThatNeedsTheBuyerWaitsForThemAndIsResolved() async throws {
        let url = try #require(Self.url)
        let stripe = StripePaymentProcessor(
            secretKey: Self.key, baseURL: url, requestTimeout: .seconds(10), maxRetries: 1,
            retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
        let (account, customer, methodID) = try await Self.customerWithCard(
            stripe, number: "4000002760003184", at: url)
        for buyerConfirms in [true, false] {
            let renewal = PaymentRequest(
                paymentID: "renew_kiosk-localstripe-\(UUID().uuidString)_1_0", accountID: account, productID: "plus",
                quantity: 1, unitPrice: "4.99", currency: "USD", paymentMethod: methodID, isRenewal: true,
                customer: customer)
            guard case .needsAction(let reference, let clientSecret) = try await stripe.charge(renewal) else {
                Issue.record("a renewal that needs the buyer was not left for them")
                continue
            }
            #expect(try await Self.intent(reference, at: url)["status"] as? String == "requires_action")
            if buyerConfirms {
                _ = try await Self.post(
                    "/v1/payment_intents/\(reference)/_authenticate", "client_secret=\(clientSecret)&success=true",
                    at: url)
                #expect(
                    try await stripe.resolveAction(reference: reference, cancelling: false)
                        == .charged(reference: reference))
            } else {
                #expect(try await stripe.resolveAction(reference: reference, cancelling: false) == .waiting)
                #expect(try await stripe.resolveAction(reference: reference, cancelling: true) == .ended)
                #expect(try await Self.intent(reference, at: url)["status"] as? String == "canceled")
            }
        }
    }

    /// POSTs a form to localstripe; the answer as JSON.
    static func post(_ path: String, _ form: String, at url: String) async throws -> [String: Any] {
        try await postStripeForm(url + path, key: key, form)
    }

    /// A new Customer for a new account, made by the processor, with a card of `number` attached to it (as a
    /// SetupIntent would attach it: localstripe takes neither `setup_future_usage` nor a confirmed SetupIntent).
    static func customerWithCard(
        _ stripe: StripePaymentProcessor, number: String, at url: String
    ) async throws -> (account: String, customer: String, method: String) {
        let account = "account-\(UUID().uuidString)"
        let customer = try await stripe.createCustomer(accountID: account, generation: "")
        let method = try await post(
            "/v1/payment_methods",
            "type=card&card%5Bnumber%5D=\(number)&card%5Bexp_month%5D=12&card%5Bexp_year%5D=2040&card%5Bcvc%5D=123",
            at: url)
        let methodID = try #require(method["id"] as? String)
        _ = try await post("/v1/payment_methods/\(methodID)/attach", "customer=\(customer)", at: url)
        return (account, customer, methodID)
    }

    @Test func reportsWhetherLocalstripeRan() {
        if Self.url == nil { print("skipped: KIOSK_LOCALSTRIPE_URL not set (Scripts/localstripe.sh)") }
    }

    /// localstripe's PaymentIntent `id`, as JSON.
    static func intent(_ id: String, at url: String) async throws -> [String: Any] {
        var request = HTTPClientRequest(url: "\(url)/v1/payment_intents/\(id)")
        request.headers.add(name: "Authorization", value: "Bearer \(key)")
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        let json = try JSONSerialization.jsonObject(with: Data(buffer: body))
        return try #require(json as? [String: Any], "not a JSON object: \(String(buffer: body))")
    }
}

/// POSTs a form to a Stripe API (Stripe's, the double, localstripe) with a secret key; the answer as JSON.
func postStripeForm(_ url: String, key: String, _ form: String) async throws -> [String: Any] {
    var request = HTTPClientRequest(url: url)
    request.method = .POST
    request.headers.add(name: "Authorization", value: "Bearer \(key)")
    request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
    request.body = .bytes(ByteBuffer(string: form))
    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
    let body = try await response.body.collect(upTo: 1 << 20)
    let json = try JSONSerialization.jsonObject(with: Data(buffer: body))
    return try #require(json as? [String: Any], "not a JSON object: \(String(buffer: body))")
}
