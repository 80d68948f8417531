/// PING/PONG keepalive settings for one side of a connection.
///
/// Every `interval` the side sends a PING; a peer that has not answered with
/// the matching PONG within `timeout` is taken as gone: the connection closes
/// and its calls fail with UNAVAILABLE (14).
public struct Keepalive: Hashable, Sendable {
    /// Time between PINGs.
    public var interval: Duration
    /// Time to wait for the PONG.
    public var timeout: Duration

    /// Creates keepalive settings.
    public init(interval: Duration, timeout: Duration) {
        self.interval = interval
        self.timeout = timeout
    }
}

/// The keepalive protocol of one connection as a value: which PING is
/// outstanding and what to do when a timer fires or a PONG arrives.
struct KeepaliveState {
    enum Action: Equatable {
        case none
        case sendPing(opaque: UInt64)
        case peerUnresponsive
    }

    private var outstanding: UInt64?
    private var nextOpaque: UInt64

    init(seed: UInt64 = UInt64.random(in: 1...UInt64.max / 2)) {
        self.nextOpaque = seed
    }

    /// The interval timer fired: ping unless a PING is still unanswered.
    mutating func intervalElapsed() -> Action {
        guard outstanding == nil else { return .none }
        nextOpaque &+= 1
        outstanding = nextOpaque
        return .sendPing(opaque: nextOpaque)
    }

    /// The PONG timeout for `opaque` fired.
    func timeoutElapsed(opaque: UInt64) -> Action {
        outstanding == opaque ? .peerUnresponsive : .none
    }

    /// A PONG arrived; returns true when it answered the outstanding PING.
    mutating func pongReceived(opaque: UInt64) -> Bool {
        guard outstanding == opaque else { return false }
        outstanding = nil
        return true
    }
}
