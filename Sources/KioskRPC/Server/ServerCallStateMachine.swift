import KioskWire
import NIOCore

/// The lifecycle of one call on a server connection, as a value: events in,
/// actions out. ``ServerConnectionStateMachine`` owns one per open call; no
/// socket, task or timer is touched here.
///
/// ```
///                  MESSAGE                 handler returns / throws
/// awaitingRequest ─────────▶ running ───────────────────────────────▶ closed
///        │                     │  deadline, CANCEL, second MESSAGE,
///        │                     │  connection closed, forced shutdown
///        └─────────────────────┴────────────────────────────────────▶ closed
///   (request timeout, deadline, CANCEL, connection closed, forced shutdown)
/// ```
///
/// `Waiter` is what a suspended send resumes: a continuation in the runtime,
/// any value in tests.
struct ServerCallStateMachine<Waiter> {
    /// A streamed response waiting for window or writability.
    struct PendingSend {
        var payload: ByteBuffer
        var flags: FrameFlags
        var waiter: Waiter
    }

    enum State {
        /// HEADERS accepted; the request MESSAGE has not arrived yet.
        case awaitingRequest(window: OutboundFlowWindow)
        /// The handler runs with the request and may send responses.
        case running(Running)
        /// Ended (TRAILERS sent, cancelled, or the connection is gone): every later event is ignored.
        case closed
    }

    struct Running {
        var window: OutboundFlowWindow
        /// Sends waiting for window or writability, oldest first.
        var waiting: [PendingSend] = []
        /// The handler returned while the connection was unwritable: its
        /// response and TRAILERS wait for writability too.
        var heldCompletion: (payload: ByteBuffer, flags: FrameFlags)??
    }

    /// How a call ends: the TRAILERS to send (none when cancelled or the
    /// connection is gone) and the suspended sends to fail. The handler task
    /// is cancelled and the call's timers stopped in every case.
    struct Ending {
        var status: CallStatus?
        /// The unary response to write before the TRAILERS.
        var response: (payload: ByteBuffer, flags: FrameFlags)?
        var waiters: [Waiter]
    }

    enum OnRequest {
        /// The request arrived: run the handler with it.
        case startHandler(payload: ByteBuffer, flags: FrameFlags)
        case end(Ending)
        case none
    }

    enum OnSend {
        /// Write the message and let the sender go on.
        case write(PendingSend)
        /// Window spent or connection unwritable: the sender waits.
        case suspend
        /// The call has ended: fail the sender.
        case fail(Waiter)
    }

    enum OnFinish {
        /// Write the response and TRAILERS now.
        case end(Ending)
        /// The connection is unwritable: the completion waits for it.
        case held
        case none
    }

    enum OnWindowUpdate {
        /// Write these waiting sends (in order) and resume their senders.
        case write([PendingSend])
        /// The increment would take the window past 2^31 − 1.
        case overflow
        case none
    }

    private(set) var state: State

    /// A call whose HEADERS were accepted.
    init(initialWindow: Int = OutboundFlowWindow.initialSize) {
        state = .awaitingRequest(window: OutboundFlowWindow(initial: initialWindow))
    }

    var isClosed: Bool {
        if case .closed = state { return true }
        return false
    }

    /// A MESSAGE arrived from the client.
    mutating func receivedMessage(payload: ByteBuffer, flags: FrameFlags) -> OnRequest {
        switch state {
        case .awaitingRequest(let window):
            state = .running(Running(window: window))
            return .startHandler(payload: payload, flags: flags)
        case .running:
            return .end(
                end(
                    status: CallStatus(
                        code: StatusCode.invalidArgument.rawValue, message: "a call takes exactly one request message"))
            )
        case .closed:
            return .none
        }
    }

    /// The handler sends a streamed response.
    mutating func send(payload: ByteBuffer, flags: FrameFlags, waiter: Waiter, connectionWritable: Bool) -> OnSend {
        switch state {
        case .awaitingRequest:
            // Handlers run only once the request is here; treat as ended.
            return .fail(waiter)
        case .running(var running):
            state = .closed  // hold no second reference to `waiting` while it changes
            let send = PendingSend(payload: payload, flags: flags, waiter: waiter)
            guard running.waiting.isEmpty, running.window.isOpen, connectionWritable else {
                running.waiting.append(send)
                state = .running(running)
                return .suspend
            }
            running.window.didSend(bytes: payload.readableBytes)
            state = .running(running)
            return .write(send)
        case .closed:
            return .fail(waiter)
        }
    }

    /// The client granted `increment` more bytes.
    mutating func receivedWindowUpdate(increment: UInt32, connectionWritable: Bool) -> OnWindowUpdate {
        switch state {
        case .awaitingRequest(var window):
            guard window.didReceiveUpdateWithinLimit(increment: increment) else { return .overflow }
            state = .awaitingRequest(window: window)
            return .none
        case .running(var running):
            guard running.window.didReceiveUpdateWithinLimit(increment: increment) else { return .overflow }
            state = .closed  // hold no second reference to `waiting` while it changes
            let ready = connectionWritable ? Self.takeSendable(&running) : []
            state = .running(running)
            return ready.isEmpty ? .none : .write(ready)
        case .closed:
            return .none
        }
    }

    /// The connection is writable: the waiting sends the window allows, up to
    /// `budget` bytes (taken off it), then a held completion once no send waits.
    mutating func connectionBecameWritable(budget: inout Int) -> (sends: [PendingSend], ending: Ending?) {
        guard case .running(var running) = state, !running.waiting.isEmpty || running.heldCompletion != nil else {
            return ([], nil)
        }
        state = .closed  // hold no second reference to `waiting` while it changes
        let ready = Self.takeSendable(&running, budget: &budget)
        if running.waiting.isEmpty, budget > 0, let completion = running.heldCompletion {
            budget -= completion?.payload.readableBytes ?? 0
            var ending = end(status: CallStatus(code: StatusCode.ok.rawValue))
            ending.response = completion
            return (ready, ending)
        }
        state = .running(running)
        return (ready, nil)
    }

    private static func takeSendable(_ running: inout Running) -> [PendingSend] {
        var unlimited = Int.max
        return takeSendable(&running, budget: &unlimited)
    }

    private static func takeSendable(_ running: inout Running, budget: inout Int) -> [PendingSend] {
        var ready: [PendingSend] = []
        while running.window.isOpen, !running.waiting.isEmpty, budget > 0 {
            let send = running.waiting.removeFirst()
            running.window.didSend(bytes: send.payload.readableBytes)
            budget -= send.payload.readableBytes
            ready.append(send)
        }
        return ready
    }

    /// The handler returned: its response (unary) and TRAILERS OK, now, or
    /// once the connection is writable (a response is never queued behind a
    /// peer that is not reading).
    mutating func handlerFinished(
        response: (payload: ByteBuffer, flags: FrameFlags)?, connectionWritable: Bool
    ) -> OnFinish {
        guard case .running(var running) = state, running.heldCompletion == nil else { return .none }
        guard connectionWritable, running.waiting.isEmpty else {
            state = .closed
            running.heldCompletion = .some(response)
            state = .running(running)
            return .held
        }
        var ending = end(status: CallStatus(code: StatusCode.ok.rawValue))
        ending.response = response
        return .end(ending)
    }

    /// The handler threw, or the runtime refused the call (authentication,
    /// undecodable request): TRAILERS with `status`.
    mutating func handlerFailed(status: CallStatus) -> Ending? {
        guard !isClosed else { return nil }
        return end(status: status)
    }

    /// The client sent CANCEL: stop, send nothing more.
    mutating func receivedCancel() -> Ending? {
        guard !isClosed else { return nil }
        return end(status: nil)
    }

    /// The client's `timeout_ms` passed.
    mutating func deadlineExpired(timeoutMs: UInt32) -> Ending? {
        guard !isClosed else { return nil }
        return end(
            status: CallStatus(
                code: StatusCode.deadlineExceeded.rawValue, message: "deadline of \(timeoutMs) ms exceeded"))
    }

    /// The request did not arrive in time (only while awaiting it).
    mutating func requestTimedOut(after timeout: TimeAmount) -> Ending? {
        guard case .awaitingRequest = state else { return nil }
        let ms = timeout.nanoseconds / 1_000_000
        return end(
            status: CallStatus(
                code: StatusCode.deadlineExceeded.rawValue, message: "no request message within \(ms) ms of HEADERS"))
    }

    /// The server's grace period ended before the call did.
    mutating func shutdownForced() -> Ending? {
        guard !isClosed else { return nil }
        return end(
            status: CallStatus(
                code: StatusCode.unavailable.rawValue, message: "server shut down before the call finished"))
    }

    /// The connection is gone: nothing can be sent.
    mutating func connectionClosed() -> Ending? {
        guard !isClosed else { return nil }
        return end(status: nil)
    }

    private mutating func end(status: CallStatus?) -> Ending {
        let waiters: [Waiter]
        if case .running(let running) = state { waiters = running.waiting.map(\.waiter) } else { waiters = [] }
        state = .closed
        return Ending(status: status, response: nil, waiters: waiters)
    }
}
