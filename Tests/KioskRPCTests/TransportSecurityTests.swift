import Foundation
import KioskRPC
import KioskWire
import NIOCore
import NIOPosix
import Testing

/// TLS on the wire: trust roots, names, reloads, and where plaintext is refused.
@Suite(.timeLimit(.minutes(1))) struct TransportSecurityTests {
    static let noRetry = ConnectionBackoff(
        initial: .milliseconds(5), maximum: .milliseconds(20), multiplier: 2, jitter: 0.2, maximumAttempts: 1)

    /// A fresh CA and server pair in a temporary directory.
    static func certificates(hosts: [String] = [], includingLoopback: Bool = true) throws -> DevelopmentCertificates {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kiosk-tls-\(UUID().uuidString)")
            .path
        return try DevelopmentCertificates.create(in: directory, hosts: hosts, includingLoopback: includingLoopback)
    }

    static func echo(_ client: RPCClient, _ value: UInt64) async throws -> UInt64 {
        try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: value), response: Ping.self).opaque
    }

    @Test func aClientTrustingTheCAConnectsByAddressAndByName() async throws {
        let files = try Self.certificates()
        let identity = try ServerTLSIdentity(
            certificateChainPath: files.serverCertificatePath, privateKeyPath: files.serverKeyPath)
        let server = RPCServer(
            configuration: ServerConfiguration(tls: identity), services: [TestService(probe: Probe())])
        try await server.start()
        let port = try #require(server.port)
        for (host, name) in [("127.0.0.1", nil), ("localhost", nil), ("127.0.0.1", "localhost")] as [(String, String?)]
        {
            let tls = try ClientTLS(trustRootsPath: files.caCertificatePath, serverName: name)
            let client = RPCClient(
                host: host, port: port, configuration: ClientConfiguration(backoff: Self.noRetry, tls: tls))
            #expect(try await Self.echo(client, 7) == 7)
            await client.close()
        }
        await server.shutdown()
    }

    @Test func aClientWithAnotherTrustRootOrNameCannotConnect() async throws {
        let files = try Self.certificates()
        let stranger = try Self.certificates()
        let identity = try ServerTLSIdentity(
            certificateChainPath: files.serverCertificatePath, privateKeyPath: files.serverKeyPath)
        let server = RPCServer(
            configuration: ServerConfiguration(tls: identity), services: [TestService(probe: Probe())])
        try await server.start()
        let port = try #require(server.port)

        let wrongRoot = RPCClient(
            host: "127.0.0.1", port: port,
            configuration: ClientConfiguration(
                backoff: Self.noRetry, tls: try ClientTLS(trustRootsPath: stranger.caCertificatePath)))
        let untrusted = await #expect(throws: RPCError.self) { try await Self.echo(wrongRoot, 1) }
        #expect(untrusted?.code == .unavailable)
        #expect(untrusted?.isConnectFailure == true)
        #expect(
            untrusted?.message.hasPrefix("TLS handshake with") == true,
            "a certificate refusal, not retried: \(String(describing: untrusted))")
        await wrongRoot.close()

        // A plaintext client gets nothing from a TLS server either.
        let plain = RPCClient(
            host: "127.0.0.1", port: port,
            configuration: ClientConfiguration(
                connectTimeout: .seconds(2), backoff: Self.noRetry, defaultTimeout: .seconds(2)))
        await #expect(throws: RPCError.self) { try await Self.echo(plain, 3) }
        await plain.close()
        await server.shutdown()
    }

    /// A certificate for store.example.com only: right CA, wrong name for 127.0.0.1 unless the client expects that name.
    /// (NIOSSL accepts a certificate whose IP address names the peer too, so the certificate must not name 127.0.0.1.)
    @Test func theServersNameIsVerified() async throws {
        let files = try Self.certificates(hosts: ["store.example.com"], includingLoopback: false)
        let identity = try ServerTLSIdentity(
            certificateChainPath: files.serverCertificatePath, privateKeyPath: files.serverKeyPath)
        let server = RPCServer(
            configuration: ServerConfiguration(tls: identity), services: [TestService(probe: Probe())])
        try await server.start()
        let port = try #require(server.port)
        let byAddress = RPCClient(
            host: "127.0.0.1", port: port,
            configuration: ClientConfiguration(
                backoff: Self.noRetry, tls: try ClientTLS(trustRootsPath: files.caCertificatePath)))
        let misnamed = await #expect(throws: RPCError.self) { try await Self.echo(byAddress, 1) }
        #expect(
            misnamed?.message.hasPrefix("TLS handshake with") == true,
            "a certificate refusal, not retried: \(String(describing: misnamed))")
        await byAddress.close()
        let byName = RPCClient(
            host: "127.0.0.1", port: port,
            configuration: ClientConfiguration(
                backoff: Self.noRetry,
                tls: try ClientTLS(trustRootsPath: files.caCertificatePath, serverName: "store.example.com")))
        #expect(try await Self.echo(byName, 2) == 2)
        await byName.close()
        await server.shutdown()
    }

    @Test func reloadServesTheNewCertificateToNewConnections() async throws {
        let first = try Self.certificates()
        let second = try Self.certificates()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "kiosk-tls-live-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certificate = (directory as NSString).appendingPathComponent("server.pem")
        let key = (directory as NSString).appendingPathComponent("server-key.pem")
        try FileManager.default.copyItem(atPath: first.serverCertificatePath, toPath: certificate)
        try FileManager.default.copyItem(atPath: first.serverKeyPath, toPath: key)
        let identity = try ServerTLSIdentity(certificateChainPath: certificate, privateKeyPath: key)
        let server = RPCServer(
            configuration: ServerConfiguration(tls: identity), services: [TestService(probe: Probe())])
        try await server.start()
        let port = try #require(server.port)
        func client(trusting ca: String) throws -> RPCClient {
            RPCClient(
                host: "127.0.0.1", port: port,
                configuration: ClientConfiguration(backoff: Self.noRetry, tls: try ClientTLS(trustRootsPath: ca)))
        }
        let before = try client(trusting: second.caCertificatePath)
        await #expect(throws: RPCError.self) { try await Self.echo(before, 1) }
        await before.close()

        // A half-written replacement (a key that does not match) is refused and the old pair stays.
        try FileManager.default.removeItem(atPath: certificate)
        try FileManager.default.copyItem(atPath: second.serverCertificatePath, toPath: certificate)
        #expect(throws: TransportSecurityError.self) { try identity.reload() }
        let stillOld = try client(trusting: first.caCertificatePath)
        #expect(try await Self.echo(stillOld, 2) == 2)

        try FileManager.default.removeItem(atPath: key)
        try FileManager.default.copyItem(atPath: second.serverKeyPath, toPath: key)
        try identity.reload()
        let after = try client(trusting: second.caCertificatePath)
        #expect(try await Self.echo(after, 3) == 3)
        // The connection opened before the reload lives on.
        #expect(try await Self.echo(stillOld, 4) == 4)
        await after.close()
        await stillOld.close()
        await server.shutdown()
    }

    /// A TLS server at its connection cap closes a new connection (a TLS client could not read a plaintext
    /// GOAWAY); the client counts it as a failed attempt and retries with backoff, not as a certificate error.
    @Test func aTLSServerAtItsCapClosesAndTheClientRetries() async throws {
        let files = try Self.certificates()
        let identity = try ServerTLSIdentity(
            certificateChainPath: files.serverCertificatePath, privateKeyPath: files.serverKeyPath)
        let server = RPCServer(
            configuration: ServerConfiguration(limits: ServerLimits(maximumConnections: 1), tls: identity),
            services: [TestService(probe: Probe())])
        try await server.start()
        let port = try #require(server.port)
        let tls = try ClientTLS(trustRootsPath: files.caCertificatePath)
        let first = RPCClient(
            host: "127.0.0.1", port: port, configuration: ClientConfiguration(backoff: Self.noRetry, tls: tls))
        #expect(try await Self.echo(first, 1) == 1)
        let twoAttempts = ConnectionBackoff(
            initial: .milliseconds(5), maximum: .milliseconds(5), multiplier: 1, jitter: 0, maximumAttempts: 2)
        let second = RPCClient(
            host: "127.0.0.1", port: port, configuration: ClientConfiguration(backoff: twoAttempts, tls: tls))
        let refused = await #expect(throws: RPCError.self) { try await Self.echo(second, 2) }
        #expect(refused?.code == .unavailable)
        #expect(refused?.message.contains("after 2 attempt(s)") == true, "\(String(describing: refused))")
        await second.close()
        await first.close()
        await server.shutdown()
    }

    @Test func plaintextIsRefusedOffLoopbackUnlessAllowed() async throws {
        // Refused before anything is bound.
        let server = RPCServer(
            configuration: ServerConfiguration(host: "0.0.0.0"), services: [TestService(probe: Probe())])
        let refused = await #expect(throws: TransportSecurityError.self) { try await server.start() }
        #expect(refused?.message.contains("not a loopback address") == true)
        // (Not bound: the tests listen on loopback only.)

        // 192.0.2.1 (TEST-NET-1) is never dialled: the client refuses before connecting.
        let client = RPCClient(host: "192.0.2.1", port: 9, configuration: ClientConfiguration(backoff: Self.noRetry))
        let error = await #expect(throws: RPCError.self) { try await Self.echo(client, 1) }
        #expect(error?.message.contains("plaintext") == true)
        await client.close()
        #expect(
            Loopback.contains(host: "127.0.0.1") && Loopback.contains(host: "localhost")
                && Loopback.contains(host: "::1"))
        #expect(
            !Loopback.contains(host: "0.0.0.0") && !Loopback.contains(host: "10.0.0.1")
                && !Loopback.contains(host: "127.example.com"))
    }
}
