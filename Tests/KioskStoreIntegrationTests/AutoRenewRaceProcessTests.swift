import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

/// The auto-renew race in a real `kiosk-store serve` process: its simulated processor takes seconds per charge,
/// the buyer turns auto-renew off over the wire while the renewal's charge is at the processor, and the store
/// must neither turn it back on nor charge the period after. (LifecycleDefectTests holds the same race in-process
/// with a gate; SubscriptionLifecycleTests holds the rule.)
@Suite(.timeLimit(.minutes(1))) struct AutoRenewRaceProcessTests {
    /// Long enough for the test to see the renewal's intent and answer before the charge returns.
    static let chargeDelayMs = 1_500

    @Test func autoRenewTurnedOffDuringARenewalChargeStaysOffInAStoreProcess() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let chargeLog = directory + "-charges.log"
        defer { try? FileManager.default.removeItem(atPath: chargeLog) }
        let created = try await StoreProcess.run(["account", "create", "--data-dir", directory, "--json"])
        let token = try #require(
            created.split(separator: "\"").drop { $0 != "token" }.dropFirst(2).first.map(String.init))
        // A month lasts about 2.6 s at this scale; renewals are looked for every 20 ms.
        let store = try await StoreProcess(
            dataDirectory: directory, extraArguments: ["--time-scale", "1000000", "--renewal-interval-ms", "20"],
            environment: ["KIOSK_SIMULATED_CHARGE_LOG": chargeLog, "KIOSK_SIMULATED_DELAY_MS": "\(Self.chargeDelayMs)"])
        defer { if store.process.isRunning { store.process.terminate() } }
        let client = RPCClient(host: "127.0.0.1", port: store.port)
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        let options = CallOptions(timeout: .seconds(10), metadata: metadata)

        let bought = try await client.unary(
            "/kiosk.store.v1.Store/Purchase",
            request: StoreV1.PurchaseRequest(productID: "pro.monthly", quantity: 1, paymentMethod: goodCard),
            response: StoreV1.PurchaseResponse.self, options: options)
        let first = try #require(bought.transaction)
        #expect(first.state == StoreV1.TransactionState.purchased)

        // The renewal's intent is written before the processor is asked: it is in flight once the intent is pending.
        let ledger = try testLedger(directory: directory)
        let account = try #require(try await ledger.account(tokenHash: Store.hash(token)))
        let deadline = ContinuousClock.now + .seconds(20)
        var renewal: PaymentIntent?
        while renewal == nil {
            renewal = try ledger.openIntents().first {
                $0.kind == .renewal && $0.accountID == account.id && $0.state == .pending
            }
            guard renewal == nil else { break }
            guard ContinuousClock.now < deadline else {
                Issue.record("no renewal was started")
                return
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        let renewalID = try #require(renewal).id
        let turnedOff = try await client.unary(
            "/kiosk.store.v1.Store/SetAutoRenew",
            request: StoreV1.SetAutoRenewRequest(originalTransactionID: first.originalTransactionID, autoRenew: false),
            response: StoreV1.SubscriptionStatus.self, options: options)
        #expect(!turnedOff.willAutoRenew)
        #expect(
            try ledger.intent(id: renewalID)?.state == .pending,
            "auto-renew was turned off while this renewal was still being charged")

        // The renewal is recorded; the period after it ends the subscription, CANCELLED, and is never charged.
        while try ledger.subscription(originalID: first.originalTransactionID)?.state != .expired {
            guard ContinuousClock.now < deadline else {
                Issue.record("the subscription never expired")
                break
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let row = try #require(try ledger.subscription(originalID: first.originalTransactionID))
        #expect(row.periodsPaid == 2, "the renewal in flight was charged and recorded")
        #expect(!row.willAutoRenew, "the renewal's write turned auto-renew back on")
        #expect(row.expirationReason == .cancelled)
        let charges: [Substring] = try String(contentsOfFile: chargeLog, encoding: .utf8).split(separator: "\n")
        #expect(charges.count == 2, "the purchase and one renewal: \(charges)")
        await client.close()
        await store.signal(SIGTERM)
    }
}
