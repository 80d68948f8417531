import KioskRPC
import NIOCore
import NIOPosix
import Prometheus

/// A service's endpoint for its operator's tools, on its own port (`--metrics-port`): Prometheus scrapes
/// `GET /metrics` (the text exposition format, 0.0.4), an orchestrator asks `GET /healthz` (the process is alive:
/// always 200) and `GET /readyz` (200 when the service can do its work, 503 with the reason when it cannot).
///
/// Plaintext HTTP/1.1 on loopback only: metrics name no account, but they tell how a business goes, so they are
/// scraped from the same host (or through the operator's own proxy). At most ``maxConnections`` at once; a
/// connection idle for 10 s while nothing of it is being answered is closed (a ``SideHTTPServer``).
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

    /// A refresh younger than this is not run again: however often and however many scrapers ask, the ledger is
    /// read at most once a second, and scrapes that arrive together share one read.
    public static let minimumRefreshInterval: Duration = .seconds(1)

    private let server: SideHTTPServer

    /// An endpoint serving `registry`, the meter of `rpcServer` (``RPCMetrics``) when given, and `text` (the
    /// service's own counters and histograms, ``PrometheusText``). `refresh` runs before a scrape (gauges read from
    /// the ledger or the service's state), at most once per ``minimumRefreshInterval``; `readiness` answers
    /// `/readyz`. `limits` is for tests of the limits themselves.
    public init(
        registry: PrometheusCollectorRegistry, rpcServer: RPCServer? = nil,
        text: (@Sendable () -> [UInt8])? = nil,
        refresh: @escaping @Sendable () async -> Void,
        readiness: @escaping @Sendable () async -> Readiness,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        limits: SideHTTPServer.Limits = .init(maxConnections: OperatorEndpoint.maxConnections, maxBody: 0)
    ) {
        let refreshes = Coalescer(minimumInterval: Self.minimumRefreshInterval, refresh: refresh)
        server = SideHTTPServer(limits: limits, group: group) { request in
            guard request.head.method == .GET || request.head.method == .HEAD else { return .text(405, "GET only") }
            switch request.path {
            case "/metrics":
                await refreshes.run()
                var body = registry.emitToBuffer()
                if let rpcServer { body += RPCMetrics.exposition(rpcServer.meterReading()) }
                if let text { body += text() }
                return .init(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: body)
            case "/healthz":
                return .text(200, "alive")
            case "/readyz":
                let answer = await readiness()
                return .text(answer.ready ? 200 : 503, answer.reason)
            default:
                return .text(404, "no such path: /metrics, /healthz, /readyz")
            }
        }
    }

    /// Listens on `host`:`port` (0: a port the system picks; see ``port``).
    /// - Throws: ``OperatorEndpointError`` for an address that is not loopback.
    public func start(host: String = "127.0.0.1", port: Int = 0) async throws {
        guard Loopback.contains(host: host) else {
            throw OperatorEndpointError(
                "the metrics endpoint listens on loopback only (\(host) is not): scrape it from the same host")
        }
        try await server.start(host: host, port: port)
    }

    /// The port listened on.
    public var port: Int { server.port }

    /// Stops listening and closes open connections.
    public func shutdown() async { await server.shutdown() }
}

/// Runs a refresh at most once per interval; callers that come while one runs wait for it rather than start
/// another.
private actor Coalescer {
    let minimumInterval: Duration
    let refresh: @Sendable () async -> Void
    private var running: Task<Void, Never>?
    private var finished: ContinuousClock.Instant?

    init(minimumInterval: Duration, refresh: @escaping @Sendable () async -> Void) {
        self.minimumInterval = minimumInterval
        self.refresh = refresh
    }

    func run() async {
        if let running { return await running.value }
        if let finished, ContinuousClock.now - finished < minimumInterval { return }
        let task = Task { [refresh] in await refresh() }
        running = task
        await task.value
        running = nil
        finished = .now
    }
}

/// Why the operator endpoint cannot start.
public struct OperatorEndpointError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
