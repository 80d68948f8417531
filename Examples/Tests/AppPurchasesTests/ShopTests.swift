import AppPurchases
import Kiosk
import KioskTesting
import Testing

/// The shop end to end against an in-process store and content service on 127.0.0.1 (`KioskTestSession`, its
/// sample catalog: `credits.5`, `credits.10`, `pro.monthly` with a one-week free trial), on a clock the test
/// drives: nothing renews or expires but what `advance(by:)` does.
@Suite(.timeLimit(.minutes(1))) struct ShopTests {
    /// Runs `body` with a shop for a new account of a new session; closes both whatever happens.
    func withShop(_ body: (Shop, KioskTestSession) async throws -> Void) async throws {
        let session = try await KioskTestSession.start(tls: false)
        do {
            let kiosk = try session.makeClient(account: try session.makeAccount())
            do {
                try await body(Shop(kiosk: kiosk), session)
                await kiosk.close()
            } catch {
                await kiosk.close()
                throw error
            }
            await session.shutdown()
        } catch {
            await session.shutdown()
            throw error
        }
    }

    @Test func buyingCreditsRaisesTheBalance() async throws {
        try await withShop { shop, session in
            #expect(try await shop.creditBalance == 0)
            guard case .purchased(let transaction) = try await shop.buyCredits("credits.5", quantity: 2) else {
                Issue.record("expected a purchase")
                return
            }
            #expect(transaction.productID == "credits.5" && transaction.purchasedQuantity == 2)
            #expect(try await shop.creditBalance == 10)
            #expect(try await shop.kiosk.unfinishedTransactions.isEmpty, "the shop finishes what it delivers")
            #expect(try await shop.spendCredits(4) == 6)
            #expect(try await shop.spendCredits(7) == nil, "too few credits is an answer, not an error")
            #expect(try await shop.creditBalance == 6)
            #expect(session.payments.chargeCount == 1)
        }
    }

    @Test func aDeclinedCardIsReportedAndChargesNothing() async throws {
        try await withShop { shop, session in
            session.failNextPayment()
            let declined = try await shop.buyCredits("credits.10")
            guard case .declined = declined else {
                Issue.record("expected a decline, got \(declined)")
                return
            }
            session.cancelNextPayment()
            #expect(try await shop.buyCredits("credits.10") == .cancelled)
            #expect(try await shop.creditBalance == 0)
            #expect(session.payments.chargeCount == 0)
            // The card works again: the next purchase goes through.
            guard case .purchased = try await shop.buyCredits("credits.10") else {
                Issue.record("expected a purchase after the decline")
                return
            }
            #expect(try await shop.creditBalance == 10)
        }
    }

    @Test func aSubscriptionUnlocksProUntilItEnds() async throws {
        try await withShop { shop, session in
            #expect(try await shop.isProUnlocked == false)
            guard case .purchased(let first) = try await shop.unlockPro() else {
                Issue.record("expected a subscription")
                return
            }
            #expect(first.offerID == "introductory", "a first subscription starts with the free week")
            #expect(session.payments.chargeCount == 0)
            #expect(try await shop.isProUnlocked)

            // The week over, the store renews at the full price with the same card: still unlocked.
            try await session.advance(by: .seconds(8 * 86_400))
            #expect(session.payments.renewalChargeCount == 1)
            #expect(try await shop.isProUnlocked)

            // Cancelled: unlocked to the end of the month paid for, then locked; nothing more charged.
            try await shop.cancelPro()
            #expect(try await shop.isProUnlocked)
            try await session.advance(by: .seconds(32 * 86_400))
            #expect(try await shop.isProUnlocked == false)
            #expect(session.payments.renewalChargeCount == 1)

            // Subscribing again: no second free trial.
            guard case .purchased(let again) = try await shop.unlockPro() else {
                Issue.record("expected a second subscription")
                return
            }
            #expect(again.offerID == nil)
            #expect(try await shop.isProUnlocked)
        }
    }
}
