import Foundation
import Kiosk
import KioskAPI
import KioskTesting
import Testing

@testable import KioskStore

/// The SDK pages through the store's lists for the app: 20,000 transactions on
/// one account (about 8 MB of answers, twice the 4 MiB message limit) come
/// back whole from `unfinishedTransactions` and `transactionHistory`.
@Suite(.timeLimit(.minutes(3))) struct SDKPagingTests {
    @Test func twentyThousandUnfinishedTransactionsAndTheHistoryComeBackWhole() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let product = try #require(session.catalog.product("credits.5"))
            let count = 20_000
            try await session.store.ledger.write { db in
                for index in 0..<count {
                    let id = String(format: "tx_sdk_%06d", index)
                    var record = TransactionRecord(
                        id: id, originalID: id, accountID: account.id, product: product, quantity: 1, state: .purchased,
                        purchaseMs: 1_800_000_000_000 + Int64(index), expiresMs: 0, paymentMethod: card,
                        paymentID: "pay_" + id,
                        environment: .sandbox)
                    record.receipt = Array(repeating: 0x5A, count: 300)
                    try record.insert(db)
                }
            }
            let kiosk = try session.makeClient(account: account, callTimeout: .seconds(30))
            let unfinished = try await kiosk.unfinishedTransactions
            #expect(unfinished.count == count)
            #expect(Set(unfinished.map(\.id)).count == count)
            #expect(unfinished.first?.id == "tx_sdk_000000" && unfinished.last?.id == "tx_sdk_019999")
            var history = 0
            for try await transaction in kiosk.transactionHistory(pageSize: 500) {
                #expect(transaction.state == "PURCHASED")
                history += 1
            }
            #expect(history == count)
            await kiosk.close()
        }
    }
}
