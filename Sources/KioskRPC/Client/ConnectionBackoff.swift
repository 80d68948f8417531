import Foundation

/// Exponential backoff with jitter between connection attempts, as gRPC's
/// connection backoff.
///
/// The delay before attempt `n + 1` is `initial × multiplier^(n-1)`, capped at
/// `maximum`, then spread by ±`jitter` (a fraction) so that many clients
/// losing one server do not all come back in the same instant.
public struct ConnectionBackoff: Hashable, Sendable {
    /// Delay after the first failed attempt.
    public var initial: Duration
    /// Largest delay between attempts.
    public var maximum: Duration
    /// Growth of the delay per attempt.
    public var multiplier: Double
    /// Random spread of each delay, as a fraction of it (0.2 = ±20%).
    public var jitter: Double
    /// Connection attempts made for one call before it fails with UNAVAILABLE.
    public var maximumAttempts: Int

    /// 100 ms, growing ×1.6 up to 5 s, ±20%, 3 attempts.
    public static let defaults = ConnectionBackoff(
        initial: .milliseconds(100), maximum: .seconds(5), multiplier: 1.6, jitter: 0.2, maximumAttempts: 3)

    /// Creates a backoff policy.
    public init(initial: Duration, maximum: Duration, multiplier: Double, jitter: Double, maximumAttempts: Int) {
        self.initial = initial
        self.maximum = maximum
        self.multiplier = multiplier
        self.jitter = jitter
        self.maximumAttempts = maximumAttempts
    }

    /// The delay after failed attempt number `attempt` (1-based).
    /// - Parameters:
    ///   - attempt: the number of the attempt that failed, from 1.
    ///   - random: a value in 0...1 picking the point in the jitter range.
    public func delay(afterAttempt attempt: Int, random: Double) -> Duration {
        let base = initial.seconds * pow(multiplier, Double(max(attempt - 1, 0)))
        let capped = min(base, maximum.seconds)
        let spread = capped * jitter * (2 * min(max(random, 0), 1) - 1)
        return .nanoseconds(Int64(max(capped + spread, 0) * 1e9))
    }

    /// The delay after failed attempt number `attempt`, with system randomness.
    public func delay(afterAttempt attempt: Int) -> Duration {
        delay(afterAttempt: attempt, random: Double.random(in: 0...1))
    }
}

extension Duration {
    /// The duration in seconds, as a Double.
    public var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }

    /// The duration in milliseconds, rounded up, within 1…`UInt32.max` (a
    /// deadline already past is 1 ms, never 0, which would mean "none").
    var wholeMillisecondsRoundedUp: UInt32 {
        let milliseconds = (seconds * 1000).rounded(.up)
        return milliseconds >= Double(UInt32.max) ? .max : UInt32(max(milliseconds, 1))
    }
}
