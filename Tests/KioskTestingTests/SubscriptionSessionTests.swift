import Foundation
import Kiosk
import KioskTesting
import Testing

/// Subscriptions through the SDK, on the session's driven clock: a renewal arrives on transactionUpdates,
/// status and auto-renew go through the store's RPCs, and `expire` ends one at once.
@Suite(.timeLimit(.minutes(1))) struct SubscriptionSessionTests {
    @Test func aRenewalReachesTheAppAndTheStatusFollowsTheClock() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let account = try session.makeAccount()
        let kiosk = try session.makeClient(account: account)
        let products = try await kiosk.products(for: ["pro.monthly"]).products
        #expect(products.first?.subscription?.period == "P1M")
        #expect(products.first?.subscription?.groupID == "pro.monthly")

        guard
            case .success(let first) = try await kiosk.purchase(
                productID: "pro.monthly", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        try await kiosk.finish(first)
        let updates = kiosk.transactionUpdates
        var status = try #require(try await kiosk.subscriptionStatus().first)
        #expect(status.state == .active && status.willAutoRenew && status.periodsPaid == 1)
        #expect(status.renewalPrice == Decimal(string: "4.99"))

        // A month and a bit later the store renews: a new transaction with the same original id, unfinished.
        let report = try await session.advance(by: .seconds(32 * 86_400))
        #expect(report.renewed == 1)
        #expect(session.payments.renewalChargeCount == 1)
        var renewal: Transaction?
        for await transaction in updates {
            renewal = transaction
            break
        }
        #expect(renewal?.originalID == first.id)
        #expect(renewal?.id != first.id)
        #expect(renewal?.periodStartDate == first.expirationDate)
        status = try #require(try await kiosk.subscriptionStatus(originalTransactionID: first.id).first)
        #expect(status.periodsPaid == 2 && status.latestTransaction?.id == renewal?.id)

        // Auto-renew off: it ends when the paid period does, reason cancelled, nothing charged.
        status = try await kiosk.setAutoRenew(originalTransactionID: first.id, false)
        #expect(!status.willAutoRenew && status.state == .active)
        try await session.advance(by: .seconds(32 * 86_400))
        status = try #require(try await kiosk.subscriptionStatus().first)
        #expect(status.state == .expired && status.expirationReason == .cancelled)
        #expect(session.payments.renewalChargeCount == 1)
        #expect(try await kiosk.currentEntitlements.isEmpty)
        await #expect(throws: KioskError.self) { try await kiosk.setAutoRenew(originalTransactionID: first.id, true) }
        await kiosk.close()
        await session.shutdown()
    }

    @Test func aFreeTrialOnceThroughTheSDK() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let account = try session.makeAccount()
        let kiosk = try session.makeClient(account: account)
        let pro = try #require(try await kiosk.products(for: ["pro.monthly"]).products.first)
        #expect(pro.subscription?.introductoryOffer?.price == 0)
        #expect(pro.subscription?.introductoryOffer?.period == "P1W")
        #expect(try await kiosk.isEligibleForIntroOffer(pro))
        guard
            case .success(let trial) = try await kiosk.purchase(
                pro, paymentMethod: "test-card:4242424242424242", offer: .introductory)
        else {
            Issue.record("expected success")
            return
        }
        #expect(trial.offerID == "introductory")
        #expect(session.payments.chargeCount == 0)
        #expect(try await kiosk.isEligibleForIntroOffer(pro) == false)
        try await session.expire(originalID: trial.id)
        let refused = await #expect(throws: KioskError.self) {
            try await kiosk.purchase(pro, paymentMethod: "test-card:4242424242424242", offer: .introductory)
        }
        #expect(refused?.code == .ineligibleForOffer)
        // Without the offer it is bought at the product's price.
        guard case .success(let paid) = try await kiosk.purchase(pro, paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        #expect(paid.originalID == trial.id && paid.offerID == nil)
        #expect(session.payments.chargeCount == 1)
        await kiosk.close()
        await session.shutdown()
    }

    @Test func graceKeepsTheEntitlementAndExpireEndsIt() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let account = try session.makeAccount()
        let kiosk = try session.makeClient(account: account)
        guard
            case .success(let first) = try await kiosk.purchase(
                productID: "pro.monthly", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        session.failNextRenewal(count: .max)
        try await session.advance(by: .seconds(32 * 86_400))
        // The sample catalog's pro.monthly has no grace period: billing retry at once, no entitlement.
        var status = try #require(try await kiosk.subscriptionStatus().first)
        #expect(status.state == .inBillingRetry && status.billingRetryEndDate != nil)
        #expect(try await kiosk.currentEntitlements.isEmpty)
        #expect(try await kiosk.verify(receipt: first.signedReceipt).isValid == false)
        try await session.expire(originalID: first.id)
        status = try #require(try await kiosk.subscriptionStatus().first)
        #expect(status.state == .expired)
        await kiosk.close()
        await session.shutdown()
    }
}
