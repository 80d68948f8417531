import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus

/// A service's endpoint for its operator's tools, on its own port (`--metrics-port`): Prometheus scrapes
/// `GET /metrics` (the text exposition format, 0.0.4), an orchestrator asks `GET /healthz` (the process is alive:
/// always 200) and `GET /readyz` (200 when the service can do its work, 503 with the reason when it cannot).
///
/// Plaintext HTTP/1.1 on loopback only: metrics name no account, but they tell how a business goes, so they are
/// scraped from the same host (or through the operator's own proxy). At most ``maxConnections`` at once; a
/// connection idle for 10 s is closed.
public final class OperatorEndpoint: Sendable {
    /// Connections open at once, at most.
    public static let maxConnections = 64

    /// What `/readyz` is told: ready, or why not.
    public struct Readiness: Sendable {
        public var ready: Bool
        public var reason: String
        public init(ready: Bool, reason: String) {
            self.ready = ready
            self.reason = reason
        }
    }

    private let registry: PrometheusCollectorRegistry
    private let refresh: @Sendable () async -> Void
    private let readiness: @Sendable () async -> Readiness
    private let group: any EventLoopGroup
    private let state = NIOLockedValueBox<(channel: (any Channel)?, port: Int)>((nil, 0))
    private let connections = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    /// An endpoint serving `registry`. `refresh` runs before each scrape (gauges read from the ledger or the
    /// service's state); `readiness` answers `/readyz`.
    public init(
        registry: PrometheusCollectorRegistry, refresh: @escaping @Sendable () async -> Void,
        readiness: @escaping @Sendable () async -> Readiness,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.registry = registry
        self.refresh = refresh
        self.readiness = readiness
        self.group = group
    }

    /// Listens on `host`:`port` (0: a port the system picks; see ``port``).
    /// - Throws: ``OperatorEndpointError`` for an address that is not loopback.
    public func start(host: String = "127.0.0.1", port: Int = 0) async throws {
        guard ["127.0.0.1", "::1", "localhost"].contains(host) || host.hasPrefix("127.") else {
            throw OperatorEndpointError(
                "the metrics endpoint listens on loopback only (\(host) is not): scrape it from the same host")
        }
        let handlerFactory = { [registry, refresh, readiness] in
            OperatorHandler(registry: registry, refresh: refresh, readiness: readiness)
        }
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [weak self] channel in
                guard let self, self.track(channel) else { return channel.close() }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: .seconds(10)))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(handlerFactory())
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

/// Why the operator endpoint cannot start.
public struct OperatorEndpointError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}

private final class OperatorHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let registry: PrometheusCollectorRegistry
    private let refresh: @Sendable () async -> Void
    private let readiness: @Sendable () async -> OperatorEndpoint.Readiness
    private var head: HTTPRequestHead?

    init(
        registry: PrometheusCollectorRegistry, refresh: @escaping @Sendable () async -> Void,
        readiness: @escaping @Sendable () async -> OperatorEndpoint.Readiness
    ) {
        self.registry = registry
        self.refresh = refresh
        self.readiness = readiness
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body:
            break  // no route takes a body
        case .end:
            guard let head else { return }
            self.head = nil
            guard head.method == .GET || head.method == .HEAD else {
                return respond(context, head, 405, "text/plain; charset=utf-8", Array("GET only\n".utf8))
            }
            let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? ""
            let loop = context.eventLoop
            let bound = NIOLoopBound(context, eventLoop: loop)
            let answered: EventLoopFuture<(Int, String, [UInt8])>
            switch path {
            case "/metrics":
                let registry = self.registry
                let refresh = self.refresh
                answered = loop.makeFutureWithTask {
                    await refresh()
                    return (200, "text/plain; version=0.0.4; charset=utf-8", registry.emitToBuffer())
                }
            case "/healthz":
                answered = loop.makeSucceededFuture((200, "text/plain; charset=utf-8", Array("alive\n".utf8)))
            case "/readyz":
                let readiness = self.readiness
                answered = loop.makeFutureWithTask {
                    let answer = await readiness()
                    return (answer.ready ? 200 : 503, "text/plain; charset=utf-8", Array((answer.reason + "\n").utf8))
                }
            default:
                answered = loop.makeSucceededFuture(
                    (404, "text/plain; charset=utf-8", Array("no such path: /metrics, /healthz, /readyz\n".utf8)))
            }
            answered.whenSuccess { [self] answer in
                self.respond(bound.value, head, answer.0, answer.1, answer.2)
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

    private func respond(
        _ context: ChannelHandlerContext, _ head: HTTPRequestHead, _ status: Int, _ type: String, _ body: [UInt8]
    ) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: String(body.count))
        context.write(
            wrapOutboundOut(
                .head(
                    HTTPResponseHead(
                        version: head.version, status: HTTPResponseStatus(statusCode: status), headers: headers))
            ), promise: nil)
        if head.method != .HEAD {
            context.write(
                wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}
