import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

@Suite(.timeLimit(.minutes(1))) struct PurchaseFlowTests {
    @Test func seedScenarioCredits() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let first = try await store.buy("credits.5", quantity: 4, token: token)
            #expect(first.transaction?.state == .purchased)
            #expect(try await store.balance(token) == 20)
            _ = try await store.buy("credits.10", token: token)
            _ = try await store.buy("credits.10", token: token)
            #expect(try await store.balance(token) == 40)
            let spent = try await store.call(
                "SpendCredits", StoreV1.SpendCreditsRequest(amount: 15), as: StoreV1.SpendCreditsResponse.self,
                token: token, key: "spend-1")
            #expect(spent.balance == 25)
            #expect(try await store.balance(token) == 25)
            // Spending more than the balance is refused, and changes nothing.
            let error = await #expect(throws: RPCError.self) {
                try await store.call(
                    "SpendCredits", StoreV1.SpendCreditsRequest(amount: 26), as: StoreV1.SpendCreditsResponse.self,
                    token: token)
            }
            #expect(error?.code == .failedPrecondition)
            #expect(try await store.balance(token) == 25)
            // The ledger agrees with itself.
            let account = try await store.store.authenticate(token: token)
            #expect(try store.store.ledger.creditMovementsTotal(accountID: account.id) == 25)
        }
    }

    @Test func purchasedTransactionCarriesAVerifiableReceipt() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let response = try await store.buy("credits.5", quantity: 2, token: token)
            let transaction = try #require(response.transaction)
            #expect(transaction.state == .purchased && !transaction.finished)
            let verified = try await store.verify(transaction.signedReceipt, token: token)
            #expect(verified.status == 0)
            let receipt = try #require(verified.receipt)
            #expect(receipt.transactionID == transaction.transactionID)
            #expect(receipt.productID == "credits.5" && receipt.quantity == 2)
            #expect(receipt.accountID == transaction.accountID)
            #expect(receipt.bundleID == "com.example.monkeys")
            #expect(receipt.environment == .sandbox)
        }
    }

    @Test func nonConsumableIsRestoredOnAnotherClientOfTheSameAccountOnly() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let bought = try #require(try await store.buy("filter.sepia", token: token).transaction)
            _ = try await store.buy("credits.5", token: token)  // consumables are not restored
            let second = RPCClient(host: "127.0.0.1", port: try #require(store.server.port))
            let restored = try await store.restore(token: token, on: second)
            #expect(restored.count == 1)
            #expect(restored.first?.transactionID == bought.transactionID)
            #expect(restored.first?.originalTransactionID == bought.transactionID)
            #expect(restored.first?.productID == "filter.sepia")
            #expect(try await store.restore(token: try store.newAccount()).isEmpty)
            // Buying it again does not charge again: the existing transaction comes back.
            let again = try await store.buy("filter.sepia", token: token)
            #expect(again.alreadyOwned)
            #expect(again.transaction?.transactionID == bought.transactionID)
            let account = try await store.store.authenticate(token: token)
            #expect(
                try store.store.ledger.transactions(accountID: account.id).filter { $0.productID == "filter.sepia" }
                    .count == 1)
            await second.close()
        }
    }

    @Test(arguments: [
        ("test-card:4242424242424242", StoreV1.TransactionState.purchased, UInt32(0), ""),
        ("test-card:4000000000000002", .failed, 3, "card_declined"),
        ("test-card:4000000000009995", .failed, 3, "insufficient_funds"),
        ("test-cancel", .failed, 2, "payment_cancelled"),
        ("test-ask", .deferred, 0, ""),
        ("cash", .failed, 3, "invalid_payment_method"),
    ])
    func testCards(method: String, state: StoreV1.TransactionState, code: UInt32, reason: String) async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let transaction = try #require(
                try await store.buy("credits.5", quantity: 2, method: method, token: token).transaction)
            #expect(transaction.state == state, "\(method)")
            #expect(transaction.errorCode == code)
            #expect(transaction.errorReason == reason)
            #expect(transaction.signedReceipt.isEmpty == (state != .purchased))
            #expect(try await store.balance(token) == (state == .purchased ? 10 : 0), "only a purchase adds credits")
        }
    }

    @Test func askToBuyIsDeferredThenApproved() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let deferred = try #require(try await store.buy("credits.10", method: "test-ask", token: token).transaction)
            #expect(deferred.state == .deferred)
            #expect(try await store.balance(token) == 0)
            let unfinishedBefore = try await store.call(
                "Unfinished", StoreV1.UnfinishedRequest(), as: StoreV1.UnfinishedResponse.self, token: token)
            #expect(unfinishedBefore.transactions.isEmpty)
            let approved = try await store.store.approve(transactionID: deferred.transactionID)
            #expect(approved.state == .purchased)
            #expect(try await store.balance(token) == 10)
            let unfinished = try await store.call(
                "Unfinished", StoreV1.UnfinishedRequest(), as: StoreV1.UnfinishedResponse.self, token: token)
            #expect(unfinished.transactions.map(\.transactionID) == [deferred.transactionID])
            let verified = try await store.verify(
                try #require(unfinished.transactions.first).signedReceipt, token: token)
            #expect(verified.status == 0)
            // Approving twice is refused.
            await #expect(throws: StoreError.self) {
                try await store.store.approve(transactionID: deferred.transactionID)
            }
        }
    }

    @Test func approvalIsRefusedWhenTheProductWasBoughtMeanwhile() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let deferred = try #require(
                try await store.buy("filter.sepia", method: "test-ask", token: token).transaction)
            let bought = try #require(try await store.buy("filter.sepia", token: token).transaction)
            #expect(bought.state == .purchased)
            let error = await #expect(throws: StoreError.self) {
                try await store.store.approve(transactionID: deferred.transactionID)
            }
            #expect(error?.code == .failedPrecondition)
            #expect(error?.message.contains("already owns filter.sepia") == true)
            // Not charged, not recorded: still waiting, and the account owns the product once.
            #expect(try store.store.ledger.transaction(id: deferred.transactionID)?.state == .deferred)
            let owned = try store.store.ledger.transactions(accountID: bought.accountID).filter {
                $0.state == .purchased
            }
            #expect(owned.map(\.id) == [bought.transactionID])
        }
    }

    /// A second `Store` on the same data dir is what another `kiosk-store approve` process is: it
    /// charges at the price asked for, and of two approvals racing, one wins and credits once.
    @Test func approvalKeepsTheAskedPriceAndRacingApprovalsCreditOnce() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let deferred = try #require(try await store.buy("credits.10", method: "test-ask", token: token).transaction)
            var dearer = testCatalog
            dearer.products = dearer.products.map {
                var product = $0
                product.price = "2.49"
                return product
            }
            let admins = try (0..<2).map { _ in
                try Store(
                    configuration: StoreConfiguration(
                        dataDirectory: store.dataDirectory, catalog: dearer, environment: .sandbox,
                        clock: store.clock
                    ).onTestLedger())
            }
            async let first = try? admins[0].approve(transactionID: deferred.transactionID)
            async let second = try? admins[1].approve(transactionID: deferred.transactionID)
            let approved = await [first, second].compactMap { $0 }
            #expect(approved.count == 1)
            #expect(approved.first?.price == "1.79")
            #expect(try store.store.ledger.transaction(id: deferred.transactionID)?.price == "1.79")
            #expect(try await store.balance(token) == 10)
        }
    }

    /// Past the retention a restart prunes the key's answer; reusing the key then still answers
    /// with what it bought (from the ledger), with no second charge and no payment_id clash.
    @Test func keysReusedAfterTheirRetentionAnswerFromTheLedger() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let account = try await store.store.authenticate(token: token)
            let first = try #require(try await store.buy("credits.5", token: token, key: "week-old").transaction)
            store.clock.advance(byMs: 7 * 24 * 3600 * 1000 + 1)
            let restarted = try Store(
                configuration: StoreConfiguration(
                    dataDirectory: store.dataDirectory, catalog: testCatalog,
                    environment: .sandbox, clock: store.clock
                ).onTestLedger())
            let again = try await restarted.purchase(
                account: account, productID: "credits.5", quantity: 1, paymentMethod: goodCard,
                idempotencyKey: "week-old")
            #expect(again.replayed)
            #expect(again.transactionID == first.transactionID)
            #expect(try await store.balance(token) == 5)
            #expect(try store.store.ledger.transactions(accountID: account.id).count == 1)
        }
    }

    @Test func paymentsDisabledListsProductsButRefusesPurchases() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount(paymentsAllowed: false)
            let products = try await store.call(
                "ListProducts", StoreV1.ListProductsRequest(productIDs: ["credits.5", "nope"]),
                as: StoreV1.ListProductsResponse.self, token: nil)
            #expect(products.products.map(\.id) == ["credits.5"])
            #expect(products.invalidProductIDs == ["nope"])
            let account = try await store.call(
                "GetAccount", StoreV1.GetAccountRequest(), as: StoreV1.Account.self, token: token)
            #expect(account.paymentsAllowed == false)
            let transaction = try #require(try await store.buy("credits.5", token: token).transaction)
            #expect(transaction.state == .failed)
            #expect(transaction.errorCode == 4)
            #expect(transaction.errorMessage.contains("payment not allowed"))
            #expect(try await store.balance(token) == 0)
            #expect(
                try store.store.ledger.transactions(accountID: account.accountID).isEmpty, "nothing charged or recorded"
            )
            // Turned back on, the same account can buy.
            try store.store.setPaymentsAllowed(accountID: account.accountID, true)
            #expect(try await store.buy("credits.5", token: token).transaction?.state == .purchased)
        }
    }

    @Test func unknownProductFailsAsUnavailable() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let transaction = try #require(try await store.buy("no.such.product", token: token).transaction)
            #expect(transaction.state == .failed)
            #expect(transaction.errorCode == 5)
            #expect(transaction.errorMessage.contains("product unavailable"))
        }
    }

    @Test func fiftyConcurrentIdenticalPurchasesChargeOnce() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let responses = try await withThrowingTaskGroup(of: StoreV1.PurchaseResponse.self) { group in
                for _ in 0..<50 {
                    group.addTask { try await store.buy("credits.5", quantity: 3, token: token, key: "same-key") }
                }
                var all: [StoreV1.PurchaseResponse] = []
                for try await response in group { all.append(response) }
                return all
            }
            #expect(Set(responses.compactMap { $0.transaction?.transactionID }).count == 1)
            #expect(responses.filter { !$0.replayed }.count == 1)
            #expect(responses.filter(\.replayed).count == 49)
            #expect(try await store.balance(token) == 15)
            let account = try await store.store.authenticate(token: token)
            #expect(try store.store.ledger.transactions(accountID: account.id).count == 1)
            // Same key, other parameters: ALREADY_EXISTS.
            let error = await #expect(throws: RPCError.self) {
                try await store.buy("credits.5", quantity: 4, token: token, key: "same-key")
            }
            #expect(error?.code == .alreadyExists)
            #expect(error?.message.contains("idempotency-key \"same-key\" was already used") == true)
            // Keys are per account: another account may use the same key.
            let other = try store.newAccount()
            #expect(try await store.buy("credits.5", quantity: 3, token: other, key: "same-key").replayed == false)
        }
    }

    @Test func spendIsIdempotentToo() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            _ = try await store.buy("credits.10", quantity: 2, token: token)
            for _ in 0..<3 {
                _ = try await store.call(
                    "SpendCredits", StoreV1.SpendCreditsRequest(amount: 5), as: StoreV1.SpendCreditsResponse.self,
                    token: token, key: "s")
            }
            #expect(try await store.balance(token) == 15)
            let error = await #expect(throws: RPCError.self) {
                try await store.call(
                    "SpendCredits", StoreV1.SpendCreditsRequest(amount: 6), as: StoreV1.SpendCreditsResponse.self,
                    token: token, key: "s")
            }
            #expect(error?.code == .alreadyExists)
        }
    }

    @Test func finishIsIdempotentAndUnfinishedShrinks() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let a = try #require(try await store.buy("credits.5", token: token).transaction)
            let b = try #require(try await store.buy("filter.sepia", token: token).transaction)
            var unfinished = try await store.call(
                "Unfinished", StoreV1.UnfinishedRequest(), as: StoreV1.UnfinishedResponse.self, token: token)
            #expect(Set(unfinished.transactions.map(\.transactionID)) == [a.transactionID, b.transactionID])
            let first = try await store.call(
                "Finish", StoreV1.FinishRequest(transactionID: a.transactionID), as: StoreV1.FinishResponse.self,
                token: token)
            #expect(first.alreadyFinished == false)
            let second = try await store.call(
                "Finish", StoreV1.FinishRequest(transactionID: a.transactionID), as: StoreV1.FinishResponse.self,
                token: token)
            #expect(second.alreadyFinished == true)
            unfinished = try await store.call(
                "Unfinished", StoreV1.UnfinishedRequest(), as: StoreV1.UnfinishedResponse.self, token: token)
            #expect(unfinished.transactions.map(\.transactionID) == [b.transactionID])
            // Another account cannot finish it.
            let error = await #expect(throws: RPCError.self) {
                try await store.call(
                    "Finish", StoreV1.FinishRequest(transactionID: b.transactionID), as: StoreV1.FinishResponse.self,
                    token: try store.newAccount())
            }
            #expect(error?.code == .notFound)
        }
    }

    @Test func subscriptionsExpireAndRenewWithTheirOriginalID() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let first = try #require(try await store.buy("pro.monthly", token: token).transaction)
            #expect(first.expiresDateMs > first.purchaseDateMs)
            #expect(try await store.verify(first.signedReceipt, token: token).status == 0)
            // While live, buying again returns the live subscription.
            #expect(try await store.buy("pro.monthly", token: token).alreadyOwned)
            store.clock.advance(byMs: 32 * 24 * 3600 * 1000)
            #expect(try await store.verify(first.signedReceipt, token: token).status == 21006)
            let renewal = try #require(try await store.buy("pro.monthly", token: token).transaction)
            #expect(renewal.transactionID != first.transactionID)
            #expect(renewal.originalTransactionID == first.transactionID)
            #expect(try await store.restore(token: token).count == 2)
        }
    }
}
