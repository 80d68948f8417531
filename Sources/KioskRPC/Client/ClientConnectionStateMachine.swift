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
        /// No new calls (the server said GOAWAY, or call ids ran out: `reason`); open ones finish, then the connection closes.
        case draining(Active, reason: RPCError)
        /// Closed, with the reason later calls are refused.
        case closed(reason: RPCError)
        /// Only while an event mutates `Active` in place (so the calls are never copied).
        case _modifying
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
        /// Send CANCEL for `callID` and end `call` with a local error; close after if `close`.
        case abandon(callID: UInt32, Call, error: RPCError, close: Bool)
        /// Grant the server more window on `callID`.
        case sendWindowUpdate(callID: UInt32, increment: UInt32)
        /// Fail these calls; the connection takes no new ones (tell the client);
        /// close it now if `close`.
        case retire(failing: [Call], error: RPCError, close: Bool)
        /// A breach by the server: fail every call with `error` and close.
        case closeWithError(failing: [Call], error: RPCError)
        /// The connection is gone: fail every call with `error`, but those never
        /// sent with `unsentError` (``RPCError/Source/unprocessed``: safe to retry).
        case failAll([Call], error: RPCError, unsent: [Call], unsentError: RPCError)
    }

    private(set) var state: State = .active(Active())
    let target: String

    init(target: String) {
        self.target = target
    }

    /// Calls open now.
    var openCalls: Int {
        switch state {
        case .active(let active), .draining(let active, _): active.calls.count
        case .closed, ._modifying: 0
        }
    }

    /// The open call `callID`, if any.
    func call(_ callID: UInt32) -> Call? {
        activeState()?.calls[callID]?.call
    }

    /// The caller opens a call.
    mutating func openCall(_ call: Call, method: String) -> OnOpen {
        guard case .active(var active) = state else {
            return .fail(
                RPCError(
                    .unavailable, "\(closingReason.message); the call to \(method) was not sent", source: .unprocessed))
        }
        state = ._modifying
        let id = active.nextCallID
        active.nextCallID += 1
        active.calls[id] = (ClientCallStateMachine(), call)
        if active.nextCallID == UInt32.max {
            // Call ids are spent: no new calls here; close once the open ones end.
            state = .draining(
                active,
                reason: RPCError(.unavailable, "connection to \(target) has used up its call ids", source: .connection))
            return .send(callID: id, retire: true)
        }
        state = .active(active)
        return .send(callID: id, retire: false)
    }

    /// A MESSAGE of `bytes` payload bytes arrived for `callID`.
    mutating func receivedMessage(callID: UInt32, bytes: Int) -> Action {
        let result =
            modifyActive { active -> (ClientCallStateMachine.OnMessage, Call)? in
                // One lookup: the entry is changed in place through its index.
                guard let index = active.calls.index(forKey: callID) else { return nil }
                return (
                    active.calls.values[index].machine.receivedMessage(bytes: bytes), active.calls.values[index].call
                )
            } ?? nil
        switch result {
        case (.deliver, let call)?:
            return .deliver(call)
        case (.windowExceeded(let window), _)?:
            return protocolError("server sent a MESSAGE on call \(callID) with its window at \(window) bytes")
        case (.ignore, _)?, nil:
            return .none
        }
    }

    /// TRAILERS arrived for `callID` (`status` nil: undecodable).
    mutating func receivedTrailers(callID: UInt32, status: CallStatus?) -> Action {
        guard let status else { return protocolError("undecodable TRAILERS for call \(callID)") }
        guard let (call, close) = removeCall(callID) else { return .none }
        return .finish(call, status: status, close: close)
    }

    /// The caller abandons `callID` (task cancelled, stream dropped) or its deadline passed.
    mutating func abandon(callID: UInt32, error: RPCError) -> Action {
        guard let (call, close) = removeCall(callID) else { return .none }
        return .abandon(callID: callID, call, error: error, close: close)
    }

    /// The caller consumed `increment` bytes of `callID`'s responses.
    mutating func granted(callID: UInt32, increment: UInt32) -> Action {
        let open = modifyActive { $0.calls[callID]?.machine.granted(increment) ?? false } ?? false
        return open ? .sendWindowUpdate(callID: callID, increment: increment) : .none
    }

    /// GOAWAY arrived (`goAway` nil: undecodable).
    mutating func receivedGoAway(_ goAway: GoAway?) -> Action {
        guard let goAway else { return protocolError("undecodable GOAWAY") }
        guard case .active(var active) = state else {
            if case .draining(var active, _) = state { return drain(&active, goAway) }
            return .none
        }
        return drain(&active, goAway)
    }

    private mutating func drain(_ active: inout Active, _ goAway: GoAway) -> Action {
        state = ._modifying
        let code = StatusCode(rawValue: goAway.code)
        let reason =
            code == .ok
            ? "server \(target) is shutting down"
            : "server \(target) closed the connection: \(goAway.message) (\(code.name))"
        var failing: [Call] = []
        for (id, entry) in active.calls where id > goAway.lastCallID {
            active.calls.removeValue(forKey: id)
            failing.append(entry.call)
        }
        let error = RPCError(.unavailable, "\(reason); the call was not started", source: .unprocessed)
        let closing = RPCError(code == .ok ? .unavailable : code, reason, source: .connection)
        if active.calls.isEmpty {
            state = .closed(reason: closing)
            return .retire(failing: failing, error: error, close: true)
        }
        state = .draining(active, reason: closing)
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
    /// Calls from `unsentFrom` on were never written to the socket (opened
    /// after the last flush): they fail as unprocessed, which a caller may retry.
    mutating func channelInactive(reason: RPCError?, unsentFrom: UInt32? = nil) -> Action {
        var drained: RPCError?
        if case .draining(_, let goAwayReason) = state { drained = goAwayReason }
        let error = reason ?? drained ?? RPCError(.unavailable, "connection to \(target) closed", source: .connection)
        var failing: [Call] = []
        var unsent: [Call] = []
        for (id, entry) in activeState()?.calls ?? [:] {
            if let unsentFrom, id >= unsentFrom { unsent.append(entry.call) } else { failing.append(entry.call) }
        }
        if case .closed = state {} else { state = .closed(reason: error) }
        guard !failing.isEmpty || !unsent.isEmpty else { return .none }
        return .failAll(
            failing, error: error, unsent: unsent,
            unsentError: RPCError(.unavailable, "\(error.message); the call was not sent", source: .unprocessed))
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
        case .draining(_, let reason): reason
        case .active, ._modifying: RPCError(.unavailable, "connection to \(target) is closing", source: .connection)
        }
    }

    private func activeState() -> Active? {
        switch state {
        case .active(let active), .draining(let active, _): active
        case .closed, ._modifying: nil
        }
    }

    /// Runs `body` on the open connection's data in place (no copy of the calls); nil when closed.
    private mutating func modifyActive<R>(_ body: (inout Active) -> R) -> R? {
        switch state {
        case .active(var active):
            state = ._modifying
            let result = body(&active)
            state = .active(active)
            return result
        case .draining(var active, let reason):
            state = ._modifying
            let result = body(&active)
            state = .draining(active, reason: reason)
            return result
        case .closed, ._modifying:
            return nil
        }
    }

    /// Takes an open call out; `close` is true when a draining connection has no call left (it is now closed).
    private mutating func removeCall(_ callID: UInt32) -> (call: Call, close: Bool)? {
        let removed =
            modifyActive { active -> (Call, Bool)? in
                guard var entry = active.calls.removeValue(forKey: callID), entry.machine.close() else { return nil }
                return (entry.call, active.calls.isEmpty)
            } ?? nil
        guard let (call, empty) = removed else { return nil }
        if empty, case .draining = state {
            state = .closed(reason: closingReason)
            return (call, true)
        }
        return (call, false)
    }
}
