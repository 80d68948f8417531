import KioskWire
import NIOCore

/// What one peer may make a server hold, with the refusal past each cap.
/// Every default is listed in docs/PROTOCOL.md ("Limits") with the code a peer gets.
public struct ServerLimits: Hashable, Sendable {
    /// Open connections per server; the one over the cap gets GOAWAY(8) and
    /// is closed. Default 10,000.
    public var maximumConnections: Int
    /// Calls open at once on one connection (HTTP/2's `MAX_CONCURRENT_STREAMS`);
    /// the call over the cap is refused with RESOURCE_EXHAUSTED (8) and the
    /// connection stays usable. Default 100.
    public var maximumConcurrentCalls: Int
    /// Largest HEADERS (and TRAILERS, GOAWAY) payload; a larger frame is
    /// refused from its first 5 bytes with GOAWAY(8). Default 16 KiB.
    public var maximumHeadersSize: Int
    /// Metadata entries in one call's HEADERS; more is refused with
    /// RESOURCE_EXHAUSTED (8). Default 64.
    public var maximumMetadataEntries: Int
    /// Time a call may stay open without its request message; past it the
    /// call ends with DEADLINE_EXCEEDED (4). Default 10 s.
    public var requestTimeout: TimeAmount
    /// Time a new connection has to send the preface; past it the connection
    /// is closed. Default 5 s.
    public var handshakeTimeout: TimeAmount
    /// A connection with no call opened or ended for between one and two of
    /// these periods (checked once a period) gets GOAWAY(0) and is closed; nil
    /// keeps idle connections. Default 5 minutes.
    public var idleTimeout: TimeAmount?
    /// PINGs that arrive while no call is open, less than
    /// ``minimumPingInterval`` after the previous one and with no call opened
    /// in between, are strikes; one strike more than this ends the connection
    /// with GOAWAY(8, "too_many_pings"), as gRPC's ENHANCE_YOUR_CALM. PINGs
    /// while calls are open keep them alive and are never strikes. Default 2.
    public var maximumPingStrikes: Int
    /// See ``maximumPingStrikes``. Default 5 s (Kiosk's clients ping every 30 s).
    public var minimumPingInterval: TimeAmount
    /// Outbound bytes buffered for one connection past which the server stops
    /// reading from it (and streaming sends wait) until they drain below
    /// ``outboundLowWaterMark``. Default 1 MiB.
    public var outboundHighWaterMark: Int
    /// See ``outboundHighWaterMark``. Default 512 KiB.
    public var outboundLowWaterMark: Int

    /// The defaults listed on each property.
    public static var defaults: ServerLimits { ServerLimits() }

    /// Creates limits; see each property for its default.
    public init(
        maximumConnections: Int = 10_000,
        maximumConcurrentCalls: Int = 100,
        maximumHeadersSize: Int = FrameLimits.defaultMaximumHeadersSize,
        maximumMetadataEntries: Int = 64,
        requestTimeout: TimeAmount = .seconds(10),
        handshakeTimeout: TimeAmount = .seconds(5),
        idleTimeout: TimeAmount? = .minutes(5),
        maximumPingStrikes: Int = 2,
        minimumPingInterval: TimeAmount = .seconds(5),
        outboundHighWaterMark: Int = 1024 * 1024,
        outboundLowWaterMark: Int = 512 * 1024
    ) {
        self.maximumConnections = maximumConnections
        self.maximumConcurrentCalls = maximumConcurrentCalls
        self.maximumHeadersSize = maximumHeadersSize
        self.maximumMetadataEntries = maximumMetadataEntries
        self.requestTimeout = requestTimeout
        self.handshakeTimeout = handshakeTimeout
        self.idleTimeout = idleTimeout
        self.maximumPingStrikes = maximumPingStrikes
        self.minimumPingInterval = minimumPingInterval
        self.outboundHighWaterMark = outboundHighWaterMark
        self.outboundLowWaterMark = outboundLowWaterMark
    }
}
