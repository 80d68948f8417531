import KioskWire
import NIOCore
import Tracing

/// Configuration of an ``RPCClient``.
public struct ClientConfiguration: Sendable {
    /// Time allowed for one TCP connection attempt.
    public var connectTimeout: Duration
    /// Attempts and delays when connecting, and when reconnecting after a connection is lost.
    public var backoff: ConnectionBackoff
    /// Keepalive PINGs that detect a server that stopped answering; nil turns them off.
    public var keepalive: Keepalive?
    /// Largest response message accepted.
    public var maximumMessageSize: Int
    /// Timeout for calls whose ``CallOptions`` set none; nil means no deadline.
    public var defaultTimeout: Duration?
    /// Adds handlers in front of Kiosk's framing on each connection (the seam
    /// for TLS: a `NIOSSLClientHandler` goes here).
    public var transportConfigurator: (@Sendable (Channel) -> EventLoopFuture<Void>)?
    /// The roots the server's certificate must chain to and the name it must
    /// carry; nil speaks plaintext, which the client allows only to a loopback
    /// host unless ``allowsPlaintextOffLoopback`` says otherwise.
    public var tls: ClientTLS?
    /// Speak plaintext to a host that is not loopback: tokens and receipts
    /// then cross the network in the clear.
    public var allowsPlaintextOffLoopback: Bool
    /// With several endpoints, make the first connection to a random one
    /// instead of the first listed, so that many clients given the same list
    /// spread over the replicas (gRPC's `shuffleAddressList`).
    public var startsAtRandomEndpoint: Bool
    /// Traces calls: each awaited unary call gets a client span (a child of the current task's span), and every
    /// call carries the current trace context in its metadata (W3C `traceparent` with ``JSONSpanTracer``), so
    /// the server's span joins the caller's trace. Nil (the default): the process's
    /// `InstrumentationSystem.tracer` when one was bootstrapped, else no tracing at all.
    public var tracer: (any Tracer)?

    /// 5 s connect timeout, ``ConnectionBackoff/defaults``, keepalive every 30 s
    /// with a 10 s timeout, 4 MiB messages, no default deadline, no TLS (so loopback only).
    public static var defaults: ClientConfiguration { ClientConfiguration() }

    /// Creates a configuration; see ``defaults``.
    public init(
        connectTimeout: Duration = .seconds(5),
        backoff: ConnectionBackoff = .defaults,
        keepalive: Keepalive? = Keepalive(interval: .seconds(30), timeout: .seconds(10)),
        maximumMessageSize: Int = Frame.defaultMaximumPayloadSize,
        defaultTimeout: Duration? = nil,
        transportConfigurator: (@Sendable (Channel) -> EventLoopFuture<Void>)? = nil,
        tls: ClientTLS? = nil,
        allowsPlaintextOffLoopback: Bool = false,
        startsAtRandomEndpoint: Bool = false
    ) {
        self.startsAtRandomEndpoint = startsAtRandomEndpoint
        self.tls = tls
        self.allowsPlaintextOffLoopback = allowsPlaintextOffLoopback
        self.connectTimeout = connectTimeout
        self.backoff = backoff
        self.keepalive = keepalive
        self.maximumMessageSize = maximumMessageSize
        self.defaultTimeout = defaultTimeout
        self.transportConfigurator = transportConfigurator
    }
}

/// Options of one call.
public struct CallOptions: Sendable {
    /// The call's deadline, from when it starts; sent to the server as `timeout_ms`.
    public var timeout: Duration? {
        didSet { resolvedTimeout = timeout.map(CallTimeout.init) }
    }
    /// Request metadata, e.g. `authorization: Bearer <token>`.
    public var metadata: Metadata
    /// Compress the request with zlib, and ask for compressed responses.
    public var compress: Bool
    /// ``timeout`` in the forms a call takes, worked out when it is set, not on every call made with these options.
    private(set) var resolvedTimeout: CallTimeout?

    /// Creates call options.
    public init(timeout: Duration? = nil, metadata: Metadata = Metadata(), compress: Bool = false) {
        self.timeout = timeout
        self.metadata = metadata
        self.compress = compress
        self.resolvedTimeout = timeout.map(CallTimeout.init)
    }
}

/// A call's timeout and the forms a call takes it in, worked out once (each conversion of a
/// `Duration` splits its 128-bit count of attoseconds).
struct CallTimeout: Sendable {
    /// The timeout.
    let duration: Duration
    /// Sent to the server as `timeout_ms`.
    let milliseconds: UInt32
    /// For the event loop's deadline.
    let amount: TimeAmount

    init(_ duration: Duration) {
        self.duration = duration
        self.milliseconds = duration.wholeMillisecondsRoundedUp
        self.amount = TimeAmount(duration)
    }
}
