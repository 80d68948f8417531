import KioskRPC
import KioskWire
import NIOCore
import NIOPosix
import Testing

/// Connecting, reconnecting and noticing a dead peer.
@Suite(.timeLimit(.minutes(1))) struct ConnectionTests {
    static let quickBackoff = ConnectionBackoff(
        initial: .milliseconds(5), maximum: .milliseconds(20), multiplier: 2, jitter: 0.2, maximumAttempts: 3)

    @Test func connectFailureIsDistinguishableAndReconnectWorks() async throws {
        // A port with nothing listening: bound (so no other test's server gets it) but not listening.
        let reserved = try ReservedPort()
        let port = reserved.port

        let client = RPCClient(
            host: "127.0.0.1", port: port, configuration: ClientConfiguration(backoff: Self.quickBackoff))
        let error = await #expect(throws: RPCError.self) {
            try await client.unary(healthCheck, request: HealthCheckRequest(), response: HealthCheckResponse.self)
        }
        #expect(error?.code == .unavailable)
        #expect(error?.isConnectFailure == true)
        #expect(error?.message.contains("after 3 attempt(s)") == true)

        // A server comes up on that port: the same client connects.
        reserved.release()
        let server = RPCServer(configuration: ServerConfiguration(port: port), services: [TestService(probe: Probe())])
        try await server.start()
        let reply = try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self)
        #expect(reply.opaque == 1)

        // It goes away: in-flight and new calls fail; it comes back: the client reconnects.
        await server.shutdown()
        let down = await #expect(throws: RPCError.self) {
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 2), response: Ping.self)
        }
        #expect(down?.code == .unavailable)
        let again = RPCServer(configuration: ServerConfiguration(port: port), services: [TestService(probe: Probe())])
        try await again.start()
        #expect(
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 3), response: Ping.self).opaque
                == 3)
        await client.close()
        await again.shutdown()
    }

    @Test func unresponsivePeerIsDetectedByKeepalive() async throws {
        // A "server" that accepts and reads but never answers anything, PINGs included.
        let silent = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in channel.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(silent.localAddress?.port)
        let client = RPCClient(
            host: "127.0.0.1", port: port,
            configuration: ClientConfiguration(
                backoff: Self.quickBackoff,
                keepalive: Keepalive(interval: .milliseconds(50), timeout: .milliseconds(100))))
        let error = await #expect(throws: RPCError.self) {
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self)
        }
        #expect(error?.code == .unavailable)
        // Usually the call was sent and dies with the connection; on a loaded machine the 150 ms can pass before the
        // call is written, and then it was never sent (and says so) — detected by the keepalive either way.
        #expect(error?.source == .connection || error?.message.contains("was not sent") == true)
        #expect(error?.message.contains("stopped answering") == true)
        await client.close()
        try await silent.close()
    }

    @Test func serverDropsClientsThatStopAnsweringPings() async throws {
        let probe = Probe()
        let configuration = ServerConfiguration(
            keepalive: Keepalive(interval: .milliseconds(200), timeout: .seconds(1)))
        try await withServer(probe: probe, configuration: configuration) { server, client in
            // A control: Kiosk's client answers the server's PINGs, so its call outlives the silent peer.
            let held = Task {
                try await client.unary(TestService.prefix + "Hold", request: Ping(opaque: 7), response: Ping.self)
            }
            await probe.wait(for: .started(7))

            try await RawPeer.with(port: try #require(server.port)) { silent in
                var opening = ByteBuffer(bytes: Frame.preface)
                Frame.headers(1, TestService.prefix + "Hold").write(to: &opening)
                Frame.request(1, Ping(opaque: 8)).write(to: &opening)
                try await silent.send(Array(opening.readableBytesView))
                // The server pings; this peer reads the PING and never answers.
                let ping = try #require(try await silent.readFrame())
                #expect(ping.type == .ping)
                let pinged = ContinuousClock.now
                try await silent.readUntilClosed()
                #expect(
                    ContinuousClock.now - pinged < .seconds(15),
                    "dropped after the PONG timeout (with slack for a loaded machine)")
            }
            // The silent peer's call was cancelled with its connection…
            await probe.wait(for: .cancelled(8))
            // …while the answering client's connection, pinged all along, still carries its call.
            probe.release()
            #expect(try await held.value.opaque == 7)
        }
    }

    @Test func connectionsOverTheCapGetGoAwayAndTheCapFreesUp() async throws {
        let configuration = ServerConfiguration(
            shutdownGracePeriod: .seconds(1), limits: ServerLimits(maximumConnections: 2))
        try await withServer(configuration: configuration) { server, client in
            let port = try #require(server.port)
            // The test client is connection one.
            _ = try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self)
            try await RawPeer.with(port: port) { second in
                try await second.send(Frame.preface)
                // Admitted on its own event loop: the third must come after the server counted the second.
                let admitted = ContinuousClock.now + .seconds(10)
                while server.connectionCount < 2, ContinuousClock.now < admitted {
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(server.connectionCount == 2)
                try await RawPeer.with(port: port) { third in
                    // The refusal is written as soon as the server accepts, and its close may come before our preface goes out.
                    try? await third.send(Frame.preface)
                    let refusal = try #require(try await third.readFrame())
                    #expect(refusal.type == .goAway)
                    let goAway = try refusal.decode(GoAway.self)
                    #expect(
                        goAway.code == StatusCode.resourceExhausted.rawValue && goAway.message.contains("2 connections")
                    )
                    try await third.readUntilClosed()
                }
                #expect(server.connectionCount <= 2)
            }
            // Both others leave: once the server has seen them go, the slots are free again.
            await client.close()
            let deadline = ContinuousClock.now + .seconds(10)
            while server.connectionCount > 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(server.connectionCount == 0)
            let another = RPCClient(host: "127.0.0.1", port: port)
            #expect(
                try await another.unary(TestService.prefix + "Echo", request: Ping(opaque: 2), response: Ping.self)
                    .opaque == 2)
            await another.close()
        }
    }

    @Test func idleSweepClosesAConnectionWithoutCalls() async throws {
        let configuration = ServerConfiguration(
            shutdownGracePeriod: .seconds(1), limits: ServerLimits(idleTimeout: .milliseconds(100)))
        try await withServer(configuration: configuration) { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                // Within two sweeps (100-200 ms), with slack for a loaded machine before the suite's time limit.
                let goAway = try #require(try await peer.readFrame())
                #expect(goAway.type == .goAway)
                #expect(try goAway.decode(GoAway.self).code == StatusCode.ok.rawValue)
                try await peer.readUntilClosed()
            }
        }
    }

    @Test func closedClientRefusesCalls() async throws {
        try await withServer { _, client in
            _ = try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self)
            await client.close()
            let error = await #expect(throws: RPCError.self) {
                try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 2), response: Ping.self)
            }
            #expect(error?.code == .unavailable)
        }
    }
}
