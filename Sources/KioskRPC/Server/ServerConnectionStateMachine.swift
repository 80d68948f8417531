import KioskWire
import NIOCore

/// The lifecycle of one server connection, as a value: frames, timers and
/// writability in; actions out. ``ServerConnectionHandler`` holds one and
/// only executes what it returns. Each open call is a
/// ``ServerCallStateMachine`` kept here, so every limit is one transition.
///
/// ```
///                 preface              GOAWAY(0) sent            no call left
/// awaitingPreface ───────▶ active ──────────────────▶ draining ──────────────▶ closed
///        │                   │  idle timeout, protocol error, ping abuse,      ▲
///        │                   │  connection lost                               │
///        └───────────────────┴────────────────────────────────────────────────┘
///     (handshake timeout, bad preface, connection lost)
/// ```
///
/// In `active` and `draining` the connection counts open calls (at most
/// ``ServerLimits/maximumConcurrentCalls``), PINGs without a call between
/// them (strikes), and whether the peer reads what we write: while the
/// outbound buffer is over its high-water mark, reads are held and streaming
/// sends wait.
struct ServerConnectionStateMachine<Waiter> {
    typealias Call = ServerCallStateMachine<Waiter>

    enum State {
        /// Accepted; the 8-byte preface has not arrived (handshake timer running).
        case awaitingPreface
        /// Serving calls.
        case active(Active)
        /// GOAWAY sent for a graceful shutdown: calls up to `lastCallID` finish,
        /// later ones are refused with UNAVAILABLE; closes when none is left.
        case draining(Active, lastCallID: UInt32)
        /// Closing or closed: every event is ignored.
        case closed
        /// Only while an event mutates `Active` in place (so the calls are never copied).
        case _modifying
    }

    struct Active {
        var calls: [UInt32: Call] = [:]
        var highestCallID: UInt32 = 0
        /// PINGs that came too soon, with no HEADERS since the last PING.
        var pingStrikes = 0
        var lastPing: NIODeadline?
        /// A call was opened or ended since the idle check last ran.
        var calledSinceIdleCheck = false
        /// False while the outbound buffer is over its high-water mark.
        var writable = true
        /// A read was asked for while unwritable: issue it once writable.
        var readHeld = false
    }

    /// What the connection does after a call ended.
    enum AfterCall: Equatable {
        case none
        /// Draining and no call is left: close.
        case close
    }

    /// A call that ended and what to do about it.
    struct CallEnded {
        var callID: UInt32
        var ending: Call.Ending
        var then: AfterCall
    }

    enum Action {
        case none
        /// A call was accepted: arm its deadline if `timeoutMs` > 0, and its
        /// request timer unless the request arrives in the same read.
        case openCall(callID: UInt32, timeoutMs: UInt32)
        /// The request arrived: run the handler.
        case startHandler(callID: UInt32, payload: ByteBuffer, flags: FrameFlags)
        /// Refuse a call without opening it: TRAILERS with `status`.
        case refuseCall(callID: UInt32, status: CallStatus)
        /// End a call: response and TRAILERS if any, fail waiters, cancel its handler and timers.
        case endCall(CallEnded)
        /// Write streamed responses and resume their senders.
        case writeMessages(callID: UInt32, [Call.PendingSend])
        /// Answer a PING.
        case sendPong(ByteBuffer)
        /// GOAWAY for a graceful shutdown; the connection stays open for the calls it lets finish.
        case sendGoAway(GoAway)
        /// End these calls (writing the TRAILERS they carry), send `goAway` if
        /// any, flush and close the connection.
        case closeConnection(goAway: GoAway?, endedCalls: [CallEnded])
        /// The connection is writable again: write the sends and end the calls
        /// whose completions were waiting for it (at most a high-water mark's
        /// worth), resume reading if a read was held; if `more` is left, ask
        /// again while the channel stays writable.
        case resumeReading(
            readHeld: Bool, writes: [(callID: UInt32, sends: [Call.PendingSend])], ended: [CallEnded], more: Bool)
    }

    /// What a streaming send does.
    enum OnSend {
        case write(Call.PendingSend)
        case suspend
        case fail(Waiter)
    }

    /// How the handler found the method a HEADERS frame names.
    enum Route: Equatable {
        /// No such method: UNIMPLEMENTED.
        case unknown
        /// The method needs a credential and the metadata has none: UNAUTHENTICATED.
        case missingCredential
        /// Served (its authenticator, if any, runs before the request is decoded).
        case found
    }

    let limits: ServerLimits
    /// Counts the limits peers hit; nil counts nothing.
    let meter: ConnectionMeter?
    private(set) var state: State = .awaitingPreface

    init(limits: ServerLimits, meter: ConnectionMeter? = nil) {
        self.limits = limits
        self.meter = meter
    }

    /// The number of calls open now (for tests and metrics).
    var openCalls: Int {
        switch state {
        case .active(let active), .draining(let active, _): active.calls.count
        case .awaitingPreface, .closed, ._modifying: 0
        }
    }

    // MARK: Handshake

    /// The preface arrived.
    mutating func prefaceReceived(shuttingDown: Bool) -> Action {
        guard case .awaitingPreface = state else { return .none }
        if shuttingDown {
            state = .closed
            return .closeConnection(
                goAway: GoAway(lastCallID: 0, code: StatusCode.ok.rawValue, message: "server is shutting down"),
                endedCalls: [])
        }
        state = .active(Active())
        return .none
    }

    /// The handshake timer fired: close unless the preface arrived.
    mutating func handshakeTimedOut() -> Action {
        guard case .awaitingPreface = state else { return .none }
        state = .closed
        meter?.refused(.handshakeTimeout)
        return .closeConnection(goAway: nil, endedCalls: [])
    }

    // MARK: Frames

    /// True once the connection is closing or closed: every event is ignored from then on.
    var isClosed: Bool {
        if case .closed = state { return true }
        return false
    }

    /// False while the peer does not read what we write (the frames already read wait, unframed, until it
    /// does: answering them would pile up more, out of the high-water mark's reach) and once closed.
    var takesFrames: Bool {
        switch state {
        case .awaitingPreface: true
        case .active(let active), .draining(let active, _): active.writable
        case .closed, ._modifying: false
        }
    }

    /// True when a call admitted now may be deferred (see ``receivedHeaders(callID:headers:route:deferOpening:)``):
    /// serving, not draining, and the peer reads what we write.
    var acceptsDeferredCall: Bool {
        if case .active(let active) = state { return active.writable }
        return false
    }

    /// HEADERS opened call `callID`. `headers` is nil when the payload did not
    /// decode; `route` says how the method was found.
    ///
    /// With `deferOpening` (only while ``acceptsDeferredCall``), an admitted
    /// call is counted as opened (call id, strikes, idleness) but not entered:
    /// the handler means to finish it before any other event reaches the
    /// machine (an inline unary call whose request is in the same read), or
    /// else enters it with ``openDeferred(callID:)`` first.
    mutating func receivedHeaders(
        callID: UInt32, headers: CallHeaders?, route: Route, deferOpening: Bool = false
    ) -> Action {
        let lastCallID: UInt32?
        switch state {
        case .awaitingPreface:
            // The decoder delivers no frame before the preface.
            return connectionError(.internal, "HEADERS before the preface", lastCallID: 0)
        case .closed, ._modifying:
            return .none
        case .active(let active):
            if let error = Self.checkCallID(callID, headers: headers, active: active) {
                return connectionError(.internal, error, lastCallID: active.highestCallID)
            }
            lastCallID = nil
        case .draining(let active, let last):
            if let error = Self.checkCallID(callID, headers: headers, active: active) {
                return connectionError(.internal, error, lastCallID: active.highestCallID)
            }
            lastCallID = last
        }
        let limits = self.limits
        let meter = self.meter
        return modifyActive { active in
            active.highestCallID = callID
            active.pingStrikes = 0
            active.calledSinceIdleCheck = true
            if let lastCallID, callID > lastCallID {
                return .refuseCall(
                    callID: callID,
                    status: CallStatus(
                        code: StatusCode.unavailable.rawValue,
                        message: "server is shutting down; call \(callID) was not started"))
            }
            if let refusal = Self.admission(
                callID: callID, headers: headers, route: route, active: active, limits: limits, meter: meter)
            {
                return .refuseCall(callID: callID, status: refusal)
            }
            if !deferOpening { active.calls[callID] = Call() }
            return .openCall(callID: callID, timeoutMs: headers?.timeoutMs ?? 0)
        } ?? .none
    }

    /// Enters call `callID`, admitted with `deferOpening` by the last HEADERS
    /// and not finished before this event: from here on it is an open call
    /// like any other. False (nothing entered) if the connection is closed.
    mutating func openDeferred(callID: UInt32) -> Bool {
        modifyActive { active in active.calls[callID] = Call() } != nil
    }

    private static func checkCallID(_ callID: UInt32, headers: CallHeaders?, active: Active) -> String? {
        if callID == 0 { return "HEADERS on call id 0" }
        if callID <= active.highestCallID {
            return "HEADERS reuses call id \(callID) (highest so far \(active.highestCallID))"
        }
        if headers == nil { return "undecodable HEADERS for call \(callID)" }
        return nil
    }

    /// Why a well-formed call is refused, if it is: limits first, then routing.
    private static func admission(
        callID: UInt32, headers: CallHeaders?, route: Route, active: Active, limits: ServerLimits,
        meter: ConnectionMeter?
    ) -> CallStatus? {
        if active.calls.count >= limits.maximumConcurrentCalls {
            meter?.refused(.concurrentCalls)
            return CallStatus(
                code: StatusCode.resourceExhausted.rawValue,
                message:
                    "connection has its maximum of \(limits.maximumConcurrentCalls) calls open; call \(callID) was not started"
            )
        }
        let entries = headers?.metadata.count ?? 0
        if entries > limits.maximumMetadataEntries {
            meter?.refused(.metadataEntries)
            return CallStatus(
                code: StatusCode.resourceExhausted.rawValue,
                message: "\(entries) metadata entries exceed the limit of \(limits.maximumMetadataEntries)")
        }
        switch route {
        case .unknown:
            return CallStatus(
                code: StatusCode.unimplemented.rawValue, message: "unknown method \(headers?.method ?? "")")
        case .missingCredential:
            return CallStatus(
                code: StatusCode.unauthenticated.rawValue,
                message: "\(headers?.method ?? "this method") needs metadata \"authorization: Bearer <token>\"")
        case .found:
            return nil
        }
    }

    /// A MESSAGE arrived for `callID`.
    mutating func receivedMessage(callID: UInt32, payload: ByteBuffer, flags: FrameFlags) -> Action {
        guard let highestCallID = activeState()?.highestCallID else { return .none }
        guard callID != 0, callID <= highestCallID else {
            return connectionError(
                .internal, "MESSAGE for call \(callID), which was never opened", lastCallID: highestCallID)
        }
        // A call that already ended (or was refused) ignores late frames.
        let result =
            modifyActive { active -> Call.OnRequest? in
                active.calls[callID]?.receivedMessage(payload: payload, flags: flags)
            } ?? nil
        switch result {
        case .startHandler(let payload, let flags)?:
            return .startHandler(callID: callID, payload: payload, flags: flags)
        case .end(let ending)?:
            return .endCall(remove(callID, ending))
        case .none?, nil:
            return .none
        }
    }

    /// The client sent CANCEL for `callID`.
    mutating func receivedCancel(callID: UInt32) -> Action {
        updateCall(callID) { $0.receivedCancel() }
    }

    /// The client granted window for `callID` (0: the connection; no such window, ignored).
    mutating func receivedWindowUpdate(callID: UInt32, increment: UInt32) -> Action {
        guard callID != 0, let highestCallID = activeState()?.highestCallID else { return .none }
        let result =
            modifyActive { active -> Call.OnWindowUpdate? in
                active.calls[callID]?.receivedWindowUpdate(increment: increment, connectionWritable: active.writable)
            } ?? nil
        switch result {
        case .overflow?:
            return connectionError(
                .internal, "WINDOW_UPDATE of \(increment) takes call \(callID)'s window past 2^31-1",
                lastCallID: highestCallID)
        case .write(let sends)?:
            return .writeMessages(callID: callID, sends)
        case .none?, nil:
            return .none
        }
    }

    /// A PING arrived at `now`.
    mutating func receivedPing(payload: ByteBuffer, now: NIODeadline) -> Action {
        let limits = self.limits
        let struckOut = modifyActive { active -> Bool in
            // A PING while calls are open is keepalive for them, never a strike.
            if active.calls.isEmpty, let last = active.lastPing, now - last < limits.minimumPingInterval {
                active.pingStrikes += 1
            }
            active.lastPing = now
            return active.pingStrikes > limits.maximumPingStrikes
        }
        switch struckOut {
        case nil:
            return .none
        case true?:
            meter?.refused(.pingStrikes)
            return connectionError(
                .resourceExhausted,
                "too_many_pings: more than \(limits.maximumPingStrikes) PINGs without a call (ENHANCE_YOUR_CALM)",
                lastCallID: activeState()?.highestCallID ?? 0)
        case false?:
            return .sendPong(payload)
        }
    }

    /// A frame a client may not send (TRAILERS): a protocol error.
    mutating func receivedForbiddenFrame(_ type: FrameType, callID: UInt32) -> Action {
        guard let active = activeState() else { return .none }
        return connectionError(
            .internal, "a client may not send \(type) (call \(callID))", lastCallID: active.highestCallID)
    }

    /// The frame decoder failed: too large, too short, or a bad preface.
    mutating func decodingFailed(_ error: WireError) -> Action {
        switch state {
        case .closed, ._modifying:
            return .none
        case .awaitingPreface:
            state = .closed
            return .closeConnection(goAway: nil, endedCalls: [])
        case .active(let active), .draining(let active, _):
            if error.code == .badPreface {
                let ended = endAll { $0.connectionClosed() }
                state = .closed
                return .closeConnection(goAway: nil, endedCalls: ended)
            }
            if error.code == .frameTooLarge { meter?.refused(.frameSize) }
            let code: StatusCode = error.code == .frameTooLarge ? .resourceExhausted : .internal
            return connectionError(code, error.message, lastCallID: active.highestCallID)
        }
    }

    // MARK: Handler side

    /// The handler of `callID` sends a streamed response.
    mutating func send(callID: UInt32, payload: ByteBuffer, flags: FrameFlags, waiter: Waiter) -> OnSend {
        let result =
            modifyActive { active -> Call.OnSend? in
                active.calls[callID]?.send(
                    payload: payload, flags: flags, waiter: waiter, connectionWritable: active.writable)
            } ?? nil
        switch result {
        case .write(let send)?: return .write(send)
        case .suspend?: return .suspend
        case .fail(let waiter)?: return .fail(waiter)
        case nil: return .fail(waiter)
        }
    }

    /// The handler of `callID` returned.
    mutating func handlerFinished(callID: UInt32, response: (payload: ByteBuffer, flags: FrameFlags)?) -> Action {
        let writable = activeState()?.writable ?? true
        return updateCall(callID) { call in
            if case .end(let ending) = call.handlerFinished(response: response, connectionWritable: writable) {
                return ending
            }
            return nil
        }
    }

    /// The handler of `callID` threw, or the runtime refused its request.
    mutating func handlerFailed(callID: UInt32, status: CallStatus) -> Action {
        updateCall(callID) { $0.handlerFailed(status: status) }
    }

    // MARK: Timers

    mutating func deadlineExpired(callID: UInt32, timeoutMs: UInt32) -> Action {
        updateCall(callID) { $0.deadlineExpired(timeoutMs: timeoutMs) }
    }

    mutating func requestTimedOut(callID: UInt32) -> Action {
        let timeout = limits.requestTimeout
        let action = updateCall(callID) { $0.requestTimedOut(after: timeout) }
        // Counted only when it ended the call: a timer that fired as the request arrived refused nothing.
        if case .endCall = action { meter?.refused(.requestTimeout) }
        return action
    }

    /// The idle check runs every ``ServerLimits/idleTimeout``: GOAWAY and close
    /// when no call is open and none was opened since the previous check (so a
    /// connection goes after between one and two idle periods without a call,
    /// and no timer is touched per call).
    mutating func idleCheckDue() -> Action {
        let idle = modifyActive { active -> Bool in
            defer { active.calledSinceIdleCheck = false }
            return active.calls.isEmpty && !active.calledSinceIdleCheck
        }
        guard idle == true, case .active(let active) = state else { return .none }
        state = .closed
        meter?.refused(.idleTimeout)
        let seconds = limits.idleTimeout.map { $0.nanoseconds / 1_000_000_000 } ?? 0
        return .closeConnection(
            goAway: GoAway(
                lastCallID: active.highestCallID, code: StatusCode.ok.rawValue,
                message: "connection idle for \(seconds) s"), endedCalls: [])
    }

    // MARK: Backpressure

    /// NIO asks to read more: allowed unless the peer is not reading what we write.
    mutating func readRequested() -> Bool {
        modifyActive { active -> Bool in
            guard !active.writable else { return true }
            active.readHeld = true
            return false
        } ?? true
    }

    /// The channel's outbound buffer crossed a water mark (or the handler
    /// asks for more after a resume left some).
    mutating func writabilityChanged(writable: Bool) -> Action {
        let budgetSize = limits.outboundHighWaterMark
        let result =
            modifyActive {
                active -> (
                    held: Bool, writes: [(callID: UInt32, sends: [Call.PendingSend])], endings: [(UInt32, Call.Ending)],
                    more: Bool
                )? in
                active.writable = writable
                guard writable else { return nil }
                var budget = budgetSize
                var writes: [(callID: UInt32, sends: [Call.PendingSend])] = []
                var endings: [(UInt32, Call.Ending)] = []
                for id in active.calls.keys.sorted() {
                    guard budget > 0 else { break }
                    guard let (sends, ending) = active.calls[id]?.connectionBecameWritable(budget: &budget) else {
                        continue
                    }
                    if !sends.isEmpty { writes.append((id, sends)) }
                    if let ending { endings.append((id, ending)) }
                }
                let held = active.readHeld
                active.readHeld = false
                return (held, writes, endings, budget <= 0)
            } ?? nil
        guard let result else { return .none }
        let ended = result.endings.map { id, ending in remove(id, ending) }
        guard result.held || !result.writes.isEmpty || !ended.isEmpty else { return .none }
        return .resumeReading(readHeld: result.held, writes: result.writes, ended: ended, more: result.more)
    }

    // MARK: Shutdown and close

    /// A graceful shutdown began: GOAWAY(0); close now if no call is open.
    mutating func beginGracefulShutdown() -> Action {
        switch state {
        case .awaitingPreface:
            // Told once the preface arrives (prefaceReceived(shuttingDown: true)).
            return .none
        case .active(let active):
            let goAway = GoAway(
                lastCallID: active.highestCallID, code: StatusCode.ok.rawValue, message: "server is shutting down")
            guard !active.calls.isEmpty else {
                state = .closed
                return .closeConnection(goAway: goAway, endedCalls: [])
            }
            state = .draining(active, lastCallID: active.highestCallID)
            return .sendGoAway(goAway)
        case .draining, .closed, ._modifying:
            return .none
        }
    }

    /// The grace period is over: end every call with UNAVAILABLE and close.
    mutating func forceShutdown() -> Action {
        guard activeState() != nil else {
            state = .closed
            return .closeConnection(goAway: nil, endedCalls: [])
        }
        let ended = endAll { $0.shutdownForced() }
        state = .closed
        return .closeConnection(goAway: nil, endedCalls: ended)
    }

    /// The channel closed: stop every call; nothing can be sent.
    mutating func channelInactive() -> Action {
        guard activeState() != nil else {
            state = .closed
            return .none
        }
        let ended = endAll { $0.connectionClosed() }
        state = .closed
        return ended.isEmpty ? .none : .closeConnection(goAway: nil, endedCalls: ended)
    }

    // MARK: Helpers

    private func activeState() -> Active? {
        switch state {
        case .active(let active), .draining(let active, _): active
        case .awaitingPreface, .closed, ._modifying: nil
        }
    }

    /// Runs `body` on the active (or draining) connection's data in place:
    /// the state holds no other reference meanwhile, so the calls are never
    /// copied. Nil when there is no such data (before the preface, closed).
    private mutating func modifyActive<R>(_ body: (inout Active) -> R) -> R? {
        switch state {
        case .active(var active):
            state = ._modifying
            let result = body(&active)
            state = .active(active)
            return result
        case .draining(var active, let lastCallID):
            state = ._modifying
            let result = body(&active)
            state = .draining(active, lastCallID: lastCallID)
            return result
        case .awaitingPreface, .closed, ._modifying:
            return nil
        }
    }

    private mutating func updateCall(_ callID: UInt32, _ event: (inout Call) -> Call.Ending?) -> Action {
        let ending =
            modifyActive { active -> Call.Ending? in
                guard var call = active.calls.removeValue(forKey: callID) else { return nil }
                let ending = event(&call)
                if ending == nil { active.calls[callID] = call } else { active.calledSinceIdleCheck = true }
                return ending
            } ?? nil
        guard let ending else { return .none }
        return .endCall(afterRemoval(callID, ending))
    }

    /// Removes an ended call and says what the connection does next.
    private mutating func remove(_ callID: UInt32, _ ending: Call.Ending) -> CallEnded {
        _ = modifyActive { active in
            active.calls.removeValue(forKey: callID)
            active.calledSinceIdleCheck = true
        }
        return afterRemoval(callID, ending)
    }

    /// What the connection does once `callID` has left it.
    private mutating func afterRemoval(_ callID: UInt32, _ ending: Call.Ending) -> CallEnded {
        let then: AfterCall
        switch state {
        case .draining(let active, _) where active.calls.isEmpty:
            state = .closed
            then = .close
        default:
            then = .none
        }
        return CallEnded(callID: callID, ending: ending, then: then)
    }

    /// Ends every call with `event` (the connection is closing); leaves none.
    private mutating func endAll(_ event: (inout Call) -> Call.Ending?) -> [CallEnded] {
        modifyActive { active -> [CallEnded] in
            var ended: [CallEnded] = []
            for (id, var call) in active.calls {
                if let ending = event(&call) { ended.append(CallEnded(callID: id, ending: ending, then: .none)) }
            }
            active.calls.removeAll()
            return ended
        } ?? []
    }

    /// A breach (or abuse) of the protocol: stop every call, GOAWAY with `code`, close.
    private mutating func connectionError(_ code: StatusCode, _ message: String, lastCallID: UInt32) -> Action {
        let ended = endAll { $0.connectionClosed() }
        state = .closed
        return .closeConnection(
            goAway: GoAway(lastCallID: lastCallID, code: code.rawValue, message: message), endedCalls: ended)
    }
}
