import NIOCore
import Synchronization

/// What an ``RPCServer`` counts for its operator, read by ``RPCServer/meterReading()`` (the services' Prometheus
/// endpoint exports it): per method, calls opened, calls ended by status code, a latency histogram, calls in
/// flight and message bytes each way; per server, connections accepted and refusals by ``ServerLimits`` cap.
///
/// Relaxed atomics, written on the event loops: a counter is never behind by more than the calls in flight.
/// Latency and bytes are taken only when ``ServerConfiguration/metersCalls`` is set (a clock read at each end of
/// a call); calls opened and in flight always are.
public enum ServerMeter {
    /// The upper bounds of the latency histogram's buckets, in seconds (the last bucket, +Inf, is implied).
    public static let latencyBounds: [Double] = LatencyHistogram.defaultBounds

    /// A ``ServerLimits`` cap a peer hit.
    public enum Limit: String, CaseIterable, Sendable {
        /// ``ServerLimits/maximumConnections``: the connection was refused on accept.
        case connections
        /// ``ServerLimits/maximumConcurrentCalls``: a call was refused (8).
        case concurrentCalls = "concurrent_calls"
        /// ``ServerLimits/maximumMetadataEntries``: a call was refused (8).
        case metadataEntries = "metadata_entries"
        /// The largest message or HEADERS (``ServerConfiguration/maximumMessageSize``,
        /// ``ServerLimits/maximumHeadersSize``): the connection was ended with GOAWAY.
        case frameSize = "frame_size"
        /// ``ServerLimits/requestTimeout``: a call's request did not come in time.
        case requestTimeout = "request_timeout"
        /// ``ServerLimits/handshakeTimeout``: no preface in time; the connection was closed.
        case handshakeTimeout = "handshake_timeout"
        /// ``ServerLimits/idleTimeout``: the connection was closed idle.
        case idleTimeout = "idle_timeout"
        /// ``ServerLimits/maximumPingStrikes``: too many PINGs without a call; the connection was ended.
        case pingStrikes = "ping_strikes"
    }

    /// One method's counts at a reading.
    public struct MethodReading: Hashable, Sendable {
        /// The full method name ("/package.Service/Method"), or "unknown" for calls to no served method.
        public var method: String
        /// Calls opened (admitted past the limits and the router).
        public var opened: UInt64
        /// Calls open now.
        public var inFlight: Int
        /// Calls ended (or refused), by status code (0…16).
        public var byCode: [UInt64]
        /// Ended calls per latency bucket, not cumulative: `latencyBounds.count + 1` entries, the last over the
        /// largest bound. Empty unless calls are metered.
        public var latencyBuckets: [UInt64]
        /// The sum of the metered calls' latencies, in seconds.
        public var latencySumSeconds: Double
        /// Request message bytes received (payloads, as framed).
        public var bytesIn: UInt64
        /// Response message bytes sent.
        public var bytesOut: UInt64
    }

    /// The server's counts at a reading.
    public struct Reading: Hashable, Sendable {
        /// Per method served (and "unknown"), by name.
        public var methods: [MethodReading]
        /// Connections accepted since the start (refused ones are counted under ``Limit/connections``).
        public var connectionsAccepted: UInt64
        /// Connections open now.
        public var connectionsOpen: Int
        /// Refusals by cap, since the start.
        public var refusals: [Limit: UInt64]
    }
}

/// One method's meter (shared by every copy of the router).
final class MethodMeter: Sendable {
    private let opened = MeterCell()
    private let ended = MeterCell()
    private let byCode = (0...16).map { _ in MeterCell() }
    private let latency = LatencyHistogram(bounds: ServerMeter.latencyBounds)
    private let bytesIn = MeterCell()
    private let bytesOut = MeterCell()

    /// A call was opened.
    @inline(__always) func increment() { opened.add(1) }
    /// Calls opened so far.
    var value: UInt64 { opened.load }

    /// An opened call ended with `code`; `startNanos` (uptime) 0 when it was not timed.
    func ended(code: UInt32, startNanos: UInt64) {
        ended.add(1)
        refused(code: code)
        guard startNanos > 0 else { return }
        latency.record(nanoseconds: NIODeadline.now().uptimeNanoseconds &- startNanos)
    }

    /// A call was answered with `code` without being opened (refused), or an opened one ended.
    func refused(code: UInt32) {
        byCode[code <= 16 ? Int(code) : 2].add(1)
    }

    func received(_ bytes: Int) { bytesIn.add(UInt64(bytes)) }
    func sent(_ bytes: Int) { bytesOut.add(UInt64(bytes)) }

    func reading(method: String, timed: Bool) -> ServerMeter.MethodReading {
        // Ended first: a call that ends between the two loads is then counted as still open, never as less.
        let endedNow = ended.load
        let openedNow = opened.load
        let latency = self.latency.reading
        return ServerMeter.MethodReading(
            method: method, opened: openedNow, inFlight: max(0, Int(truncatingIfNeeded: openedNow &- endedNow)),
            byCode: byCode.map(\.load), latencyBuckets: timed ? latency.buckets : [],
            latencySumSeconds: latency.sumSeconds, bytesIn: bytesIn.load, bytesOut: bytesOut.load)
    }
}

/// The server-wide part: connections and refusals by cap.
final class ConnectionMeter: Sendable {
    let accepted = MeterCell()
    private let refusals = ServerMeter.Limit.allCases.map { _ in MeterCell() }

    func refused(_ limit: ServerMeter.Limit) {
        refusals[ServerMeter.Limit.allCases.firstIndex(of: limit)!].add(1)
    }

    var refusalCounts: [ServerMeter.Limit: UInt64] {
        Dictionary(uniqueKeysWithValues: zip(ServerMeter.Limit.allCases, refusals.map(\.load)))
    }
}
