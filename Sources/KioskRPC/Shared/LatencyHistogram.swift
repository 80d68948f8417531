import NIOCore
import Synchronization

/// A histogram of durations, for metrics: counts per bucket and their sum, written with relaxed atomics from any
/// thread (no lock, nothing allocated per observation), read as a ``Reading`` when scraped. The RPC server's
/// per-method latency, the ledger's write latency and the webhook deliveries' latency are each one.
public final class LatencyHistogram: Sendable {
    /// The buckets' upper bounds, in seconds, ascending (the last bucket, +Inf, is implied).
    public let bounds: [Double]
    private let boundsNanos: [UInt64]
    private let buckets: [MeterCell]
    private let sumNanos = MeterCell()

    /// From 100 µs to 10 s: what an RPC or a durable write takes.
    public static let defaultBounds: [Double] = [
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]

    /// A histogram with `bounds` (seconds, ascending).
    public init(bounds: [Double] = LatencyHistogram.defaultBounds) {
        self.bounds = bounds
        self.boundsNanos = bounds.map { UInt64($0 * 1e9) }
        self.buckets = (0...bounds.count).map { _ in MeterCell() }
    }

    /// Counts one duration of `nanoseconds`.
    public func record(nanoseconds: UInt64) {
        var index = 0
        while index < boundsNanos.count && nanoseconds > boundsNanos[index] { index += 1 }
        buckets[index].add(1)
        sumNanos.add(nanoseconds)
    }

    /// Counts the time since `start`.
    public func record(since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let (seconds, attoseconds) = elapsed.components
        record(nanoseconds: UInt64(max(0, seconds)) * 1_000_000_000 + UInt64(max(0, attoseconds) / 1_000_000_000))
    }

    /// The histogram at a reading.
    public struct Reading: Hashable, Sendable {
        /// The buckets' upper bounds, in seconds.
        public var bounds: [Double]
        /// Observations per bucket, not cumulative: `bounds.count + 1` entries, the last over the largest bound.
        public var buckets: [UInt64]
        /// The sum of the observations, in seconds.
        public var sumSeconds: Double
        /// How many observations.
        public var count: UInt64 { buckets.reduce(0, +) }

        /// A reading of `buckets` (per bucket, not cumulative, `bounds.count + 1` of them) over `bounds`.
        public init(bounds: [Double], buckets: [UInt64], sumSeconds: Double) {
            self.bounds = bounds
            self.buckets = buckets
            self.sumSeconds = sumSeconds
        }
    }

    /// What it has counted.
    public var reading: Reading {
        Reading(bounds: bounds, buckets: buckets.map(\.load), sumSeconds: Double(sumNanos.load) / 1e9)
    }
}

/// A counter cell: its own allocation, so that two hot counters do not share a line by accident of layout.
final class MeterCell: Sendable {
    let value = Atomic<UInt64>(0)
    @inline(__always) func add(_ count: UInt64) { value.add(count, ordering: .relaxed) }
    var load: UInt64 { value.load(ordering: .relaxed) }
}
