import KioskRPC
import NIOCore
import NIOPosix

/// The store's endpoint for Stripe's webhooks: `POST /stripe/webhook` over HTTP/1.1, each delivery's
/// `Stripe-Signature` checked before anything is read from it (``Store/receiveStripeEvent(signature:body:)``).
///
/// HTTPS with the store's TLS identity (what Stripe requires of an endpoint, on any address); plaintext only on
/// loopback, behind the operator's TLS proxy. At most ``maxConnections`` at once; more are closed on accept. A
/// connection idle for 10 s (while none of its deliveries is being handled), or without a whole request 15 s after
/// it opened or was last answered, is closed (a ``SideHTTPServer``).
///
/// Answers 200 for an event handled or ignored (Stripe stops sending it), 400 for a delivery refused (bad
/// signature, outside the tolerance, not an event: Stripe retries, and a forger learns nothing), 404 for another
/// path, 405 for another method, 413 for a body over 1 MiB, 503 when the store could not act now (the ledger or
/// Stripe unavailable: Stripe sends it again later, for up to three days).
public final class StripeWebhookServer: Sendable {
    /// The largest body taken: Stripe's events are a few kilobytes.
    public static let maxBody = 1 << 20
    /// The path Stripe posts to.
    public static let path = "/stripe/webhook"
    /// Connections open at once, at most: Stripe sends a few in parallel; a flood beyond this is closed on accept.
    public static let maxConnections = 256

    private let server: SideHTTPServer

    /// An endpoint for `store`; ``start(host:port:tls:)`` listens. `limits` is for tests of the limits themselves.
    public init(
        store: Store, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        limits: SideHTTPServer.Limits = .init(maxConnections: StripeWebhookServer.maxConnections, maxBody: maxBody)
    ) {
        server = SideHTTPServer(limits: limits, group: group) { request in
            guard request.path == Self.path else {
                return .text(404, "no such endpoint; Stripe posts to \(Self.path)")
            }
            guard request.head.method == .POST else { return .text(405, "POST only") }
            let answer = await store.receiveStripeEvent(
                signature: request.head.headers.first(name: "Stripe-Signature"), body: request.body)
            return .text(answer.status, answer.message)
        }
    }

    /// Listens on `host`:`port` (0: a port the system picks; see ``port``), HTTPS with `tls`. Plaintext (no
    /// `tls`) on an address that is not loopback is refused: Stripe posts only to HTTPS, so TLS is then terminated
    /// in front of it.
    public func start(host: String = "127.0.0.1", port: Int = 0, tls: ServerTLSIdentity? = nil) async throws {
        guard tls != nil || Loopback.contains(host: host) else {
            throw StoreError(
                .conflict,
                "the Stripe webhook endpoint serves plaintext on loopback only (\(host) is not): give the store --tls-cert/--tls-key, or put a TLS proxy in front of it"
            )
        }
        try await server.start(host: host, port: port, tls: tls)
    }

    /// The port listened on.
    public var port: Int { server.port }

    /// Stops listening and closes open connections.
    public func shutdown() async { await server.shutdown() }
}
