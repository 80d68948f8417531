import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskTesting
import KioskWire
import NIOConcurrencyHelpers
import Testing
import Tracing

/// `kiosk-store serve --trace-log FILE`: a purchase made inside a client's span is one trace, from the client's
/// span through the store's server span to its ledger writes and the payment processor's charge, and the webhook
/// delivery of its event, made later by the delivery loop, joins the same trace and carries the call's request id
/// to the receiver.
@Suite(.timeLimit(.minutes(2))) struct TraceLogTests {
    @Test func aPurchaseIsOneTraceFromTheClientToItsWebhook() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let created = try await StoreProcess.run(["account", "create", "--data-dir", directory, "--json"])
        let token = try #require(
            created.split(separator: "\"").drop { $0 != "token" }.dropFirst(2).first.map(String.init))
        let receiver = WebhookReceiver()
        try await receiver.start()
        let secretFile = directory + "/webhook-secret"
        try Data(String(repeating: "s", count: 32).utf8).write(to: URL(fileURLWithPath: secretFile))
        _ = try await StoreProcess.run([
            "webhook", "add", "--data-dir", directory, "--secret-file", secretFile,
            "http://127.0.0.1:\(receiver.port)/kiosk",
        ])
        let traceLog = directory + "/traces.jsonl"
        let store = try await StoreProcess(dataDirectory: directory, extraArguments: ["--trace-log", traceLog])

        let collected = NIOLockedValueBox<[String]>([])
        let tracer = JSONSpanTracer(service: "app") { line in collected.withLockedValue { $0.append(line) } }
        var configuration = ClientConfiguration()
        configuration.tracer = tracer
        let client = RPCClient(host: "127.0.0.1", port: store.port, configuration: configuration)
        let root = tracer.startSpan("checkout")
        let bought = try await ServiceContext.$current.withValue(root.context) {
            var metadata = Metadata()
            metadata.add("authorization", "Bearer \(token)")
            metadata.add(RequestScope.metadataKey, "checkout-42")
            return try await client.unary(
                "/kiosk.store.v1.Store/Purchase",
                request: StoreV1.PurchaseRequest(productID: "book.swift", quantity: 1, paymentMethod: goodCard),
                response: StoreV1.PurchaseResponse.self, options: CallOptions(timeout: .seconds(10), metadata: metadata)
            )
        }
        root.end()
        let transactionID = try #require(bought.transaction?.transactionID)
        // The delivery loop POSTs the purchase's event within its poll interval.
        let deadline = ContinuousClock.now + .seconds(30)
        while !receiver.requests.contains(where: { String(decoding: $0.body, as: UTF8.self).contains(transactionID) }) {
            guard ContinuousClock.now < deadline else { throw RPCError(.deadlineExceeded, "no webhook delivery") }
            try await Task.sleep(for: .milliseconds(20))
        }
        await client.close()
        await store.signal(SIGTERM)
        try await receiver.shutdown()

        let trace = try #require(root.context.traceParent?.traceID)
        let clientSpan = try #require(
            collected.withLockedValue { $0 }.compactMap(Self.object).first {
                $0["name"] as? String == "/kiosk.store.v1.Store/Purchase"
            })
        let spans = try String(contentsOfFile: traceLog, encoding: .utf8).split(separator: "\n").map {
            try #require(Self.object(String($0)), "not JSON: \($0)")
        }
        let server = try #require(spans.first { $0["name"] as? String == "/kiosk.store.v1.Store/Purchase" })
        #expect(server["trace_id"] as? String == trace && server["kind"] as? String == "server")
        #expect(server["service"] as? String == "kiosk-store")
        #expect(server["parent_span_id"] as? String == clientSpan["span_id"] as? String)
        #expect((server["attributes"] as? [String: Any])?["kiosk.request_id"] as? String == "checkout-42")
        let serverID = try #require(server["span_id"] as? String)
        let writes = spans.filter { $0["name"] as? String == "ledger.write" && $0["trace_id"] as? String == trace }
        #expect(!writes.isEmpty && writes.allSatisfy { $0["parent_span_id"] as? String == serverID }, "\(spans)")
        let charge = try #require(spans.first { $0["name"] as? String == "payment.charge" }, "\(spans)")
        #expect(charge["trace_id"] as? String == trace && charge["parent_span_id"] as? String == serverID)
        #expect(charge["kind"] as? String == "client")
        // The delivery: a child of the write that recorded the event, with the call's request id sent along.
        let post = try #require(
            receiver.requests.first {
                $0.headers["kiosk-event-type"] == "PURCHASED"
                    && String(decoding: $0.body, as: UTF8.self).contains(transactionID)
            }, "\(receiver.requests.map(\.headers))")
        let delivery = try #require(
            spans.first {
                $0["name"] as? String == "webhook.deliver"
                    && ($0["attributes"] as? [String: Any])?["kiosk.event_id"] as? Int
                        == Int(post.headers["kiosk-event-id"] ?? "")
            }, "\(spans)")
        #expect(delivery["trace_id"] as? String == trace)
        #expect(writes.contains { $0["span_id"] as? String == delivery["parent_span_id"] as? String })
        #expect(post.headers["x-request-id"] == "checkout-42")
        #expect(post.headers["traceparent"] == "00-\(trace)-\(delivery["span_id"] as? String ?? "")-01")
        // No secret in a span: the token, the card.
        let text = try String(contentsOfFile: traceLog, encoding: .utf8)
        for secret in [token, "4242424242424242"] { #expect(!text.contains(secret)) }
    }

    static func object(_ line: String) -> [String: Any]? {
        try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    }
}
