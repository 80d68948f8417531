import Foundation

/// The store's time, in milliseconds since 1970: every rule that depends on time (renewals, grace, offer
/// signatures, key validity, retention) reads it here, so a test or a sandbox can drive it.
public protocol StoreClock: Sendable {
    /// Now, in milliseconds since 1970.
    var nowMs: Int64 { get }
}

/// The machine's clock.
public struct SystemClock: StoreClock {
    public init() {}

    public var nowMs: Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded()) }
}

/// A clock that moves only when told to: for tests of time-dependent rules.
public final class ManualClock: StoreClock, @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int64

    /// A clock reading `startMs`.
    public init(startMs: Int64) { value = startMs }

    public var nowMs: Int64 { lock.withLock { value } }

    /// Moves the clock forward (or back, for a negative amount) by `ms`.
    public func advance(byMs ms: Int64) { lock.withLock { value += ms } }
}
