import Foundation
import Kiosk
import KioskTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct KioskTestSessionTests {
    @Test func knobsDoWhatTheySay() async throws {
        let session = try await KioskTestSession.start()
        let account = try session.makeAccount()
        let kiosk = try session.makeClient(account: account)

        session.failNextPayment()
        let failed = await #expect(throws: KioskError.self) {
            try await kiosk.purchase(productID: "credits.5", paymentMethod: "test-card:4242424242424242")
        }
        #expect(failed?.code == .paymentInvalid)
        session.cancelNextPayment()
        #expect(
            try await kiosk.purchase(productID: "credits.5", paymentMethod: "test-card:4242424242424242")
                == .userCancelled)
        session.deferNextPayment()
        #expect(
            try await kiosk.purchase(productID: "credits.5", paymentMethod: "test-card:4242424242424242") == .pending)
        #expect(try session.deferredTransactions(of: account).count == 1)

        try session.setPaymentsAllowed(account, false)
        #expect(try await kiosk.canMakePayments == false)
        try session.setPaymentsAllowed(account, true)

        guard
            case .success(let bought) = try await kiosk.purchase(
                productID: "credits.10", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        #expect(session.payments.chargeCount == 1)
        try await session.refund(transactionID: bought.id)
        #expect(try await kiosk.verify(receipt: bought.signedReceipt).revocationDate != nil)
        // Clearing takes everything: the deferred request, a fresh purchase and its credits.
        guard
            case .success = try await kiosk.purchase(
                productID: "credits.5", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        #expect(try await kiosk.creditBalance == 5)
        try session.clearTransactions()
        #expect(try session.deferredTransactions(of: account).isEmpty)
        #expect(try await kiosk.creditBalance == 0)
        #expect(try await kiosk.unfinishedTransactions.isEmpty)
        #expect(try await kiosk.hostedProducts().map(\.productID) == ["book.swift"])
        await kiosk.close()
        await session.shutdown()
    }

    @Test func aLostProcessorAnswerIsPendingThenDeliveredOnceWithoutASecondCharge() async throws {
        let session = try await KioskTestSession.start()
        let account = try session.makeAccount()
        let kiosk = try session.makeClient(account: account)
        let updates = kiosk.transactionUpdates
        // Charged at the processor, but its answer is lost: the store answers UNAVAILABLE and keeps the intent pending.
        session.loseNextPaymentAnswer()
        #expect(
            try await kiosk.purchase(productID: "credits.5", paymentMethod: "test-card:4242424242424242") == .pending)
        #expect(session.payments.chargeCount == 1)
        // Reconciliation records it; the SDK's queued retry (same key) gets the same transaction.
        let report = try await session.reconcile()
        #expect(report.charged + report.left <= 1)
        var delivered: Transaction?
        for await transaction in updates {
            delivered = transaction
            break
        }
        #expect(delivered?.productID == "credits.5")
        #expect(session.payments.chargeCount == 1, "charged once, however it was settled")
        #expect(try await kiosk.creditBalance == 5)
        await kiosk.close()
        await session.shutdown()
    }
}
