import KioskWire

/// The lifecycle of one client connection, as a value: calls opened by the
/// caller and frames from the server in, actions out.
/// ``ClientConnectionHandler`` holds one and executes what it returns.
///
/// ```
///          GOAWAY received, or call ids spent        last call ended
/// active ───────────────────────────────────▶ draining ──────────────▶ closed
///    │   protocol error, connection lost                                ▲
///    └──────────────────────────────────────────────────────────────────┘
/// ```
///
/// `Call` is what the caller waits on (the runtime's ``ClientCall``; any value in tests).
struct ClientConnectionStateMachine<Call> {
    enum State {
        /// New calls may be opened.
        case active(Active)
        /// No new calls (the server said GOAWAY, or call ids ran out); open ones finish, then the connection closes.
        case draining(Active)
        /// Closed, with the reason later calls are refused.
        case closed(reason: RPCError)
    }

    struct Active {
        var calls: [UInt32: (machine: ClientCallStateMachine, call: Call)] = [:]
        var nextCallID: UInt32 = 1
    }

    enum OnOpen {
        /// Send HEADERS and the request on `callID`. `retire`: the connection
        /// takes no further calls (ids spent): tell the client to reconnect.
        case send(callID: UInt32, retire: Bool)
        /// The call cannot be opened here.
        case fail(RPCError)
    }

    enum Action {
        case none
        /// Hand a MESSAGE to `call`.
        case deliver(Call)
        /// End `call` with the server's status; close the connection after if `close`.
        case finish(Call, status: CallStatus, close: Bool)
        /// End `call` with a local error, sending CANCEL first if `sendCancel`; close after if `close`.
        case abandon(callID: UInt32, Call, error: RPCError, sendCancel: Bool, close: Bool)
        /// Grant the server more window on `callID`.
        case sendWindowUpdate(callID: UInt32, increment: UInt32)
        /// Fail these calls; the connection takes no new ones (tell the client);
        /// close it now if `close`.
        case retire(failing: [Call], error: RPCError, close: Bool)
        /// A breach by the server: fail every call with `error` and close.
        case closeWithError(failing: [Call], error: RPCError)
        /// The connection is gone: fail every call with `error`.
        case failAll([Call], error: RPCError)
    }

    private(set) var state: State = .active(Active())
    let target: String

    init(target: String) {
        self.target = target
    }

    /// Calls open now.
    var openCalls: Int {
        switch state {
        case .active(let active), .draining(let active): active.calls.count
        case .closed: 0
        }
    }

    /// The caller opens a call.
    mutating func openCall(_ call: Call, method: String) -> OnOpen {
        guard case .active(var active) = state else {
            return .fail(RPCError(.unavailable, "\(closingReason.message); the call to \(method) was not sent", source: .connection))
        }
        let id = active.nextCallID
        active.nextCallID += 1
        active.calls[id] = (ClientCallStateMachine(), call)
        if active.nextCallID == UInt32.max {
            // Call ids are spent: no new calls here; close once the open ones end.
            state = .draining(active)
            return .send(callID: id, retire: true)
        }
        state = .active(active)
        return .send(callID: id, retire: false)
    }

    /// A MESSAGE of `bytes` payload bytes arrived for `callID`.
    mutating func receivedMessage(callID: UInt32, bytes: Int) -> Action {
        guard var active = activeState(), var entry = active.calls[callID] else { return .none }
        switch entry.machine.receivedMessage(bytes: bytes) {
        case .deliver:
            active.calls[callID] = entry
            setActive(active)
            return .deliver(entry.call)
        case .windowExceeded(let window):
            return protocolError("server sent a MESSAGE on call \(callID) with its window at \(window) bytes")
        case .ignore:
            return .none
        }
    }

    /// TRAILERS arrived for `callID` (`status` nil: undecodable).
    mutating func receivedTrailers(callID: UInt32, status: CallStatus?) -> Action {
        guard let status else { return protocolError("undecodable TRAILERS for call \(callID)") }
        guard var active = activeState(), var entry = active.calls.removeValue(forKey: callID), entry.machine.close() else { return .none }
        let close = afterRemoval(active: &active)
        return .finish(entry.call, status: status, close: close)
    }

    /// The caller abandons `callID` (task cancelled, stream dropped) or its deadline passed.
    mutating func abandon(callID: UInt32, error: RPCError) -> Action {
        guard var active = activeState(), var entry = active.calls.removeValue(forKey: callID), entry.machine.close() else { return .none }
        let close = afterRemoval(active: &active)
        return .abandon(callID: callID, entry.call, error: error, sendCancel: true, close: close)
    }

    /// The caller consumed `increment` bytes of `callID`'s responses.
    mutating func granted(callID: UInt32, increment: UInt32) -> Action {
        guard var active = activeState(), var entry = active.calls[callID], entry.machine.granted(increment) else { return .none }
        active.calls[callID] = entry
        setActive(active)
        return .sendWindowUpdate(callID: callID, increment: increment)
    }

    /// GOAWAY arrived (`goAway` nil: undecodable).
    mutating func receivedGoAway(_ goAway: GoAway?) -> Action {
        guard let goAway else { return protocolError("undecodable GOAWAY") }
        guard var active = activeState() else { return .none }
        let code = StatusCode(rawValue: goAway.code)
        let reason = code == .ok
            ? "server \(target) is shutting down"
            : "server \(target) closed the connection: \(goAway.message) (\(code.name))"
        var failing: [Call] = []
        for (id, entry) in active.calls where id > goAway.lastCallID {
            active.calls.removeValue(forKey: id)
            failing.append(entry.call)
        }
        let error = RPCError(.unavailable, "\(reason); the call was not started", source: .connection)
        closeReasonOverride = RPCError(code == .ok ? .unavailable : code, reason, source: .connection)
        if active.calls.isEmpty {
            state = .closed(reason: closeReasonOverride ?? error)
            return .retire(failing: failing, error: error, close: true)
        }
        state = .draining(active)
        return .retire(failing: failing, error: error, close: false)
    }

    /// A protocol breach by the server (or a frame the decoder refused).
    mutating func protocolError(_ message: String, code: StatusCode = .internal) -> Action {
        let error = RPCError(code, "protocol error from \(target): \(message)", source: .connection)
        let failing = activeState().map { $0.calls.values.map(\.call) } ?? []
        state = .closed(reason: error)
        return .closeWithError(failing: failing, error: error)
    }

    /// The connection failed or closed; `reason` explains why, if known.
    mutating func channelInactive(reason: RPCError?) -> Action {
        let error = reason ?? closeReasonOverride ?? RPCError(.unavailable, "connection to \(target) closed", source: .connection)
        let failing = activeState().map { $0.calls.values.map(\.call) } ?? []
        if case .closed = state {} else { state = .closed(reason: error) }
        return failing.isEmpty ? .none : .failAll(failing, error: error)
    }

    #if DEBUG
    /// Tests: jump to the end of the call id space.
    mutating func forceNextCallID(_ id: UInt32) {
        guard case .active(var active) = state else { return }
        active.nextCallID = id
        state = .active(active)
    }
    #endif

    /// Why calls are refused now.
    var closingReason: RPCError {
        switch state {
        case .closed(let reason): reason
        case .active, .draining: closeReasonOverride ?? RPCError(.unavailable, "connection to \(target) is closing", source: .connection)
        }
    }

    /// What the server's GOAWAY said, for the calls that end with the connection.
    private var closeReasonOverride: RPCError?

    private func activeState() -> Active? {
        switch state {
        case .active(let active), .draining(let active): active
        case .closed: nil
        }
    }

    private mutating func setActive(_ active: Active) {
        switch state {
        case .active: state = .active(active)
        case .draining: state = .draining(active)
        case .closed: break
        }
    }

    /// Stores `active` after a call left; true when a draining connection has no call left and closes.
    private mutating func afterRemoval(active: inout Active) -> Bool {
        if case .draining = state, active.calls.isEmpty {
            state = .closed(reason: closingReason)
            return true
        }
        setActive(active)
        return false
    }
}
