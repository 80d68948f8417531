import Foundation
import Kiosk
import KioskTesting
import Testing

/// Storefronts through the SDK: a buyer sees and pays their storefront's prices, moves to another, and their
/// subscription renews there once they agree to its price. The session's clock is driven.
@Suite(.timeLimit(.minutes(1))) struct StorefrontSessionTests {
    @Test func aBuyerPaysTheirStorefrontsPriceAndASubscriptionFollowsAMoveWithConsent() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let account = try session.makeAccount(storefront: "FRA")
        let kiosk = try session.makeClient(account: account)
        #expect(try await kiosk.storefrontCountryCode == "FRA")
        let listed = try await kiosk.products(for: ["filter.sepia", "credits.5"])
        #expect(listed.storefrontCountryCode == "FRA")
        #expect(listed.products.map(\.displayPrice) == ["3.49 EUR", "0.99 USD"])

        guard
            case .success(let sepia) = try await kiosk.purchase(
                productID: "filter.sepia", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        #expect(sepia.price == Decimal(string: "3.49") && sepia.currencyCode == "EUR")
        #expect(sepia.storefrontCountryCode == "FRA")
        try await kiosk.finish(sepia)

        // A monthly subscription in euros, then the buyer moves to Japan: the period paid is kept; the renewal in yen
        // waits for their consent.
        guard
            case .success(let first) = try await kiosk.purchase(
                productID: "pro.monthly", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        try await kiosk.finish(first)
        #expect(first.price == Decimal(string: "5.49") && first.currencyCode == "EUR")
        #expect(try await kiosk.setStorefront("JPN") == "JPN")
        #expect(try await kiosk.products(for: ["pro.monthly"]).products.first?.displayPrice == "750 JPY")
        var status = try #require(try await kiosk.subscriptionStatus(originalTransactionID: first.id).first)
        #expect(status.priceIncreasePending && status.renewalPrice == Decimal(750) && status.currencyCode == "JPY")
        #expect(status.storefrontCountryCode == "JPN" && status.expirationDate == first.expirationDate)
        status = try await kiosk.consentToPriceIncrease(originalTransactionID: first.id)
        #expect(!status.priceIncreasePending)
        let report = try await session.advance(by: .seconds(32 * 86_400))
        #expect(report.renewed == 1)
        status = try #require(try await kiosk.subscriptionStatus(originalTransactionID: first.id).first)
        let renewal = try #require(status.latestTransaction)
        #expect(renewal.id != first.id && renewal.price == Decimal(750) && renewal.currencyCode == "JPY")
        #expect(renewal.storefrontCountryCode == "JPN")

        // The session moves a buyer too (as the buyer would); a malformed code is refused by name.
        try await session.setStorefront(account, "USA")
        #expect(try await kiosk.storefrontCountryCode == "USA")
        let refused = await #expect(throws: KioskError.self) { try await kiosk.setStorefront("france") }
        #expect(refused?.code == .invalidRequest)
        await kiosk.close()
        await session.shutdown()
    }
}
