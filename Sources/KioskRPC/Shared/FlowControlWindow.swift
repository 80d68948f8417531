/// The sending side of one call's flow-control window, in MESSAGE payload bytes.
///
/// A sender may send a message while the window is above zero; the message's
/// size is then taken off (the window may go below zero by that one message).
/// WINDOW_UPDATEs from the receiver add bytes back.
public struct OutboundFlowWindow: Hashable, Sendable {
    /// The initial window of every call in each direction: 1 MiB.
    public static let initialSize = 1024 * 1024

    /// Bytes the sender may still send; may be negative by up to one message.
    public private(set) var available: Int

    /// Creates a window of `initial` bytes.
    public init(initial: Int = OutboundFlowWindow.initialSize) {
        self.available = initial
    }

    /// True when one more message may be sent now.
    public var isOpen: Bool { available > 0 }

    /// Takes a sent message's payload size off the window.
    public mutating func didSend(bytes: Int) {
        available -= bytes
    }

    /// The largest a window may grow: 2^31 − 1 bytes, as in HTTP/2. A
    /// WINDOW_UPDATE past it is a protocol error.
    public static let maximumSize = Int(Int32.max)

    /// Adds a WINDOW_UPDATE's increment unless the window would pass
    /// ``maximumSize``; returns false (and leaves the window as it was) then.
    public mutating func didReceiveUpdateWithinLimit(increment: UInt32) -> Bool {
        guard available + Int(increment) <= Self.maximumSize else { return false }
        available += Int(increment)
        return true
    }

    /// Adds a WINDOW_UPDATE's increment; returns true when this reopened a closed window.
    public mutating func didReceiveUpdate(increment: UInt32) -> Bool {
        let wasOpen = isOpen
        let (sum, overflow) = available.addingReportingOverflow(Int(increment))
        available = overflow ? Int.max : sum
        return !wasOpen && isOpen
    }
}

/// The receiving side of one call's flow-control window: counts the bytes the
/// reader has consumed and says when to grant them back with a WINDOW_UPDATE.
///
/// Grants are batched (by default once a quarter of the window is consumed) so
/// a stream of small messages does not cost a WINDOW_UPDATE each. The sender
/// can never stall on a batch that was not sent yet: while fewer than
/// `threshold` consumed bytes are held back, more than `initial - threshold`
/// unread bytes remain for the reader.
public struct InboundFlowWindow: Hashable, Sendable {
    /// Consumed bytes not yet granted back.
    public private(set) var pending: Int
    /// Grant once this many bytes are consumed.
    public let threshold: Int

    /// Creates the receiving side of a window of `initial` bytes.
    public init(initial: Int = OutboundFlowWindow.initialSize) {
        self.pending = 0
        self.threshold = max(initial / 4, 1)
    }

    /// Records that the reader consumed a message of `bytes`; returns the
    /// increment to send now, if a WINDOW_UPDATE is due.
    public mutating func didConsume(bytes: Int) -> UInt32? {
        pending += bytes
        guard pending >= threshold else { return nil }
        let grant = UInt32(clamping: pending)
        pending -= Int(grant)
        return grant
    }
}
