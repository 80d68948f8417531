import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStoreTestSupport
import KioskTesting
import Testing

@testable import KioskStore

/// Webhooks: every event POSTed, signed, in order per account, retried with backoff through a receiver that is
/// down and then failing, exactly once by event id; the position survives a restart; failures are visible and re-drivable.
@Suite(.timeLimit(.minutes(2))) struct WebhookTests {
    /// Waits (bounded) for `condition`: the delivery loop runs on its own.
    static func eventually(
        _ what: String, within limit: Duration = .seconds(30), _ condition: () throws -> Bool
    ) async throws {
        let deadline = ContinuousClock.now + limit
        while try !condition() {
            guard ContinuousClock.now < deadline else {
                throw StoreError(.internalFailure, "timed out waiting for \(what)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    static func configuration(_ directory: String) throws -> StoreConfiguration {
        var configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: testCatalog, revocationPollInterval: .milliseconds(50)
        ).onTestLedger()
        configuration.webhooks.initialBackoff = .milliseconds(50)
        configuration.webhooks.maximumBackoff = .milliseconds(200)
        configuration.webhooks.pollInterval = .milliseconds(50)
        configuration.webhooks.requestTimeout = .seconds(2)
        return configuration
    }

    /// Starts `receiver` again on `port`, which was free while it was down: with the tests running in
    /// parallel, another test's outgoing connection can hold it as its local port for a while (EADDRINUSE:
    /// a CI run failed so), so the bind is tried again for up to 20 s.
    static func start(_ receiver: WebhookReceiver, on port: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            do {
                return try await receiver.start(port: port)
            } catch  where ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    @Test func aReceiverDownThenFailingGetsEveryEventOnceInOrderSigned() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A port nobody listens on (yet): deliveries are refused.
        let receiver = WebhookReceiver()
        try await receiver.start()
        try await receiver.shutdown()
        let secret = Array((0..<32).map { _ in UInt8.random(in: 0...255) })

        var server = try StoreServer(store: try Self.configuration(directory))
        try await server.start()
        let store = server.store
        let hook = try await store.addWebhook(url: "http://127.0.0.1:\(receiver.port)/kiosk", secret: secret)
        var accounts: [AccountRecord] = []
        for _ in 0..<2 {
            let (id, _) = try store.createAccount()
            accounts.append(try #require(try store.ledger.account(id: id)))
        }
        var bought: [TransactionRecord] = []
        for round in 0..<3 {
            for account in accounts {
                let outcome = try await store.purchase(
                    account: account, productID: round == 0 ? "filter.sepia" : "credits.5", quantity: 1,
                    paymentMethod: goodCard, idempotencyKey: nil)
                guard case .purchased(let record) = outcome.result else {
                    Issue.record("not purchased")
                    return
                }
                bought.append(record)
            }
        }
        _ = try await store.refund(transactionID: bought[0].id, reason: "customer request")
        try await store.recordTestEvent()
        let events = try await store.ledger.events(after: 0)
        #expect(events.count == 8)

        // Down: every account's first delivery has been refused at least twice, and nothing after it was tried.
        try await Self.eventually("two refused attempts") {
            let pending = try store.webhookDeliveries(state: .pending)
            return pending.count == 8 && pending.filter { $0.attempts >= 2 }.count >= 2
        }
        #expect(try store.webhookDeliveries(state: .pending).allSatisfy { $0.attempts == 0 || !$0.lastError.isEmpty })

        // A restart: the new process resumes from the ledger.
        await server.shutdown()
        server = try StoreServer(store: try Self.configuration(directory))
        try await server.start()
        let restarted = server.store

        // Back up, but answering 500 twice first.
        receiver.failNext(2, status: 500)
        try await Self.start(receiver, on: receiver.port)
        try await Self.eventually("every delivery") { try restarted.webhookDeliveries(state: .delivered).count == 8 }
        try await server.shutdown()
        try await receiver.shutdown()

        let requests = receiver.requests
        #expect(requests.filter { $0.status == 500 }.count == 2)
        let keys = try restarted.publicKeys()
        var firstSeen: [UInt64] = []
        for request in requests {
            #expect(request.path == "/kiosk")
            #expect(
                WebhookSignature.isValid(
                    request.headers["kiosk-signature"] ?? "", body: request.body, secret: secret,
                    nowMs: Int64(Date().timeIntervalSince1970 * 1000)))
            let json = try #require(try JSONSerialization.jsonObject(with: Data(request.body)) as? [String: Any])
            let id = try #require((json["event_id"] as? NSNumber)?.uint64Value)
            #expect(request.headers["kiosk-event-id"] == "\(id)")
            // The Ed25519-signed event in the body says the same.
            let encoded = try #require(json["signed_event"] as? String)
            let signed = try StoreV1.SignedEvent(serializedBytes: Array(try #require(Data(base64Encoded: encoded))))
            #expect(try signed.verified(with: keys).eventID == id)
            if request.status == 200 { firstSeen.append(id) }
        }
        // Exactly once by id (answered 200 once each), every event.
        #expect(firstSeen.count == 8 && Set(firstSeen) == Set(events.map(\.id)))
        // In order per account.
        for account in accounts.map(\.id) + [""] {
            let mine = events.filter { $0.accountID == account }.map(\.id)
            #expect(firstSeen.filter { mine.contains($0) } == mine, "account \(account)")
        }
        #expect(try restarted.webhooks().map(\.id) == [hook.id])
    }

    @Test func deliveriesThatNeverSucceedAreMarkedFailedAndCanBeRedriven() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let receiver = WebhookReceiver()
        try await receiver.start()
        receiver.failNext(1_000, status: 503)
        var configuration = try Self.configuration(directory)
        configuration.webhooks.retryFor = .milliseconds(300)
        let server = try StoreServer(store: configuration)
        try await server.start()
        let store = server.store
        _ = try await store.addWebhook(
            url: "http://127.0.0.1:\(receiver.port)/kiosk", secret: Array(repeating: 7, count: 16))
        try await store.recordTestEvent()
        try await Self.eventually("a failed delivery") { try store.webhookDeliveries(state: .failed).count == 1 }
        let failed = try #require(try store.webhookDeliveries(state: .failed).first)
        #expect(failed.lastError == "HTTP 503" && failed.attempts >= 2)
        receiver.failNext(0)
        let stillFailing = receiver.requests.count
        #expect(stillFailing >= 2)
        // The receiver is fixed: re-driven, it arrives.
        let receiverFixed = WebhookReceiver()
        try await receiver.shutdown()
        try await Self.start(receiverFixed, on: receiver.port)
        #expect(try await store.redriveWebhookDeliveries() == 1)
        try await Self.eventually("the re-driven delivery") {
            try store.webhookDeliveries(state: .delivered).count == 1
        }
        #expect(receiverFixed.requests.count == 1)
        await server.shutdown()
        try await receiverFixed.shutdown()

        // A forged timestamp at Int64's limits is refused, not a crash; an old one is refused.
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        for forged in ["t=-9223372036854775808,v1=00", "t=9223372036854775807,v1=00", "v1=00", "t=,v1=", ""] {
            #expect(!WebhookSignature.isValid(forged, body: [1], secret: [2], nowMs: nowMs))
        }
        let stale = WebhookSignature.value(body: [1], secret: [2], timestampMs: nowMs - 600_000)
        #expect(!WebhookSignature.isValid(stale, body: [1], secret: [2], nowMs: nowMs))
        #expect(
            WebhookSignature.isValid(
                WebhookSignature.value(body: [1], secret: [2], timestampMs: nowMs), body: [1], secret: [2], nowMs: nowMs
            ))

        // Bad input is refused with a reason.
        await #expect(throws: StoreError.self) {
            try await store.addWebhook(url: "ftp://example.com/x", secret: Array(repeating: 1, count: 16))
        }
        await #expect(throws: StoreError.self) {
            try await store.addWebhook(url: "http://127.0.0.1:1/x", secret: [1, 2, 3])
        }
    }

    /// The example receiver of Scripts/examples checks the signature and prints each event once.
    @Test func theExampleReceiverVerifiesAndPrintsEvents() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Scripts/examples/webhook-receiver.py").path
        let secretFile = directory + "/hook.secret"
        try Data("an example secret, long enough\n".utf8).write(to: URL(fileURLWithPath: secretFile))
        let probe = WebhookReceiver()
        try await probe.start()
        let port = probe.port
        try await probe.shutdown()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, "--port", "\(port)", "--secret-file", secretFile]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Only the child writes to the pipe: its exit is the end of the output.
        try output.fileHandleForWriting.close()
        // SIGKILL: a test process may ignore SIGTERM, and its children inherit that.
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let server = try StoreServer(store: try Self.configuration(directory))
        try await server.start()
        let secret = Array("an example secret, long enough".utf8)
        _ = try await server.store.addWebhook(url: "http://127.0.0.1:\(port)/kiosk", secret: secret)
        let event = try await server.store.recordTestEvent(reason: "wired up?")
        try await Self.eventually("the example's answer") {
            try server.store.webhookDeliveries(state: .delivered).count == 1
        }
        // A wrong secret is refused (401) and stays pending.
        _ = try await server.store.addWebhook(
            url: "http://127.0.0.1:\(port)/kiosk", secret: Array("not the secret at all!".utf8), since: 0)
        try await Self.eventually("a refused delivery") {
            try server.store.webhookDeliveries(state: .pending).contains { $0.lastError == "HTTP 401" }
        }
        await server.shutdown()
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let lines = printed.split(separator: "\n")
        #expect(lines.count == 1, "\(printed)")
        let json = try #require(
            try JSONSerialization.jsonObject(with: Data((lines.first ?? "").utf8)) as? [String: Any])
        #expect(
            json["type"] as? String == "TEST" && (json["event_id"] as? NSNumber)?.uint64Value == event.id
                && json["reason"] as? String == "wired up?")
    }
}
