import KioskRPC
import KioskWire
import NIOCore
import NIOPosix
import Testing

/// Endpoint lists: parsing, pick-first, failing over when a replica goes away.
@Suite(.timeLimit(.minutes(1))) struct FailoverTests {
    static let quickBackoff = ConnectionBackoff(
        initial: .milliseconds(5), maximum: .milliseconds(20), multiplier: 2, jitter: 0.2, maximumAttempts: 2)
    static let configuration = ClientConfiguration(backoff: quickBackoff)

    @Test func endpointListsParse() throws {
        #expect(
            try Endpoint.list(parsing: "a:7301,10.0.0.2:7302, [::1]:7303") == [
                Endpoint(host: "a", port: 7301), Endpoint(host: "10.0.0.2", port: 7302),
                Endpoint(host: "::1", port: 7303),
            ])
        #expect(Endpoint(host: "::1", port: 7303).description == "[::1]:7303")
        #expect(try Endpoint(parsing: "store.example:443") == Endpoint(host: "store.example", port: 443))
        for bad in [
            "", "a", "a:", ":7301", "a:0", "a:65536", "a:x", "a:1,", "a:1,,b:2", "::1:7301", "[::1]7301", "a:1,a:1",
        ] {
            #expect(throws: EndpointSyntaxError.self, "\(bad.debugDescription) must be refused") {
                try Endpoint.list(parsing: bad)
            }
        }
    }

    @Test func picksTheFirstThatConnectsAndStaysOnIt() async throws {
        let dead = try ReservedPort()
        let (a, b) = (try await Self.server(), try await Self.server())
        let client = RPCClient(
            endpoints: [Self.endpoint(dead.port), Self.endpoint(a), Self.endpoint(b)], configuration: Self.configuration
        )
        // The first endpoint refuses: one attempt goes on to the second.
        #expect(
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self).opaque
                == 1)
        #expect(client.connectedEndpoint == Self.endpoint(a))
        for i in 2...5 {
            _ = try await client.unary(
                TestService.prefix + "Echo", request: Ping(opaque: UInt64(i)), response: Ping.self)
        }
        #expect(client.connectedEndpoint == Self.endpoint(a))
        #expect(a.connectionCount == 1 && b.connectionCount == 0)

        // A goes away: the next call connects to B and stays there when A is back.
        await a.shutdown()
        #expect(
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 6), response: Ping.self).opaque
                == 6)
        #expect(client.connectedEndpoint == Self.endpoint(b))
        await client.close()
        await b.shutdown()
    }

    @Test func aCallInFlightOnALostConnectionFailsAsLostAndTheNextGoesToTheOtherReplica() async throws {
        // A replica killed mid-call, as the client sees it: the connection closes once the call is on it.
        let killed = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in channel.pipeline.addHandler(CloseOnMethod(method: "Hold")) }
            .bind(host: "127.0.0.1", port: 0).get()
        let b = try await Self.server()
        let client = RPCClient(
            endpoints: [Self.endpoint(killed.localAddress?.port ?? 0), Self.endpoint(b)],
            configuration: Self.configuration)
        let lost = await #expect(throws: RPCError.self) {
            try await client.unary(TestService.prefix + "Hold", request: Ping(opaque: 7), response: Ping.self)
        }
        #expect(lost?.code == .unavailable)
        #expect(lost?.source == .connection)
        // Sent again at once (as the SDK does): the lost connection is already retired, so it goes to B.
        #expect(
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 8), response: Ping.self).opaque
                == 8)
        #expect(client.connectedEndpoint == Self.endpoint(b))
        await client.close()
        await b.shutdown()
        try? await killed.close()
    }

    @Test func aReplicaShuttingDownRefusesNewConnectionsSoClientsGoToTheOther() async throws {
        let probe = Probe()
        let (a, b) = (try await Self.server(probe: probe), try await Self.server())
        let first = RPCClient(endpoints: [Self.endpoint(a), Self.endpoint(b)], configuration: Self.configuration)
        // A call in flight keeps A draining for its grace period.
        let held = Task {
            try await first.unary(TestService.prefix + "Hold", request: Ping(opaque: 9), response: Ping.self)
        }
        await probe.wait(for: .started(9))
        a.beginShutdown()
        await a.waitUntilClosed()
        // A client that has not connected yet, A listed first: refused by A, served by B.
        let late = RPCClient(endpoints: [Self.endpoint(a), Self.endpoint(b)], configuration: Self.configuration)
        #expect(
            try await late.unary(TestService.prefix + "Echo", request: Ping(opaque: 10), response: Ping.self).opaque
                == 10)
        #expect(late.connectedEndpoint == Self.endpoint(b))
        // The draining connection still finishes its call.
        probe.release()
        #expect(try await held.value.opaque == 9)
        await a.shutdown()
        await first.close()
        await late.close()
        await b.shutdown()
    }

    @Test func everyEndpointDownIsAConnectFailureNamingThemAll() async throws {
        let (first, second) = (try ReservedPort(), try ReservedPort())
        let client = RPCClient(
            endpoints: [Self.endpoint(first.port), Self.endpoint(second.port)], configuration: Self.configuration)
        let error = await #expect(throws: RPCError.self) {
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self)
        }
        #expect(error?.source == .connect)
        #expect(error?.message.contains("after 2 attempt(s)") == true)
        #expect(error?.message.contains("127.0.0.1:\(first.port):") == true)
        #expect(error?.message.contains("127.0.0.1:\(second.port):") == true)
        #expect(client.connectedEndpoint == nil)
        await client.close()
    }

    @Test func randomStartsSpreadClientsOverTheReplicas() async throws {
        let (a, b) = (try await Self.server(), try await Self.server())
        var configuration = Self.configuration
        configuration.startsAtRandomEndpoint = true
        var seen: Set<Endpoint> = []
        // 40 clients all on one replica: a chance of 2 in 2^40.
        for _ in 0..<40 {
            let client = RPCClient(endpoints: [Self.endpoint(a), Self.endpoint(b)], configuration: configuration)
            _ = try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self)
            if let endpoint = client.connectedEndpoint { seen.insert(endpoint) }
            await client.close()
        }
        #expect(seen == [Self.endpoint(a), Self.endpoint(b)])
        await a.shutdown()
        await b.shutdown()
    }

    /// Reads until a call to `method` arrives, then stops listening and closes the connection without a word.
    final class CloseOnMethod: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        let method: [UInt8]
        var seen: [UInt8] = []

        init(method: String) { self.method = Array(method.utf8) }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            seen += Array(buffer: unwrapInboundIn(data))
            if seen.count >= method.count,
                (0...(seen.count - method.count)).contains(where: { seen[$0..<$0 + method.count].elementsEqual(method) }
                )
            {
                // The listener first: a reconnect must be refused, as a killed process's would be.
                let channel = context.channel
                if let listener = channel.parent {
                    listener.close().whenComplete { _ in channel.close(promise: nil) }
                } else {
                    channel.close(promise: nil)
                }
            }
        }
    }

    static func server(probe: Probe = Probe()) async throws -> RPCServer {
        let server = RPCServer(
            configuration: ServerConfiguration(shutdownGracePeriod: .seconds(5)), services: [TestService(probe: probe)])
        try await server.start()
        return server
    }

    static func endpoint(_ server: RPCServer) -> Endpoint { Endpoint(host: "127.0.0.1", port: server.port ?? 0) }
    static func endpoint(_ port: Int) -> Endpoint { Endpoint(host: "127.0.0.1", port: port) }
}
