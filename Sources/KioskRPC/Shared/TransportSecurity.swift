import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import NIOTLS

/// A TLS set-up that cannot be used: a file that cannot be read, a key that
/// does not match its certificate, plaintext where it is not allowed.
public struct TransportSecurityError: Error, CustomStringConvertible, Sendable {
    /// A readable reason, naming the file or the address.
    public var message: String
    /// Creates an error.
    public init(_ message: String) { self.message = message }
    /// The message.
    public var description: String { message }

    /// True when a handshake failed because the server's certificate was refused (untrusted, expired,
    /// another name), as opposed to the connection ending during it.
    static func isCertificateRefusal(_ error: any Error) -> Bool {
        if error is NIOSSLExtraError { return true }
        return String(describing: error).uppercased().contains("CERTIFICATE")
    }

    /// The TLS handshake did not finish within the connect timeout.
    static let handshakeTimedOut = TransportSecurityError("the TLS handshake did not finish within the connect timeout")
}

/// A server's TLS identity: a certificate chain and its private key, read from
/// PEM files. ``reload()`` reads them again (the services call it on SIGHUP):
/// connections accepted afterwards present the new certificate, open ones keep
/// the one they started with.
public final class ServerTLSIdentity: Sendable {
    /// The PEM file of the certificate chain, leaf first.
    public let certificateChainPath: String
    /// The PEM file of the leaf certificate's private key.
    public let privateKeyPath: String
    private let context: NIOLockedValueBox<NIOSSLContext>

    /// Reads the certificate chain and key.
    /// - Throws: ``TransportSecurityError`` naming the file that cannot be used.
    public init(certificateChainPath: String, privateKeyPath: String) throws {
        self.certificateChainPath = certificateChainPath
        self.privateKeyPath = privateKeyPath
        self.context = NIOLockedValueBox(
            try Self.makeContext(certificateChainPath: certificateChainPath, privateKeyPath: privateKeyPath))
    }

    /// The identity of a service's `--tls-cert`/`--tls-key` options: nil when
    /// neither is given (plaintext).
    /// - Throws: ``TransportSecurityError`` when only one is given or a file cannot be used.
    public convenience init?(certificateChainPath: String?, privateKeyPath: String?) throws {
        switch (certificateChainPath, privateKeyPath) {
        case (nil, nil): return nil
        case (let certificate?, let key?): try self.init(certificateChainPath: certificate, privateKeyPath: key)
        default: throw TransportSecurityError("--tls-cert and --tls-key go together")
        }
    }

    /// Reads the files again; on failure the current certificate stays in use.
    /// - Throws: ``TransportSecurityError`` naming the file that cannot be used.
    public func reload() throws {
        let fresh = try Self.makeContext(certificateChainPath: certificateChainPath, privateKeyPath: privateKeyPath)
        context.withLockedValue { $0 = fresh }
    }

    func makeHandler() -> NIOSSLServerHandler {
        NIOSSLServerHandler(context: context.withLockedValue { $0 })
    }

    /// A TLS handler for one accepted connection of a server other than the RPC one (the store's webhook
    /// endpoint), with the identity as last loaded: a reload reaches new connections.
    public func makeServerHandler() -> any ChannelHandler { makeHandler() }

    private static func makeContext(certificateChainPath: String, privateKeyPath: String) throws -> NIOSSLContext {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificateChainPath)
        } catch {
            throw TransportSecurityError("cannot read the TLS certificate chain \(certificateChainPath): \(error)")
        }
        guard !chain.isEmpty else { throw TransportSecurityError("\(certificateChainPath) holds no PEM certificate") }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: privateKeyPath, format: .pem)
        } catch {
            throw TransportSecurityError("cannot read the TLS private key \(privateKeyPath): \(error)")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw TransportSecurityError(
                "the key \(privateKeyPath) cannot serve the certificate \(certificateChainPath): \(error)")
        }
    }
}

/// What a client trusts: the roots that must have issued the server's
/// certificate, and the name the certificate must carry.
public struct ClientTLS: Sendable {
    /// The PEM file of trusted root certificates; nil: the system's roots.
    public let trustRootsPath: String?
    /// The name the server's certificate must be valid for; nil: the host the
    /// client connects to (a DNS name, or an IP address matched against the
    /// certificate's IP subject alternative names).
    public let serverName: String?
    private let context: NIOSSLContext

    /// Reads the trust roots.
    /// - Throws: ``TransportSecurityError`` when the file holds no usable certificate.
    public init(trustRootsPath: String?, serverName: String? = nil) throws {
        self.trustRootsPath = trustRootsPath
        self.serverName = serverName
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        configuration.certificateVerification = .fullVerification
        if let trustRootsPath {
            let roots: [NIOSSLCertificate]
            do {
                roots = try NIOSSLCertificate.fromPEMFile(trustRootsPath)
            } catch {
                throw TransportSecurityError("cannot read the TLS trust roots \(trustRootsPath): \(error)")
            }
            guard !roots.isEmpty else { throw TransportSecurityError("\(trustRootsPath) holds no PEM certificate") }
            configuration.trustRoots = .certificates(roots)
        }
        do {
            self.context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw TransportSecurityError(
                "cannot set up TLS with the trust roots \(trustRootsPath ?? "of the system"): \(error)")
        }
    }

    func makeHandler(host: String) throws -> NIOSSLClientHandler {
        let name = serverName ?? host
        // An IP literal cannot go in SNI; with no name NIOSSL checks the
        // certificate against the address connected to.
        return try NIOSSLClientHandler(context: context, serverHostname: Loopback.isIPAddress(name) ? nil : name)
    }
}

/// Which hosts count as this machine, where plaintext is allowed by default.
public enum Loopback {
    /// True for `localhost`, 127.0.0.0/8 and `::1`.
    public static func contains(host: String) -> Bool {
        let lowered = host.lowercased()
        if lowered == "localhost" || lowered == "::1" || lowered == "[::1]" { return true }
        let parts = lowered.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    static func isIPAddress(_ host: String) -> Bool {
        if host.contains(":") { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
    }
}

/// Completes `handshake` when the TLS handshake is done, or fails it with the
/// handshake's error (an untrusted certificate, a wrong name) or when the
/// connection closes first; then leaves the pipeline.
final class TLSHandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private let handshake: EventLoopPromise<Void>
    private var done = false

    init(handshake: EventLoopPromise<Void>) {
        self.handshake = handshake
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case TLSUserEvent.handshakeCompleted? = event as? TLSUserEvent, !done {
            done = true
            handshake.succeed()
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if !done {
            done = true
            handshake.fail(error)
        }
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done {
            done = true
            handshake.fail(TransportSecurityError("the server closed the connection during the TLS handshake"))
        }
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        // Closed before it was ever active (the connect failed).
        if !done {
            done = true
            handshake.fail(TransportSecurityError("the connection closed before the TLS handshake"))
        }
    }
}
