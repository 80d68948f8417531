import Foundation
import KioskStoreCore
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// The ledger's counts for the store's metrics, on SQLite (and PostgreSQL with KIOSK_TEST_LEDGER=postgres).
@Suite struct LedgerMetricsTests {
    @Test func theCountsFollowPurchasesRefundsAndPayments() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = try testLedger(directory: directory)
        try ledger.createAccount(id: "a1", tokenHash: Array(repeating: 1, count: 32), paymentsAllowed: true, nowMs: 0)
        @Sendable func record(_ id: String, type: ProductKind, price: String, currency: String) -> TransactionRecord {
            TransactionRecord(
                id: id, originalID: id, accountID: "a1", productID: "p-\(id)", productType: type, quantity: 1,
                state: .purchased, purchaseMs: 1_000, price: price, currency: currency, paymentMethod: "card",
                paymentID: "pay-\(id)", environment: .sandbox)
        }
        try await ledger.write { db in
            try db.insertTransaction(record("t1", type: .consumable, price: "0.99", currency: "USD"))
            try db.insertTransaction(record("t2", type: .nonConsumable, price: "2.99", currency: "USD"))
            try db.insertTransaction(record("t3", type: .nonConsumable, price: "500", currency: "JPY"))
            try db.insertTransaction(record("t4", type: .nonConsumable, price: "1.234", currency: "KWD"))
            _ = try db.revoke(transactionID: "t2", reason: "refund", nowMs: 2_000)
        }
        let metrics = try await ledger.metrics()
        #expect(metrics.revenueMinorUnits == ["USD": 99, "JPY": 500, "KWD": 1234])
        #expect(metrics.refundedMinorUnits == ["USD": 299])
        let purchased = metrics.transactions.filter { $0.state == .purchased && !$0.revoked }.map(\.count)
        #expect(purchased.reduce(0, +) == 3)
        #expect(metrics.transactions.contains { $0.productType == .nonConsumable && $0.revoked && $0.count == 1 })
        #expect(metrics.pendingIntents == 0 && metrics.oldestPendingIntentMs == nil)
        #expect(metrics.eventLogHead > 0)
    }
}
