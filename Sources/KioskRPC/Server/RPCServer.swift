import KioskWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Tracing

/// A Kiosk RPC server: listens on TCP, speaks the Kiosk wire protocol and
/// dispatches calls to the methods of its services.
///
/// ```swift
/// let server = RPCServer(configuration: .defaults, services: [MyService()])
/// try await server.start()
/// print(server.port)
/// …
/// await server.shutdown()
/// ```
public final class RPCServer: Sendable {
    private struct Connection {
        var channel: Channel
        var handler: NIOLoopBound<ServerConnectionHandler>
    }

    private struct State {
        var listener: Channel?
        var connections: [ObjectIdentifier: Connection] = [:]
        /// Every accepted connection counted against the cap, until it closes.
        var admitted: Set<ObjectIdentifier> = []
        /// Runs every connection's idle check once per ``ServerLimits/idleTimeout``.
        var idleSweep: RepeatedTask?
        var shuttingDown = false
    }

    /// The server's configuration.
    public let configuration: ServerConfiguration
    private let router: RPCRouter
    private let group: EventLoopGroup
    private let logger: Logger
    private let state = NIOLockedValueBox(State())
    private let connectionMeter = ConnectionMeter()
    private let shutdownFlag = ShutdownFlag()

    /// Creates a server; ``start()`` binds it.
    /// - Parameters:
    ///   - configuration: the address, TLS identity, limits and timeouts (``ServerConfiguration/defaults``).
    ///   - services: the services to serve; the Health service is always added.
    ///   - group: the event loops for the listener and connections.
    ///   - logger: where connection events go; silent by default.
    public init(
        configuration: ServerConfiguration = .defaults,
        services: [any RPCService],
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "kiosk.rpc.server", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.configuration = configuration
        self.group = group
        self.logger = logger
        var router = RPCRouter()
        for service in services { router.add(service) }
        let health = HealthService(
            knownServices: router.serviceNames, isServing: { [state] in !state.withLockedValue { $0.shuttingDown } })
        router.add(health)
        self.router = router
    }

    /// Calls opened so far, by full method name ("/package.Service/Method"):
    /// what a peer made this server do (methods never called are left out).
    public var callCounts: [String: UInt64] { router.callCounts }

    /// The port the server listens on, once started.
    public var port: Int? {
        state.withLockedValue { $0.listener?.localAddress?.port }
    }

    /// Binds the listener.
    /// - Throws: the bind error (e.g. address in use).
    /// - Throws: ``TransportSecurityError`` for plaintext on an address that is
    ///   not loopback (unless ``ServerConfiguration/allowsPlaintextOffLoopback``).
    public func start() async throws {
        let configuration = self.configuration
        if configuration.tls == nil, !configuration.allowsPlaintextOffLoopback,
            !Loopback.contains(host: configuration.host)
        {
            throw TransportSecurityError(
                "refusing to serve plaintext on \(configuration.host), which is not a loopback address: give a TLS certificate and key, or allow insecure plaintext"
            )
        }
        let router = self.router
        let logger = self.logger
        let shutdownFlag = self.shutdownFlag
        // Resolved once: a server without a tracer spends nothing per call on tracing.
        let tracer = CallTracing.resolve(configuration.tracer)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.maxMessagesPerRead, value: 16)
            .childChannelOption(
                .writeBufferWaterMark,
                value: ChannelOptions.Types.WriteBufferWaterMark(
                    low: configuration.limits.outboundLowWaterMark, high: configuration.limits.outboundHighWaterMark)
            )
            .childChannelInitializer { [self] channel in
                let limits = configuration.limits
                guard self.admit(channel) else {
                    self.connectionMeter.refused(.connections)
                    logger.warning(
                        "refusing a connection: the server has its maximum of \(limits.maximumConnections) connections")
                    // A TLS client cannot read a plaintext GOAWAY, and a handshake only to refuse would cost what the
                    // cap saves: the connection is closed, which the client retries with backoff.
                    if configuration.tls != nil { return channel.close() }
                    return Self.refuse(channel, maximumConnections: limits.maximumConnections)
                }
                if let tls = configuration.tls {
                    do { try channel.pipeline.syncOperations.addHandler(tls.makeHandler()) } catch {
                        return channel.eventLoop.makeFailedFuture(error)
                    }
                }
                let transport =
                    configuration.transportConfigurator?(channel) ?? channel.eventLoop.makeSucceededVoidFuture()
                return transport.flatMapThrowing {
                    let handler = ServerConnectionHandler(
                        router: router, limits: limits, maximumMessageSize: configuration.maximumMessageSize,
                        logger: logger,
                        shutdown: shutdownFlag, runsHandlersOnEventLoop: configuration.runsHandlersOnEventLoop,
                        metersCalls: configuration.metersCalls, connectionMeter: self.connectionMeter,
                        tracer: tracer)
                    // The handler reads and writes the frames itself; PONGs go on to the keepalive behind it, whose PINGs go out through it.
                    try channel.pipeline.syncOperations.addHandlers([
                        handler,
                        KeepaliveHandler(configuration: configuration.keepalive),
                    ])
                    self.register(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
                }
            }
        let listener = try await bootstrap.bind(host: configuration.host, port: configuration.port).get()
        // One idle sweep for the whole server rather than a timer per connection.
        let idleSweep = configuration.limits.idleTimeout.map { period in
            group.next().scheduleRepeatedTask(initialDelay: period, delay: period) { [state] _ in
                let connections = state.withLockedValue { Array($0.connections.values) }
                for connection in connections {
                    connection.handler.eventLoop.execute { connection.handler.value.idleCheck() }
                }
            }
        }
        state.withLockedValue {
            $0.listener = listener
            $0.idleSweep = idleSweep
        }
        logger.info("listening on \(configuration.host):\(listener.localAddress?.port ?? 0)")
    }

    /// Counts an accepted connection against ``ServerLimits/maximumConnections``; false when it is over the cap.
    private func admit(_ channel: Channel) -> Bool {
        let key = ObjectIdentifier(channel)
        let maximum = configuration.limits.maximumConnections
        let admitted = state.withLockedValue { state -> Bool in
            guard state.admitted.count < maximum else { return false }
            state.admitted.insert(key)
            return true
        }
        if admitted {
            connectionMeter.accepted.add(1)
            channel.closeFuture.whenComplete { [state] _ in
                state.withLockedValue { state in
                    state.admitted.remove(key)
                    state.connections.removeValue(forKey: key)
                }
            }
        }
        return admitted
    }

    /// Tells a connection over the cap why (GOAWAY 8) as soon as it is active, and closes it.
    private static func refuse(_ channel: Channel, maximumConnections: Int) -> EventLoopFuture<Void> {
        let goAway = GoAway(
            lastCallID: 0, code: StatusCode.resourceExhausted.rawValue,
            message: "server has its maximum of \(maximumConnections) connections")
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(RefusedConnectionHandler(goAway: goAway))
        }
    }

    private func register(channel: Channel, handler: NIOLoopBound<ServerConnectionHandler>) {
        let key = ObjectIdentifier(channel)
        state.withLockedValue { state in
            state.connections[key] = Connection(channel: channel, handler: handler)
        }
        // A connection accepted during a shutdown gets its GOAWAY once its preface arrives.
    }

    /// What the server holds now, read on each connection's event loop:
    /// connections, open calls and outbound bytes buffered (see ``ServerLimits``).
    public func statistics() async -> ServerStatistics {
        let connections = state.withLockedValue { Array($0.connections.values) }
        var statistics = ServerStatistics(connections: connectionCount)
        for connection in connections {
            let reading = try? await connection.handler.eventLoop.submit {
                let buffered = (try? connection.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
                return (connection.handler.value.openCalls, buffered)
            }.get()
            guard let (calls, buffered) = reading else { continue }
            statistics.openCalls += calls
            statistics.largestOpenCalls = max(statistics.largestOpenCalls, calls)
            statistics.bufferedOutboundBytes += buffered
            statistics.largestBufferedOutboundBytes = max(statistics.largestBufferedOutboundBytes, buffered)
        }
        return statistics
    }

    /// The server's counts now: per method, calls by status code, latency (when
    /// ``ServerConfiguration/metersCalls``), calls in flight and bytes; connections; refusals by limit.
    public func meterReading() -> ServerMeter.Reading {
        ServerMeter.Reading(
            methods: router.meterReadings(timed: configuration.metersCalls),
            connectionsAccepted: connectionMeter.accepted.load, connectionsOpen: connectionCount,
            refusals: connectionMeter.refusalCounts)
    }

    /// Connections open now (admitted and not yet closed).
    public var connectionCount: Int {
        state.withLockedValue { $0.admitted.count }
    }

    /// Shuts down gracefully: stops listening (a new connection is refused, so a
    /// client given other replicas connects to one of them), sends GOAWAY on
    /// every connection, lets in-flight calls finish for up to `gracePeriod`
    /// (refusing new ones with UNAVAILABLE), then ends what is left with UNAVAILABLE.
    public func shutdown(gracePeriod: Duration? = nil) async {
        let grace = gracePeriod ?? configuration.shutdownGracePeriod
        let connections = startDraining()
        let closed = EventLoopFuture.andAllComplete(connections.map(\.channel.closeFuture), on: group.any())
        let graceOver = group.any().scheduleTask(in: TimeAmount(grace)) {}
        // Wait for every connection to drain, or for the grace period to end.
        let eitherPromise = group.any().makePromise(of: Void.self)
        closed.cascade(to: eitherPromise)
        graceOver.futureResult.cascade(to: eitherPromise)
        try? await eitherPromise.futureResult.get()
        graceOver.cancel()

        let (listener, remaining, idleSweep) = state.withLockedValue { state in
            (state.listener, Array(state.connections.values), state.idleSweep)
        }
        idleSweep?.cancel()
        for connection in remaining {
            connection.handler.eventLoop.execute { connection.handler.value.forceShutdown() }
        }
        try? await EventLoopFuture.andAllComplete(remaining.map(\.channel.closeFuture), on: group.any()).get()
        try? await listener?.close()
        logger.info("server shut down")
    }

    /// Starts a graceful shutdown without waiting for it: the listener closes,
    /// from now on Health answers NOT_SERVING, every connection gets GOAWAY, and
    /// calls opened after it are refused with UNAVAILABLE. ``shutdown(gracePeriod:)`` finishes it.
    public func beginShutdown() {
        startDraining()
    }

    @discardableResult
    private func startDraining() -> [Connection] {
        shutdownFlag.set()
        let (connections, listener) = state.withLockedValue { state in
            state.shuttingDown = true
            return (Array(state.connections.values), state.listener)
        }
        // As gRPC servers do: no new connection lands on a server that is going away.
        listener?.close(promise: nil)
        for connection in connections {
            connection.handler.eventLoop.execute { connection.handler.value.beginGracefulShutdown() }
        }
        return connections
    }

    /// Waits until the listener is closed (when a shutdown begins).
    public func waitUntilClosed() async {
        guard let listener = state.withLockedValue({ $0.listener }) else { return }
        try? await listener.closeFuture.get()
    }
}

/// The only handler of a connection refused for the connection cap: writes
/// GOAWAY once the channel is active, then closes its side for writing and
/// discards what the client sends (closing with unread bytes would reset the
/// connection, and the client might never see the GOAWAY) until the client
/// closes, or for at most a second.
private final class RefusedConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let goAway: GoAway
    private var refused = false

    init(goAway: GoAway) {
        self.goAway = goAway
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { refuse(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        refuse(context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}

    private func refuse(_ context: ChannelHandlerContext) {
        guard !refused else { return }
        refused = true
        var bytes = context.channel.allocator.buffer(capacity: 64)
        Frame(type: .goAway, callID: 0, message: goAway, allocator: context.channel.allocator).write(to: &bytes)
        let channel = context.channel
        context.writeAndFlush(NIOAny(bytes)).whenComplete { _ in
            channel.close(mode: .output, promise: nil)
            channel.eventLoop.scheduleTask(in: .seconds(1)) { channel.close(promise: nil) }
        }
    }
}

/// A reading of what an ``RPCServer`` holds (``RPCServer/statistics()``).
public struct ServerStatistics: Hashable, Sendable {
    /// Connections open.
    public var connections: Int
    /// Calls open, over every connection.
    public var openCalls = 0
    /// The most calls open on one connection.
    public var largestOpenCalls = 0
    /// Outbound bytes written but not yet taken by the kernel, over every connection.
    public var bufferedOutboundBytes = 0
    /// The most outbound bytes buffered for one connection.
    public var largestBufferedOutboundBytes = 0
}
