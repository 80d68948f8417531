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

    private let server: SideHTTPServer

    /// An endpoint serving `registry`. `refresh` runs before each scrape (gauges read from the ledger or the
    /// service's state); `readiness` answers `/readyz`. `limits` is for tests of the limits themselves.
    public init(
        registry: PrometheusCollectorRegistry, refresh: @escaping @Sendable () async -> Void,
        readiness: @escaping @Sendable () async -> Readiness,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        limits: SideHTTPServer.Limits = .init(maxConnections: OperatorEndpoint.maxConnections, maxBody: 0)
    ) {
        server = SideHTTPServer(limits: limits, group: group) { request in
            guard request.head.method == .GET || request.head.method == .HEAD else { return .text(405, "GET only") }
            switch request.path {
            case "/metrics":
                await refresh()
                return .init(
                    status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8",
                    body: registry.emitToBuffer())
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

/// Why the operator endpoint cannot start.
public struct OperatorEndpointError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ description: String) { self.description = description }
}
