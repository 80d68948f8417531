import Foundation
import KioskRPC
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// The store's endpoint for Stripe's webhooks: `POST /stripe/webhook` over HTTP/1.1, each delivery's
/// `Stripe-Signature` checked before anything is read from it (``Store/receiveStripeEvent(signature:body:)``).
///
/// HTTPS with the store's TLS identity (what Stripe requires of an endpoint, on any address); plaintext only on
/// loopback, behind the operator's TLS proxy. At most ``maxConnections`` at once; more are closed on accept. A
/// connection idle for 10 s, or without a whole request 15 s after it opened or was last answered, is closed.
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

    private let store: Store
    private let group: any EventLoopGroup
    private let state = NIOLockedValueBox<(channel: (any Channel)?, port: Int)>((nil, 0))
    private let connections = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    /// An endpoint for `store`; ``start(host:port:)`` listens.
    public init(store: Store, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.store = store
        self.group = group
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
        let store = self.store
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [weak self] channel in
                guard let self, self.track(channel) else { return channel.close() }
                return channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(tls.makeServerHandler()) }
                    // A connection that sends nothing for 10 s is closed: a slow sender cannot hold a buffer forever.
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: .seconds(10)))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(StripeWebhookHandler(store: store))
                }
            }
            .bind(host: host, port: port).get()
        state.withLockedValue {
            $0.channel = channel
            $0.port = channel.localAddress?.port ?? 0
        }
    }

    /// The port listened on.
    public var port: Int { state.withLockedValue { $0.port } }

    /// Stops listening and closes open connections.
    public func shutdown() async {
        let channel = state.withLockedValue { state -> (any Channel)? in
            defer { state.channel = nil }
            return state.channel
        }
        try? await channel?.close().get()
        for connection in connections.withLockedValue({ Array($0.values) }) { try? await connection.close().get() }
    }

    /// Counts the connection in; false (not counted) when ``maxConnections`` are open.
    private func track(_ channel: any Channel) -> Bool {
        let id = ObjectIdentifier(channel)
        let taken = connections.withLockedValue { open -> Bool in
            guard open.count < Self.maxConnections else { return false }
            open[id] = channel
            return true
        }
        guard taken else { return false }
        channel.closeFuture.whenComplete { [weak self] _ in
            _ = self?.connections.withLockedValue { $0.removeValue(forKey: id) }
        }
        return true
    }
}

private final class StripeWebhookHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// A request must arrive whole within this long of the connection opening or of the last answer: a sender
    /// trickling bytes (each read restarts the idle timer) cannot hold one of the endpoint's connections.
    static let requestDeadline: TimeAmount = .seconds(15)

    private let store: Store
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false
    private var deadline: Scheduled<Void>?

    init(store: Store) {
        self.store = store
    }

    func channelActive(context: ChannelHandlerContext) {
        armDeadline(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
    }

    private func armDeadline(_ context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        // An answer that comes after the connection closed arms nothing: no task outlives the channel.
        guard context.channel.isActive else { return }
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: Self.requestDeadline) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
            tooLarge = false
        case .body(let chunk):
            if body.count + chunk.readableBytes > StripeWebhookServer.maxBody {
                tooLarge = true
            } else {
                body += chunk.readableBytesView
            }
        case .end:
            guard let head else { return }
            self.head = nil
            deadline?.cancel()
            deadline = nil
            let payload = body
            body = []
            if tooLarge { return respond(context, head, 413, "the body is over 1 MiB") }
            guard head.uri.split(separator: "?").first.map(String.init) == StripeWebhookServer.path else {
                return respond(context, head, 404, "no such endpoint; Stripe posts to \(StripeWebhookServer.path)")
            }
            guard head.method == .POST else { return respond(context, head, 405, "POST only") }
            let signature = head.headers.first(name: "Stripe-Signature")
            let store = self.store
            let loop = context.eventLoop
            let context = NIOLoopBound(context, eventLoop: loop)
            let answered = loop.makeFutureWithTask {
                await store.receiveStripeEvent(signature: signature, body: payload)
            }
            answered.whenSuccess { [self] answer in
                self.respond(context.value, head, answer.status, answer.message)
            }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    private func respond(_ context: ChannelHandlerContext, _ head: HTTPRequestHead, _ status: Int, _ message: String) {
        var buffer = context.channel.allocator.buffer(capacity: message.utf8.count + 1)
        buffer.writeString(message + "\n")
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: String(buffer.readableBytes))
        context.write(
            wrapOutboundOut(
                .head(
                    HTTPResponseHead(
                        version: head.version, status: HTTPResponseStatus(statusCode: status), headers: headers))
            ), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        armDeadline(context)
    }
}
