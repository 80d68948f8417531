import KioskRPC
import KioskWire
import Testing

/// The server's meter counts what its calls did: per method, calls by status code, latency, calls in flight and
/// message bytes, over each call path (a task, an inline answer, an inline call that suspends, a stream, a call to
/// no method); and the limits peers hit.
@Suite(.timeLimit(.minutes(1))) struct ServerMeterTests {
    static func method(_ reading: ServerMeter.Reading, _ name: String) throws -> ServerMeter.MethodReading {
        try #require(reading.methods.first { $0.method == (name == "unknown" ? name : TestService.prefix + name) })
    }

    @Test func everyCallPathIsCountedByMethodAndCode() async throws {
        var configuration = ServerConfiguration(shutdownGracePeriod: .seconds(5))
        configuration.metersCalls = true
        try await withServer(configuration: configuration) { server, client in
            for i in 0..<3 {
                _ = try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: UInt64(i))) as Ping
            }
            // Inline: two answered at once, one suspended (odd) and answered from a task.
            for opaque in [2, 4, 1] as [UInt64] {
                _ = try await client.unary(TestService.prefix + "InlineEcho", request: Ping(opaque: opaque)) as Ping
            }
            await #expect(throws: RPCError.self) {
                _ = try await client.unary(TestService.prefix + "Fail", request: Ping(opaque: 0)) as Ping
            }
            var streamed = 0
            for try await _ in client.serverStreaming(
                TestService.prefix + "Count", request: Ping(opaque: 3), response: Ping.self)
            { streamed += 1 }
            #expect(streamed == 3)
            await #expect(throws: RPCError.self) {
                _ = try await client.unary("/kiosk.test.v1.Test/NoSuchMethod", request: Ping(opaque: 0)) as Ping
            }

            let reading = server.meterReading()
            let echo = try Self.method(reading, "Echo")
            #expect(echo.opened == 3 && echo.byCode[0] == 3 && echo.inFlight == 0)
            #expect(echo.latencyBuckets.reduce(0, +) == 3 && echo.latencySumSeconds > 0)
            #expect(echo.bytesIn > 0 && echo.bytesOut > 0)
            let inline = try Self.method(reading, "InlineEcho")
            #expect(inline.opened == 3 && inline.byCode[0] == 3 && inline.inFlight == 0)
            #expect(inline.latencyBuckets.reduce(0, +) == 3)
            let fail = try Self.method(reading, "Fail")
            #expect(fail.byCode[Int(StatusCode.permissionDenied.rawValue)] == 1 && fail.byCode[0] == 0)
            let count = try Self.method(reading, "Count")
            #expect(count.byCode[0] == 1 && count.bytesOut >= 3)
            let unknown = try Self.method(reading, "unknown")
            #expect(unknown.opened == 0 && unknown.byCode[Int(StatusCode.unimplemented.rawValue)] == 1)
            #expect(reading.connectionsAccepted == 1 && reading.connectionsOpen == 1)
            #expect(reading.refusals.values.allSatisfy { $0 == 0 })
        }
    }

    @Test func callsInFlightAndTheLimitsPeersHit() async throws {
        let probe = Probe()
        let configuration = ServerConfiguration(
            shutdownGracePeriod: .seconds(5), limits: ServerLimits(maximumConnections: 1, maximumConcurrentCalls: 1))
        try await withServer(probe: probe, configuration: configuration) { server, client in
            async let held: Ping = client.unary(TestService.prefix + "Hold", request: Ping(opaque: 7))
            await probe.wait(for: .started(7))
            #expect(try Self.method(server.meterReading(), "Hold").inFlight == 1)
            // A second call on the connection is over its cap; a second connection over the server's.
            await #expect(throws: RPCError.self) {
                _ = try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1)) as Ping
            }
            let other = RPCClient(host: "127.0.0.1", port: server.port ?? 0)
            await #expect(throws: RPCError.self) {
                _ = try await other.unary(TestService.prefix + "Echo", request: Ping(opaque: 1)) as Ping
            }
            await other.close()
            probe.release()
            _ = try await held
            let reading = server.meterReading()
            let hold = try Self.method(reading, "Hold")
            #expect(hold.inFlight == 0 && hold.byCode[0] == 1)
            // Not metered: codes and flight are counted, latency is not.
            #expect(hold.latencyBuckets.isEmpty)
            #expect(try Self.method(reading, "Echo").byCode[Int(StatusCode.resourceExhausted.rawValue)] == 1)
            #expect(reading.refusals[.concurrentCalls] == 1)
            #expect((reading.refusals[.connections] ?? 0) >= 1)
        }
    }
}
