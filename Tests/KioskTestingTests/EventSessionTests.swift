import Foundation
import Kiosk
import KioskTesting
import Testing

/// What the SDK learns from the account's events: a refund of a delivered, finished purchase comes back on
/// transactionUpdates with its revocation, and the entitlement is gone; lookups and the paged history.
@Suite(.timeLimit(.minutes(1))) struct EventSessionTests {
    /// Until the client's first look at the account's events saved its cursor (what happens after is news to it).
    static func waitForEventCursor(_ directory: String) async throws {
        let path = directory + "/events.cursor"
        let deadline = ContinuousClock.now + .seconds(10)
        while !FileManager.default.fileExists(atPath: path) {
            guard ContinuousClock.now < deadline else {
                throw KioskError(.unknown, "the client never read the account's events")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    @Test func aRefundAfterDeliveryComesBackOnUpdatesAndEndsTheEntitlement() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let account = try session.makeAccount()
        let directory = NSTemporaryDirectory() + "kiosk-events-" + UUID().uuidString
        let kiosk = try session.makeClient(account: account, stateDirectory: directory)
        try await Self.waitForEventCursor(directory)
        let updates = kiosk.transactionUpdates
        guard
            case .success(let bought) = try await kiosk.purchase(
                productID: "filter.sepia", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        try await kiosk.finish(bought)
        #expect(try await kiosk.currentEntitlements.map(\.id) == [bought.id])

        // The buyer asks; the operator's refund grants it.
        let asked = try await kiosk.requestRefund(transactionID: bought.id, reason: "it did not work")
        #expect(
            asked.state == .pending && asked.reason == "it did not work" && asked.productID == "filter.sepia"
                && asked.decisionDate == nil)
        #expect(
            try await kiosk.requestRefund(transactionID: bought.id, reason: "again") == asked,
            "asking again answers the same request")
        let refundedAt = ContinuousClock.now
        try await session.refund(transactionID: bought.id, reason: "customer request")
        var revoked: Transaction?
        for await transaction in updates where transaction.id == bought.id {
            revoked = transaction
            break
        }
        // Within the client's poll interval (the session's: 200 ms), with a second's slack for a loaded machine.
        let took = refundedAt.duration(to: .now)
        #expect(took < .milliseconds(200) + .seconds(1), "the refund reached transactionUpdates after \(took)")
        #expect(revoked?.revocationDate != nil && revoked?.revocationReason == "customer request")
        #expect(try await kiosk.currentEntitlements.isEmpty)
        let granted = try await kiosk.requestRefund(transactionID: bought.id, reason: "")
        #expect(
            granted.state == .granted && granted.decisionReason == "customer request" && granted.decisionDate != nil)

        // Lookups and the paged history, consumables included.
        guard
            case .success(let credits) = try await kiosk.purchase(
                productID: "credits.5", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        #expect(try await kiosk.transaction(id: credits.id).productID == "credits.5")
        var all: [String] = []
        for try await transaction in Transaction.all(in: kiosk) { all.append(transaction.id) }
        #expect(all == [bought.id, credits.id])
        var refunded: [String] = []
        for try await transaction in kiosk.allTransactions(revokedOnly: true, pageSize: 1) {
            refunded.append(transaction.id)
        }
        #expect(refunded == [bought.id])
        await #expect(throws: KioskError.self) { try await kiosk.transaction(id: "tx_unknown") }

        // A new client on the same state directory resumes after the saved cursor: the old refund is not news.
        await kiosk.close()
        let again = try session.makeClient(account: account, stateDirectory: directory)
        let laterUpdates = again.transactionUpdates
        guard
            case .success(let other) = try await again.purchase(
                productID: "book.swift", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        try await again.finish(other)
        try await session.refund(transactionID: other.id)
        for await transaction in laterUpdates where transaction.revocationDate != nil {
            #expect(transaction.id == other.id, "the refund before the cursor is not yielded again")
            break
        }
        await again.close()
        await session.shutdown()
    }

    /// A dispute revokes (the update carries the revocation); the dispute won restores: the transaction comes back
    /// on transactionUpdates without a revocation, the entitlement returns, and a consumable's credits come back.
    @Test func aWonDisputeComesBackOnUpdatesAndRestoresTheEntitlement() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let account = try session.makeAccount()
        let directory = NSTemporaryDirectory() + "kiosk-events-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let kiosk = try session.makeClient(account: account, stateDirectory: directory)
        try await Self.waitForEventCursor(directory)
        let updates = kiosk.transactionUpdates
        guard
            case .success(let bought) = try await kiosk.purchase(
                productID: "filter.sepia", paymentMethod: "test-card:4242424242424242"),
            case .success(let credits) = try await kiosk.purchase(
                productID: "credits.5", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        try await kiosk.finish(bought)
        try await kiosk.finish(credits)
        #expect(try await kiosk.creditBalance == 5)

        try await session.openDispute(transactionID: bought.id)
        try await session.openDispute(transactionID: credits.id)
        var seen: [String: Transaction] = [:]
        for await transaction in updates {
            seen[transaction.id] = transaction
            if seen.count == 2 { break }
        }
        #expect(seen[bought.id]?.revocationDate != nil && seen[bought.id]?.revocationReason == "disputed: fraudulent")
        #expect(try await kiosk.currentEntitlements.isEmpty)
        #expect(try await kiosk.creditBalance == 0)

        try await session.winDispute(transactionID: bought.id)
        try await session.winDispute(transactionID: credits.id)
        seen = [:]
        for await transaction in updates {
            seen[transaction.id] = transaction
            if seen.count == 2 { break }
        }
        #expect(seen[bought.id] != nil && seen[bought.id]?.revocationDate == nil)
        #expect(seen[credits.id] != nil && seen[credits.id]?.revocationDate == nil)
        #expect(try await kiosk.currentEntitlements.map(\.id) == [bought.id])
        #expect(try await kiosk.creditBalance == 5)
        #expect(try await kiosk.verify(receipt: bought.signedReceipt).isValid)
        await kiosk.close()
        await session.shutdown()
    }

    /// The events file names its account: a state directory used by another account (or against another store)
    /// starts that account at the end of the log, not from the other's cursor.
    @Test func aStateDirectoryReusedByAnotherAccountDoesNotTakeItsCursor() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let first = try session.makeAccount()
        let second = try session.makeAccount()
        let directory = NSTemporaryDirectory() + "kiosk-events-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let kiosk = try session.makeClient(account: first, stateDirectory: directory)
        try await Self.waitForEventCursor(directory)
        await kiosk.close()
        #expect(try String(contentsOfFile: directory + "/events.cursor", encoding: .utf8).hasPrefix(first.id + " "))

        // The second account's refund, made before it uses this directory, is history to it.
        let other = try session.makeClient(account: second)
        guard
            case .success(let old) = try await other.purchase(
                productID: "filter.sepia", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        try await other.finish(old)
        try await session.refund(transactionID: old.id)
        await other.close()

        // The directory still holds the first account's cursor, from before that refund.
        let reused = try session.makeClient(account: second, stateDirectory: directory)
        let updates = reused.transactionUpdates
        let deadline = ContinuousClock.now + .seconds(10)
        while !((try? String(contentsOfFile: directory + "/events.cursor", encoding: .utf8))?.hasPrefix(second.id + " ")
            ?? false)
        {
            #expect(ContinuousClock.now < deadline, "the client never saved its own cursor")
            if ContinuousClock.now >= deadline { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        guard
            case .success(let fresh) = try await reused.purchase(
                productID: "book.swift", paymentMethod: "test-card:4242424242424242")
        else {
            Issue.record("expected success")
            return
        }
        try await reused.finish(fresh)
        try await session.refund(transactionID: fresh.id)
        for await transaction in updates where transaction.revocationDate != nil {
            #expect(transaction.id == fresh.id, "the refund before this account used the directory is not yielded")
            break
        }
        await reused.close()
        await session.shutdown()
    }
}
