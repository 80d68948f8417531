import AsyncHTTPClient
import Foundation
import KioskAPI
import KioskRPC
import KioskStore
import KioskStoreIntegrations
import StripeDouble
import Testing

@testable import KioskContent

/// Money that moves at Stripe, end to end: Stripe's signed webhook reaches the store, the store's event feed the
/// content service. A refund made at the Stripe double's "dashboard" (its API, not Kiosk's) stops the download
/// within a second; a dispute stops it, and the dispute won opens it again.
@Suite(.timeLimit(.minutes(1))) struct StripeMoneyTests {
    static let secret = "whsec_kiosk_content_test_endpoint"

    /// A store charging through the double, its webhook endpoint, and a content service following it.
    static func with(_ body: (ContentFixture, StripeDouble) async throws -> Void) async throws {
        let double = StripeDouble()
        try await double.start()
        do {
            let processor = StripePaymentProcessor(
                secretKey: double.secretKey, baseURL: double.baseURL, requestTimeout: .seconds(5), maxRetries: 1,
                retryBaseDelay: .milliseconds(10), lookupDelay: .zero)
            let configureStore: (inout StoreConfiguration) -> Void = {
                $0.paymentProcessor = processor
                $0.stripeWebhookSecrets = [secret]
            }
            try await ContentFixture.with(files: ["book.swift": proseBytes(5000)], configureStore: configureStore) {
                fixture in
                let endpoint = StripeWebhookServer(store: fixture.store.store)
                try await endpoint.start()
                double.sendWebhooks(to: "http://127.0.0.1:\(endpoint.port)\(StripeWebhookServer.path)", secret: secret)
                do {
                    try await body(fixture, double)
                } catch {
                    await endpoint.shutdown()
                    throw error
                }
                await endpoint.shutdown()
            }
        } catch {
            try? await double.shutdown()
            throw error
        }
        try await double.shutdown()
    }

    /// Authorizes every 10 ms until `allowed` is what the content service answers; the time it took.
    static func until(
        _ fixture: ContentFixture, _ transaction: StoreV1.Transaction, token: String, allowed: Bool
    ) async throws -> Duration {
        let start = ContinuousClock.now
        for _ in 0..<500 {
            let answer = try await fixture.authorize(transaction.signedReceipt, product: "book.swift", token: token)
            if answer.allowed == allowed { return start.duration(to: .now) }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("the content service never answered allowed = \(allowed)")
        return start.duration(to: .now)
    }

    /// A refund made at Stripe, not through Kiosk: the double's own API, as the dashboard would call it.
    static func refundAtStripe(_ double: StripeDouble, paymentIntent: String) async throws -> Int {
        var request = HTTPClientRequest(url: double.baseURL + "/v1/refunds")
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(double.secretKey)")
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(Array("payment_intent=\(paymentIntent)".utf8))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        _ = try await response.body.collect(upTo: 1 << 20)
        return Int(response.status.code)
    }

    @Test func aRefundMadeAtStripeStopsTheDownloadWithinASecond() async throws {
        try await Self.with { fixture, double in
            let token = try fixture.newAccount()
            let bought = try await fixture.buy("book.swift", token: token, paymentMethod: "pm_card_visa")
            _ = try await fixture.download("book.swift", receipt: bought.signedReceipt, token: token)
            let paymentID = try #require(
                try fixture.store.store.ledger.transaction(id: bought.transactionID)?.paymentID)
            let intent = try #require(double.paymentIntents(forPaymentID: paymentID).first)
            let refunded = try await Self.refundAtStripe(double, paymentIntent: intent.id)
            #expect(refunded == 200)
            let elapsed = try await Self.until(fixture, bought, token: token, allowed: false)
            #expect(elapsed < .seconds(1), "refused \(elapsed) after the refund at Stripe")
            let error = await #expect(throws: RPCError.self) {
                _ = try await fixture.download("book.swift", receipt: bought.signedReceipt, token: token)
            }
            #expect(error?.metadata["kiosk-refusal"] == "revoked")
        }
    }

    @Test func aDisputeStopsTheDownloadAndWinningItOpensItAgain() async throws {
        try await Self.with { fixture, double in
            let token = try fixture.newAccount()
            let bought = try await fixture.buy("book.swift", token: token, paymentMethod: "pm_card_visa")
            let paymentID = try #require(
                try fixture.store.store.ledger.transaction(id: bought.transactionID)?.paymentID)
            let intent = try #require(double.paymentIntents(forPaymentID: paymentID).first)
            let dispute = try #require(double.openDispute(paymentIntent: intent.id, reason: "fraudulent"))
            let refused = try await Self.until(fixture, bought, token: token, allowed: false)
            #expect(refused < .seconds(1), "refused \(refused) after the dispute")
            #expect(double.closeDispute(dispute, won: true))
            let allowed = try await Self.until(fixture, bought, token: token, allowed: true)
            #expect(allowed < .seconds(1), "served again \(allowed) after the dispute was won")
            let downloaded = try await fixture.download("book.swift", receipt: bought.signedReceipt, token: token)
            #expect(downloaded.bytes == proseBytes(5000))
            #expect(fixture.content.stats.revocationsKnown == 0)
        }
    }
}
