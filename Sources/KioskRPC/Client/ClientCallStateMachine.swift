/// The lifecycle of one call on a client connection, as a value.
///
/// ```
///        TRAILERS, CANCEL sent, deadline, GOAWAY above it, connection lost
/// open ────────────────────────────────────────────────────────────────▶ closed
/// ```
///
/// While open it keeps the call's inbound window: the server may send a
/// MESSAGE only while the window it was granted is above zero, so a server
/// that ignores flow control is caught before the client buffers more than a
/// window and one message.
struct ClientCallStateMachine: Hashable {
    enum State: Hashable {
        /// HEADERS and the request were sent; responses may arrive.
        case open(inboundWindow: Int)
        /// Ended: later frames for the call are ignored.
        case closed
    }

    enum OnMessage: Equatable {
        /// Hand the message to the caller.
        case deliver
        /// The server sent past its window: a protocol error.
        case windowExceeded(window: Int)
        /// The call has ended; drop it.
        case ignore
    }

    private(set) var state: State

    init(initialWindow: Int = OutboundFlowWindow.initialSize) {
        state = .open(inboundWindow: initialWindow)
    }

    var isOpen: Bool { state != .closed }

    /// A MESSAGE of `bytes` payload bytes arrived.
    mutating func receivedMessage(bytes: Int) -> OnMessage {
        guard case .open(let window) = state else { return .ignore }
        guard window > 0 else { return .windowExceeded(window: window) }
        state = .open(inboundWindow: window - bytes)
        return .deliver
    }

    /// The caller consumed `increment` bytes; true when a WINDOW_UPDATE should go out.
    mutating func granted(_ increment: UInt32) -> Bool {
        guard case .open(let window) = state else { return false }
        state = .open(inboundWindow: window + Int(increment))
        return true
    }

    /// The call ends (TRAILERS, cancel, deadline, GOAWAY, connection lost); true if it was open.
    mutating func close() -> Bool {
        guard isOpen else { return false }
        state = .closed
        return true
    }
}
