import Crypto
import Foundation
import KioskTesting
import Testing

@testable import Kiosk

/// The SDK given two replicas of each service: a replica that dies mid-call costs a retry on the other, not an error.
/// The "dying replica" is a relay in front of the session's service that is killed (listener and connections).
@Suite(.timeLimit(.minutes(2))) struct ReplicaFailoverTests {
    static func endpoint(_ port: Int) -> ServiceEndpoint { ServiceEndpoint(host: "127.0.0.1", port: port) }

    @Test func aPurchaseWhoseReplicaDiesAfterCommittingIsAnsweredByTheOtherWithoutASecondCharge() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let dying = try await RecordingRelay.start(to: session.storePort)
            let state = NSTemporaryDirectory() + "kiosk-state-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            var configuration = session.configuration(account: account, stateDirectory: state)
            configuration.storeEndpoints = [Self.endpoint(dying.port), Self.endpoint(session.storePort)]
            let kiosk = try KioskClient(configuration: configuration)

            session.holdNextAnswer()  // committed; the answer never leaves the first replica
            let purchase = Task { try await kiosk.purchase(productID: "credits.5", quantity: 2, paymentMethod: card) }
            let committed = ContinuousClock.now + .seconds(20)
            while try session.store.ledger.transactions(accountID: account.id).isEmpty, ContinuousClock.now < committed
            {
                try await Task.sleep(for: .milliseconds(5))
            }
            await dying.kill()

            guard case .success(let transaction) = try await purchase.value else {
                Issue.record("the purchase must be answered by the other replica, not queued")
                return
            }
            #expect(transaction.purchasedQuantity == 2)
            #expect(session.payments.chargeCount == 1)
            #expect(try session.store.ledger.transactions(accountID: account.id).map(\.id) == [transaction.id])
            #expect(try await kiosk.creditBalance == 10)
            #expect(kiosk.queuedPaymentCount == 0)
            await kiosk.close()
        }
    }

    @Test func aDownloadWhoseReplicaDiesMidStreamResumesOnTheOther() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            // Dies once 3 kB came through it: the 1 MiB text file compresses to about 8 kB in four chunks.
            let dying = try await RecordingRelay.start(to: session.contentPort, cutAfter: 3_000)
            let state = NSTemporaryDirectory() + "kiosk-state-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            var configuration = session.configuration(account: account, stateDirectory: state)
            configuration.contentEndpoints = [Self.endpoint(dying.port), Self.endpoint(session.contentPort)]
            let kiosk = try KioskClient(configuration: configuration)
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("expected success")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-dl-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }
            let file = try await kiosk.download(productID: "book.swift", transaction: transaction, to: directory)
                .result()
            #expect(dying.recorded.withLockedValue { $0.count } >= 3_000, "the first replica died mid-download")
            #expect([UInt8](try Data(contentsOf: file)) == KioskTestSession.sampleContent["book.swift"])
            await kiosk.close()
        }
    }

    @Test func restoreBrokenByADyingReplicaIsAnsweredByTheOther() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let buyer = try session.makeClient(account: account)
            for product in ["filter.sepia", "book.swift"] {
                guard case .success = try await buyer.purchase(productID: product, paymentMethod: card) else {
                    Issue.record("expected success")
                    return
                }
            }
            await buyer.close()
            // Dies as the store's first answer comes back through it.
            let dying = try await RecordingRelay.start(to: session.storePort, cutAfter: 1)
            let state = NSTemporaryDirectory() + "kiosk-state-" + UUID().uuidString
            defer { try? FileManager.default.removeItem(atPath: state) }
            var configuration = session.configuration(account: account, stateDirectory: state)
            configuration.storeEndpoints = [Self.endpoint(dying.port), Self.endpoint(session.storePort)]
            let kiosk = try KioskClient(configuration: configuration)
            var restored: [String] = []
            for try await transaction in kiosk.restore() { restored.append(transaction.productID) }
            #expect(restored.sorted() == ["book.swift", "filter.sepia"])
            #expect(!dying.recorded.withLockedValue { $0.isEmpty }, "the restore went to the first replica first")
            await kiosk.close()
        }
    }
}
