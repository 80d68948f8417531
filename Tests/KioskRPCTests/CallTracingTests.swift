import Foundation
import KioskRPC
import KioskWire
import NIOConcurrencyHelpers
import Testing
import Tracing

/// Spans per call: a server span joins its caller's trace through W3C `traceparent` metadata, its handler's work
/// (a call to another server) is a child of it, inline answers and failures are recorded with their status, and a
/// `traceparent` that is not a valid one starts a trace of its own.
@Suite(.timeLimit(.minutes(1))) struct CallTracingTests {
    /// Collects a tracer's lines, parsed.
    final class Spans: Sendable {
        private let lines = NIOLockedValueBox<[String]>([])
        func sink(_ line: String) { lines.withLockedValue { $0.append(line) } }
        var all: [[String: Any]] {
            lines.withLockedValue { $0 }.compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }
        func named(_ name: String, kind: String? = nil) -> [[String: Any]] {
            all.filter { $0["name"] as? String == name && (kind == nil || $0["kind"] as? String == kind) }
        }
    }

    /// Relays a Ping to another server's Echo, through a client of its own.
    struct Relay: RPCService {
        static let method = "/kiosk.test.v1.Relay/Forward"
        var serviceName: String { "kiosk.test.v1.Relay" }
        let next: RPCClient

        func register(in router: inout RPCRouter) {
            let next = self.next
            router.registerUnary(Self.method, request: Ping.self, response: CallHeaders.self) { request, _ in
                _ = try await next.unary(TestService.prefix + "Echo", request: request) as Ping
                return try await next.unary(TestService.prefix + "Whoami", request: request)
            }
        }
    }

    @Test func traceparentIsReadStrictly() throws {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        let parsed = try #require(TraceParent(header: valid))
        #expect(parsed.traceID == "4bf92f3577b34da6a3ce929d0e0e4736" && parsed.spanID == "00f067aa0ba902b7")
        #expect(parsed.sampled && parsed.header == valid)
        #expect(TraceParent(header: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")?.sampled == false)
        // A later version may add fields after the flags; version 00 may not.
        #expect(TraceParent(header: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra") != nil)
        for invalid in [
            "", "00", valid + "-extra", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736\n-00f067aa0ba902b7-01",
        ] {
            #expect(TraceParent(header: invalid) == nil, "\(invalid)")
        }
    }

    /// A root span's ids are fresh: lower-case hex of W3C's lengths (16 and 8 bytes), valid as a `traceparent`,
    /// and different for every span.
    @Test func rootSpansTakeFreshValidIDs() throws {
        let spans = Spans()
        let tracer = JSONSpanTracer(service: "ids", sink: spans.sink)
        for _ in 0..<64 { tracer.startSpan("root", context: ServiceContext.topLevel).end() }
        let ids = spans.all.map { ($0["trace_id"] as? String ?? "", $0["span_id"] as? String ?? "") }
        #expect(ids.count == 64)
        for (trace, span) in ids {
            #expect(trace.utf8.count == 32 && span.utf8.count == 16, "\(trace) \(span)")
            #expect(TraceParent(header: "00-\(trace)-\(span)-01") != nil, "\(trace) \(span)")
        }
        #expect(Set(ids.map(\.0)).count == 64 && Set(ids.map(\.1)).count == 64)
        // Each position of the trace ids takes many digits across the spans: no byte of them is left unfilled.
        for position in 0..<32 {
            let digits = Set(ids.map { Array($0.0.utf8)[position] })
            #expect(digits.count > 4, "position \(position): \(digits)")
        }
    }

    @Test func aCallJoinsItsCallersTraceThroughTwoServers() async throws {
        let spans = Spans()
        var inner = ServerConfiguration(shutdownGracePeriod: .seconds(5))
        inner.tracer = JSONSpanTracer(service: "inner", sink: spans.sink)
        let innerServer = RPCServer(configuration: inner, services: [TestService(probe: Probe())])
        try await innerServer.start()
        var relayClientConfiguration = ClientConfiguration()
        relayClientConfiguration.tracer = JSONSpanTracer(service: "relay", sink: spans.sink)
        let relayClient = RPCClient(
            host: "127.0.0.1", port: try #require(innerServer.port), configuration: relayClientConfiguration)
        var outer = ServerConfiguration(shutdownGracePeriod: .seconds(5))
        outer.tracer = JSONSpanTracer(service: "relay", sink: spans.sink)
        let relayServer = RPCServer(configuration: outer, services: [Relay(next: relayClient)])
        try await relayServer.start()
        let appTracer = JSONSpanTracer(service: "app", sink: spans.sink)
        var appConfiguration = ClientConfiguration()
        appConfiguration.tracer = appTracer
        let app = RPCClient(host: "127.0.0.1", port: try #require(relayServer.port), configuration: appConfiguration)

        let root = appTracer.startSpan("checkout")
        let seen: CallHeaders = try await ServiceContext.$current.withValue(root.context) {
            var metadata = Metadata()
            metadata.add(RequestScope.metadataKey, "checkout-1")
            return try await app.unary(Relay.method, request: Ping(opaque: 2), options: CallOptions(metadata: metadata))
        }
        root.end()
        // A call made outside any span.
        let lone = RPCClient(host: "127.0.0.1", port: try #require(innerServer.port), configuration: appConfiguration)
        _ = try await lone.unary(TestService.prefix + "Echo", request: Ping(opaque: 1)) as Ping
        await lone.close()
        await app.close()
        await relayServer.shutdown(gracePeriod: .seconds(5))
        await relayClient.close()
        await innerServer.shutdown(gracePeriod: .seconds(5))

        let trace = try #require(root.context.traceParent).traceID
        func one(_ name: String, _ kind: String, service: String) throws -> [String: Any] {
            let found = spans.named(name, kind: kind).filter { $0["service"] as? String == service }
            #expect(found.count == 1, "\(name) \(kind) \(service): \(spans.all)")
            return try #require(found.first)
        }
        let appCall = try one(Relay.method, "client", service: "app")
        let relayed = try one(Relay.method, "server", service: "relay")
        let echoCall = try one(TestService.prefix + "Echo", "client", service: "relay")
        let whoamiCall = try one(TestService.prefix + "Whoami", "client", service: "relay")
        let whoami = try one(TestService.prefix + "Whoami", "server", service: "inner")
        let echo = try #require(
            spans.named(TestService.prefix + "Echo", kind: "server").first { $0["trace_id"] as? String == trace })
        for span in [appCall, relayed, echoCall, whoamiCall, whoami, echo] {
            #expect(span["trace_id"] as? String == trace, "\(span)")
            #expect(span["status"] as? String == "unset")
            #expect((span["attributes"] as? [String: Any])?["rpc.grpc.status_code"] as? Int == 0)
        }
        #expect(appCall["parent_span_id"] as? String == root.context.traceParent?.spanID)
        #expect(relayed["parent_span_id"] as? String == appCall["span_id"] as? String)
        #expect((relayed["attributes"] as? [String: Any])?["kiosk.request_id"] as? String == "checkout-1")
        #expect((relayed["attributes"] as? [String: Any])?["rpc.service"] as? String == "kiosk.test.v1.Relay")
        #expect(echoCall["parent_span_id"] as? String == relayed["span_id"] as? String)
        #expect(whoamiCall["parent_span_id"] as? String == relayed["span_id"] as? String)
        #expect(echo["parent_span_id"] as? String == echoCall["span_id"] as? String)
        #expect(whoami["parent_span_id"] as? String == whoamiCall["span_id"] as? String)
        // What reached the inner server: the relay's client span as the parent, sampled.
        #expect(seen.metadata["traceparent"] == "00-\(trace)-\(whoamiCall["span_id"] as? String ?? "")-01")
        // The call made outside a span is a trace of its own.
        let loneSpans = spans.named(TestService.prefix + "Echo", kind: "client").filter {
            $0["service"] as? String == "app"
        }
        #expect(loneSpans.count == 1 && loneSpans.first?["trace_id"] as? String != trace)
        #expect(loneSpans.first?["parent_span_id"] == nil)
    }

    @Test func inlineAnswersFailuresAndForgedContextsAreRecorded() async throws {
        let spans = Spans()
        var configuration = ServerConfiguration(shutdownGracePeriod: .seconds(5))
        configuration.tracer = JSONSpanTracer(service: "server", sink: spans.sink)
        try await withServer(configuration: configuration) { server, client in
            // Answered inline, on the event loop; then one that suspends and answers from a task.
            _ = try await client.unary(TestService.prefix + "InlineEcho", request: Ping(opaque: 2)) as Ping
            _ = try await client.unary(TestService.prefix + "InlineEcho", request: Ping(opaque: 3)) as Ping
            await #expect(throws: RPCError.self) {
                _ = try await client.unary(TestService.prefix + "Fail", request: Ping(opaque: 0)) as Ping
            }
            for forged in [
                "00-zz-yy-01", String(repeating: "a", count: 4000),
                "00-\(String(repeating: "0", count: 32))-00f067aa0ba902b7-01",
            ] {
                var metadata = Metadata()
                metadata.add("traceparent", forged)
                _ =
                    try await client.unary(
                        TestService.prefix + "Echo", request: Ping(opaque: 1), options: CallOptions(metadata: metadata))
                    as Ping
            }
        }
        let inline = spans.named(TestService.prefix + "InlineEcho", kind: "server")
        #expect(inline.count == 2, "\(spans.all)")
        let failed = try #require(spans.named(TestService.prefix + "Fail", kind: "server").first)
        #expect(failed["status"] as? String == "error")
        #expect((failed["attributes"] as? [String: Any])?["rpc.grpc.status_code"] as? Int != 0)
        // Invalid parents are ignored: each call is the root of a trace of its own.
        let echoes = spans.named(TestService.prefix + "Echo", kind: "server")
        #expect(echoes.count == 3)
        #expect(echoes.allSatisfy { $0["parent_span_id"] == nil })
        #expect(Set(echoes.compactMap { $0["trace_id"] as? String }).count == 3)
    }
}
