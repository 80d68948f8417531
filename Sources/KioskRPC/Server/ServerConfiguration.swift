import KioskWire
import NIOCore
import Tracing

/// Configuration of an ``RPCServer``.
public struct ServerConfiguration: Sendable {
    /// Address to listen on; Kiosk's services default to loopback.
    public var host: String
    /// Port to listen on; 0 picks an ephemeral port (read it back from ``RPCServer/port``).
    public var port: Int
    /// Largest MESSAGE payload accepted, compressed or inflated. A frame
    /// announcing more is answered with GOAWAY(8) and a close.
    public var maximumMessageSize: Int
    /// Keepalive PINGs the server sends to find clients that vanished; nil turns them off.
    public var keepalive: Keepalive?
    /// Time given to in-flight calls to finish in a graceful shutdown.
    public var shutdownGracePeriod: Duration
    /// Adds handlers in front of Kiosk's framing on each accepted connection
    /// (the seam for TLS: a `NIOSSLServerHandler` goes here).
    public var transportConfigurator: (@Sendable (Channel) -> EventLoopFuture<Void>)?
    /// Runs each call's handler on its connection's event loop (a task with that
    /// loop as executor preference) instead of Swift's global pool: no thread hop
    /// per call. Handlers must then not block for long; work that does (file
    /// preparation, big computations) belongs on a queue of its own.
    public var runsHandlersOnEventLoop: Bool
    /// The certificate and key the server presents; nil serves plaintext, which
    /// ``RPCServer/start()`` allows only on a loopback address unless
    /// ``allowsPlaintextOffLoopback`` says otherwise.
    public var tls: ServerTLSIdentity?
    /// Serve plaintext on an address that is not loopback (`--insecure-plaintext`):
    /// tokens and receipts then cross the network in the clear.
    public var allowsPlaintextOffLoopback: Bool
    /// What one peer may make the server hold: connections, calls, metadata,
    /// timeouts, PINGs, buffered bytes (``ServerLimits/defaults``).
    public var limits: ServerLimits
    /// Times every call and counts its message bytes, for ``RPCServer/meterReading()`` (the services set it with
    /// `--metrics-port`): two clock reads and a few relaxed atomic adds per call. Calls by status code and in
    /// flight, connections and refusals are counted either way.
    public var metersCalls = false
    /// Traces every call with a server span, a child of the caller's span when its metadata carries a W3C
    /// `traceparent` (``JSONSpanTracer`` reads it); the span is the current context of the handler's task, so the
    /// spans its work starts are children of it. Nil (the default): the process's `InstrumentationSystem.tracer`
    /// when one was bootstrapped, else no tracing at all. Spans that handlers start themselves (the store's
    /// ledger and payment spans) come from the bootstrapped tracer, not this one.
    public var tracer: (any Tracer)?

    /// 127.0.0.1, ephemeral port, 4 MiB messages, keepalive every 60 s with a 20 s
    /// timeout, 10 s shutdown grace, no TLS (so loopback only), handlers on the event loops,
    /// ``ServerLimits/defaults``.
    public static var defaults: ServerConfiguration {
        ServerConfiguration(
            host: "127.0.0.1", port: 0, maximumMessageSize: Frame.defaultMaximumPayloadSize,
            keepalive: Keepalive(interval: .seconds(60), timeout: .seconds(20)),
            shutdownGracePeriod: .seconds(10), transportConfigurator: nil, runsHandlersOnEventLoop: true,
            limits: .defaults,
            tls: nil, allowsPlaintextOffLoopback: false)
    }

    /// Creates a configuration; see ``defaults``.
    public init(
        host: String = "127.0.0.1", port: Int = 0, maximumMessageSize: Int = Frame.defaultMaximumPayloadSize,
        keepalive: Keepalive? = Keepalive(interval: .seconds(60), timeout: .seconds(20)),
        shutdownGracePeriod: Duration = .seconds(10),
        transportConfigurator: (@Sendable (Channel) -> EventLoopFuture<Void>)? = nil,
        runsHandlersOnEventLoop: Bool = true,
        limits: ServerLimits = .defaults,
        tls: ServerTLSIdentity? = nil,
        allowsPlaintextOffLoopback: Bool = false
    ) {
        self.limits = limits
        self.tls = tls
        self.allowsPlaintextOffLoopback = allowsPlaintextOffLoopback
        self.runsHandlersOnEventLoop = runsHandlersOnEventLoop
        self.host = host
        self.port = port
        self.maximumMessageSize = maximumMessageSize
        self.keepalive = keepalive
        self.shutdownGracePeriod = shutdownGracePeriod
        self.transportConfigurator = transportConfigurator
    }
}
