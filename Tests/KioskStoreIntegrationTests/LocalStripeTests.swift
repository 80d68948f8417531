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
            guard case .succeeded(let reference) = try await stripe.charge(request) else {
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
