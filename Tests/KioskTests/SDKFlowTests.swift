import Crypto
import Foundation
import Kiosk
import KioskTesting
import Testing

let card = "test-card:4242424242424242"

func withSession<R>(
    content: [String: [UInt8]] = KioskTestSession.sampleContent, chunkSize: UInt32 = 256 * 1024,
    _ body: (KioskTestSession) async throws -> R
) async throws -> R {
    let session = try await KioskTestSession.start(content: content, chunkSize: chunkSize)
    do {
        let result = try await body(session)
        await session.shutdown()
        return result
    } catch {
        await session.shutdown()
        throw error
    }
}

/// The next transaction on `updates` (bounded by the suite's time limit).
func next(_ updates: AsyncStream<Transaction>) async -> Transaction? {
    for await transaction in updates { return transaction }
    return nil
}

@Suite(.timeLimit(.minutes(2))) struct SDKFlowTests {
    @Test func consumablesWithQuantitiesAndSpending() async throws {
        try await withSession { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            let result = try await kiosk.products(for: ["credits.5", "credits.10", "nope"])
            #expect(result.invalidIdentifiers == ["nope"])
            let credits5 = try #require(result.products.first { $0.id == "credits.5" })
            #expect(credits5.price == Decimal(string: "0.99"))
            #expect(credits5.currencyCode == "USD" && credits5.displayPrice == "0.99 USD")
            #expect(credits5.type == .consumable)
            #expect(try await kiosk.canMakePayments)

            guard case .success(let four) = try await kiosk.purchase(credits5, quantity: 4, paymentMethod: card) else {
                Issue.record("expected success")
                return
            }
            #expect(four.purchasedQuantity == 4)
            try await kiosk.finish(four)
            #expect(try await kiosk.creditBalance == 20)
            let credits10 = try #require(result.products.first { $0.id == "credits.10" })
            for _ in 0..<2 { _ = try await kiosk.purchase(credits10, paymentMethod: card) }
            #expect(try await kiosk.creditBalance == 40)
            #expect(try await kiosk.spendCredits(15) == 25)
            let error = await #expect(throws: KioskError.self) { try await kiosk.spendCredits(26) }
            #expect(error?.code == .insufficientCredits)
            await kiosk.close()
        }
    }

    @Test func nonConsumableRestoresOnAnotherDeviceAndEntitlementsDropRefunds() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let phone = try session.makeClient(account: account)
            let products = try await phone.products(for: ["filter.sepia", "pro.monthly"]).products
            guard case .success(let filter) = try await phone.purchase(products[0], paymentMethod: card),
                case .success(let pro) = try await phone.purchase(products[1], paymentMethod: card)
            else {
                Issue.record("expected purchases")
                return
            }
            #expect(pro.expirationDate != nil)
            let laptop = try session.makeClient(account: account)  // a second device: its own state directory
            var restored: [Transaction] = []
            for try await transaction in laptop.restore() { restored.append(transaction) }
            #expect(Set(restored.map(\.id)) == [filter.id, pro.id])
            #expect(restored.first { $0.productID == "filter.sepia" }?.originalID == filter.id)
            #expect(Set(try await laptop.currentEntitlements.map(\.productID)) == ["filter.sepia", "pro.monthly"])
            try await session.refund(transactionID: filter.id)
            #expect(try await laptop.currentEntitlements.map(\.productID) == ["pro.monthly"])
            let verdict = try await laptop.verify(receipt: filter.signedReceipt)
            #expect(verdict.status == 0 && verdict.revocationDate != nil && !verdict.isValid)
            #expect(try await laptop.verify(receipt: pro.signedReceipt).isValid)
            // Another account sees none of it.
            let stranger = try session.makeClient(account: try session.makeAccount())
            #expect(try await stranger.currentEntitlements.isEmpty)
            for client in [phone, laptop, stranger] { await client.close() }
        }
    }

    @Test func errorsCallersCanActOn() async throws {
        try await withSession { session in
            let restricted = try session.makeAccount(paymentsAllowed: false)
            let kiosk = try session.makeClient(account: restricted)
            let products = try await kiosk.products(for: ["credits.5"]).products  // still visible
            #expect(products.count == 1)
            #expect(try await kiosk.canMakePayments == false)
            let notAllowed = await #expect(throws: KioskError.self) {
                try await kiosk.purchase(products[0], paymentMethod: card)
            }
            #expect(notAllowed?.code == .paymentNotAllowed)
            #expect(notAllowed?.code.rawValue == 4)

            let buyer = try session.makeClient(account: try session.makeAccount())
            let unavailable = await #expect(throws: KioskError.self) {
                try await buyer.purchase(productID: "gone", paymentMethod: card)
            }
            #expect(unavailable?.code == .productUnavailable)
            #expect(try await buyer.purchase(productID: "credits.5", paymentMethod: "test-cancel") == .userCancelled)
            let declined = await #expect(throws: KioskError.self) {
                try await buyer.purchase(productID: "credits.5", paymentMethod: "test-card:4000000000000002")
            }
            #expect(declined?.code == .paymentInvalid)
            session.failNextPayment(reason: "insufficient_funds")
            let insufficient = await #expect(throws: KioskError.self) {
                try await buyer.purchase(productID: "credits.5", paymentMethod: card)
            }
            #expect(insufficient?.code == .paymentInvalid)
            let badQuantity = await #expect(throws: KioskError.self) {
                try await buyer.purchase(productID: "credits.5", quantity: 99, paymentMethod: card)
            }
            #expect(badQuantity?.code == .invalidRequest)
            #expect(buyer.queuedPaymentCount == 0, "refused payments are not kept")
            #expect(try await buyer.creditBalance == 0)
            // No store at all: cannotConnect (0) where no queue can help.
            let config = session.configuration(
                account: try session.makeAccount(), stateDirectory: NSTemporaryDirectory() + UUID().uuidString)
            var nowhere = config
            nowhere.storePort = 1
            let offline = try KioskClient(configuration: nowhere)
            let cannot = await #expect(throws: KioskError.self) { try await offline.creditBalance }
            #expect(cannot?.code == .cannotConnect && cannot?.code.rawValue == 0)
            for client in [kiosk, buyer, offline] { await client.close() }
        }
    }

    @Test func askToBuyIsPendingThenArrivesOnUpdatesWhenApproved() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let kiosk = try session.makeClient(account: account)
            let updates = kiosk.transactionUpdates
            #expect(try await kiosk.purchase(productID: "filter.sepia", paymentMethod: "test-ask") == .pending)
            let deferred = try #require(try session.deferredTransactions(of: account).first)
            try await session.approve(transactionID: deferred)
            let approved = await next(updates)
            #expect(approved?.id == deferred)
            #expect(approved?.productID == "filter.sepia")
            await kiosk.close()
        }
    }

    @Test func offlinePurchaseIsQueuedAndChargedOnceWhenTheStoreReturns() async throws {
        try await withSession { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            let updates = kiosk.transactionUpdates
            await session.stopStore()
            #expect(try await kiosk.purchase(productID: "credits.10", paymentMethod: card) == .pending)
            #expect(kiosk.queuedPaymentCount == 1)
            try await session.startStore()
            let arrived = await next(updates)
            #expect(arrived?.productID == "credits.10")
            #expect(session.payments.chargeCount == 1)
            #expect(try await kiosk.creditBalance == 10)
            #expect(kiosk.queuedPaymentCount == 0)
            await kiosk.close()
        }
    }

    @Test func lostAnswerIsReplayedWithTheSameKeyAndChargedOnce() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let kiosk = try session.makeClient(account: account, callTimeout: .seconds(1))
            let updates = kiosk.transactionUpdates
            session.holdNextAnswer()  // the store commits, the answer is lost on the way
            #expect(try await kiosk.purchase(productID: "credits.5", quantity: 2, paymentMethod: card) == .pending)
            let replayed = await next(updates)
            #expect(replayed?.purchasedQuantity == 2)
            #expect(session.payments.chargeCount == 1)
            let checker = try session.makeClient(account: account)
            #expect(try await checker.creditBalance == 10)
            await checker.close()
            #expect(try session.store.ledger.transactions(accountID: account.id).count == 1)
            await kiosk.close()
        }
    }

    @Test func journalSurvivesAClientCrashAndIsReplayedWithTheSameKey() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let state = NSTemporaryDirectory() + "kiosk-state-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            await session.stopStore()
            let first = try session.makeClient(account: account, stateDirectory: state)
            #expect(try await first.purchase(productID: "filter.sepia", paymentMethod: card) == .pending)
            await first.close()  // the app dies with the payment queued
            try await session.startStore()
            let second = try session.makeClient(account: account, stateDirectory: state)
            let arrived = await next(second.transactionUpdates)
            #expect(arrived?.productID == "filter.sepia")
            #expect(second.queuedPaymentCount == 0)
            #expect(session.payments.chargeCount == 1)
            await second.close()
        }
    }

    @Test func unfinishedTransactionsComeBackAfterARestartUntilFinished() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let state = NSTemporaryDirectory() + "kiosk-state-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            let first = try session.makeClient(account: account, stateDirectory: state)
            guard case .success(let bought) = try await first.purchase(productID: "credits.5", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            await first.close()  // delivered but not finished
            for _ in 0..<2 {
                let restarted = try session.makeClient(account: account, stateDirectory: state)
                #expect(await next(restarted.transactionUpdates)?.id == bought.id)
                #expect(try await restarted.unfinishedTransactions.map(\.id) == [bought.id])
                await restarted.close()
            }
            let last = try session.makeClient(account: account, stateDirectory: state)
            try await last.finish(bought)
            #expect(try await last.unfinishedTransactions.isEmpty)
            await last.close()
        }
    }
}
