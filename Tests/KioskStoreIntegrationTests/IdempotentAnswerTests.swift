import Foundation
import KioskAPI
import KioskStoreTestSupport
import KioskTesting
import Testing

@testable import KioskStore

/// An idempotency key's answer is kept as the outcome, not as wire bytes, and replayed re-encoded.
@Suite struct IdempotentAnswerTests {
    static func withStore(_ body: (Store, AccountRecord, TestPaymentProcessor) async throws -> Void) async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let payments = TestPaymentProcessor()
        let store = try Store(
            configuration: try StoreConfiguration(
                dataDirectory: directory, catalog: testCatalog, paymentProcessor: payments
            )
            .onTestLedger())
        try store.prepareToServe()
        let (id, _) = try store.createAccount()
        try await body(store, try #require(try store.ledger.account(id: id)), payments)
    }

    static func kept(_ store: Store, _ key: String) throws -> [UInt8]? {
        try store.ledger.backend.read { db in
            try db.value([UInt8].self, "SELECT response FROM idempotency_keys WHERE key = ?", [key])
        }
    }

    @Test func aPurchaseKeepsItsOutcomeAndReplaysItFromTheLedger() async throws {
        try await Self.withStore { store, buyer, payments in
            let first = try await store.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k1")
            let bytes = try #require(try Self.kept(store, "k1"))
            #expect(
                try StoredAnswer.decoded(bytes) == .purchase(transactionID: first.transactionID, alreadyOwned: false))
            let again = try await store.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k1")
            #expect(again.replayed && again.record == first.record && payments.chargeCount == 1)
            #expect(again.message.transaction == first.message.transaction)
        }
    }

    @Test func aRefusedPurchaseReplaysTheSameRefusal() async throws {
        try await Self.withStore { store, buyer, _ in
            let first = try await store.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: "test-card:4000000000000002",
                idempotencyKey: "k2")
            guard case .failed(let failure) = first.result else {
                Issue.record("not refused: \(first.result)")
                return
            }
            let again = try await store.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: "test-card:4000000000000002",
                idempotencyKey: "k2")
            #expect(again.replayed)
            #expect(again.result == .failed(failure))
        }
    }

    @Test func aSpendReplaysItsBalanceAndLegacyBytesStillDecode() async throws {
        try await Self.withStore { store, buyer, _ in
            _ = try await store.purchase(
                account: buyer, productID: "credits.5", quantity: 2, paymentMethod: goodCard, idempotencyKey: nil)
            let spent = try await store.spendCredits(account: buyer, amount: 3, idempotencyKey: "s1")
            #expect(spent.balance == 7 && !spent.replayed)
            #expect(try StoredAnswer.decoded(try #require(try Self.kept(store, "s1"))) == .spend(balance: 7))
            #expect(
                try await store.spendCredits(account: buyer, amount: 3, idempotencyKey: "s1")
                    == SpendOutcome(balance: 7, replayed: true))
            // A key an earlier version answered, kept as the wire's bytes.
            let legacy = try StoreV1.SpendCreditsResponse(balance: 42, replayed: false).serializedBytes()
            #expect(StoredAnswer.isLegacy(legacy))
            try await store.ledger.write(account: buyer.id) { db in
                _ = try db.execute("UPDATE idempotency_keys SET response = ? WHERE key = ?", [legacy, "s1"])
            }
            #expect(
                try await store.spendCredits(account: buyer, amount: 3, idempotencyKey: "s1")
                    == SpendOutcome(balance: 42, replayed: true))
        }
    }
}
