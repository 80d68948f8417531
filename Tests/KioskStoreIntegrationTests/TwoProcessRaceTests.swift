import Foundation
import KioskAPI
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// `approve` in one process and `purchase` in another, racing for the same
/// non-consumable: the database (one pending intent per account and owned-once
/// product, checked inside the write) lets exactly one of them charge. With
/// only a process-local lock as the guard, both passed their ownership check
/// during the other's charge and both charged.
@Suite(.timeLimit(.minutes(3))) struct TwoProcessRaceTests {
    static let rounds = 24

    @Test func approveAndPurchaseInTwoProcessesChargeOnce() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let chargeLog = directory + "-charges.log"
        defer { try? FileManager.default.removeItem(atPath: chargeLog) }
        let catalog = try Catalog.load(path: StoreProcess.exampleCatalog)
        // Every charge takes 40 ms in both processes, so each one's check and charge overlap the other's.
        let store = try Store(
            configuration: StoreConfiguration(
                dataDirectory: directory, catalog: catalog,
                paymentProcessor: SimulatedPaymentProcessor(chargeLog: chargeLog, delay: .milliseconds(40))
            ).onTestLedger())
        var approvals = 0
        var purchases = 0
        var refusedByTheGuard = 0
        for round in 0..<Self.rounds {
            let (id, _) = try store.createAccount()
            let buyer = try #require(try store.ledger.account(id: id))
            let asked = try await store.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: "test-ask", idempotencyKey: "ask"
            )
            guard case .deferred(let deferred) = asked.result else {
                Issue.record("ask to buy was not deferred: \(asked.result)")
                return
            }

            async let approval = Self.approveInAnotherProcess(
                directory: directory, transactionID: deferred.id, chargeLog: chargeLog)
            // Stagger the purchase over the other process's start-up (longer on PostgreSQL: a connection and a
            // migration check per schema version) so that some rounds meet inside each other's charge.
            try await Task.sleep(for: .milliseconds(20 + (round % 8) * 40))
            var purchased = false
            do {
                let response = try await store.purchase(
                    account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard,
                    idempotencyKey: "buy")
                purchased = response.isPurchased && !response.alreadyOwned
            } catch let error as StoreError where error.code == .aborted {
                refusedByTheGuard += 1
            }
            let approved = try await approval
            if approved.status != 0, approved.errors.contains("already in progress") { refusedByTheGuard += 1 }
            approvals += approved.status == 0 ? 1 : 0
            purchases += purchased ? 1 : 0

            let owned = try store.ledger.transactions(accountID: id).filter {
                $0.productID == "filter.sepia" && $0.state == .purchased
            }
            #expect(owned.count == 1, "round \(round): exactly one purchase recorded, got \(owned.count)")
            let paymentIDs: Set<String> = [
                deferred.id, Store.hash("\(id)\u{0}ask").hexString, Store.hash("\(id)\u{0}buy").hexString,
            ]
            let lines =
                (try? String(contentsOfFile: chargeLog, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
            let charges = lines.filter { paymentIDs.contains($0) }.count
            #expect(
                charges == 1,
                "round \(round): approve \(approved.status == 0 ? "charged" : "refused: \(approved.errors)"), purchase \(purchased ? "charged" : "did not"); \(charges) charges"
            )
        }
        #expect(approvals + purchases == Self.rounds)
        print(
            "race: \(Self.rounds) rounds, \(approvals) approvals and \(purchases) purchases charged, \(refusedByTheGuard) refused by the database while the other was charging"
        )
        #expect(refusedByTheGuard > 0, "the rounds never met inside each other's charge: the race was not tried")
    }

    static func approveInAnotherProcess(
        directory: String, transactionID: String, chargeLog: String
    ) async throws -> (status: Int32, output: String, errors: String) {
        try await StoreProcess.outcome(
            ["approve", "--data-dir", directory, "--catalog", StoreProcess.exampleCatalog, transactionID],
            environment: ["KIOSK_SIMULATED_CHARGE_LOG": chargeLog, "KIOSK_SIMULATED_DELAY_MS": "40"])
    }
}
