import KioskWire
import NIOCore
import Testing

@testable import KioskRPC

/// ServerConnectionStateMachine, event by event, with no socket: every state,
/// every limit as one transition.
@Suite struct ServerConnectionStateMachineTests {
    typealias Machine = ServerConnectionStateMachine<Int>

    static let limits = ServerLimits(
        maximumConcurrentCalls: 2, maximumMetadataEntries: 3, maximumPingStrikes: 2, minimumPingInterval: .seconds(5))

    func headers(_ method: String = "/t.S/M", entries: Int = 0, timeoutMs: UInt32 = 0) -> CallHeaders {
        var metadata = Metadata()
        for index in 0..<entries { metadata.add("k\(index)", "v") }
        return CallHeaders(method: method, timeoutMs: timeoutMs, metadata: metadata)
    }

    func active(_ limits: ServerLimits = Self.limits) -> Machine {
        var machine = Machine(limits: limits)
        check(machine.prefaceReceived(shuttingDown: false).isNone)
        return machine
    }

    func open(_ machine: inout Machine, _ callID: UInt32) {
        guard case .openCall(callID, _) = machine.receivedHeaders(callID: callID, headers: headers(), route: .found)
        else {
            Issue.record("call \(callID) was not opened")
            return
        }
    }

    func goAway(of action: Machine.Action) -> GoAway? {
        if case .closeConnection(let goAway, _) = action { return goAway }
        if case .sendGoAway(let goAway) = action { return goAway }
        return nil
    }

    func closes(_ action: Machine.Action) -> Bool {
        if case .closeConnection = action { return true }
        return false
    }

    // MARK: awaitingPreface

    @Test func handshakeTimeoutClosesOnlyBeforeThePreface() {
        var machine = Machine(limits: Self.limits)
        check(closes(machine.handshakeTimedOut()))
        check(goAway(of: machine.handshakeTimedOut()) == nil)

        machine = active()
        guard case .none = machine.handshakeTimedOut() else {
            Issue.record("timer after the preface must do nothing")
            return
        }
    }

    @Test func prefaceDuringShutdownIsToldGoAwayAndClosed() {
        var machine = Machine(limits: Self.limits)
        check(machine.beginGracefulShutdown().isNone, "told once the preface arrives")
        let action = machine.prefaceReceived(shuttingDown: true)
        #expect(closes(action) && goAway(of: action)?.code == 0)
    }

    @Test func badPrefaceClosesWithoutGoAway() {
        var machine = Machine(limits: Self.limits)
        let action = machine.decodingFailed(WireError(.badPreface, "x"))
        #expect(closes(action) && goAway(of: action) == nil)
    }

    // MARK: active: opening calls

    @Test func callIDBreachesAreConnectionErrors() {
        for (id, decodable) in [(UInt32(0), true), (1, false)] {
            var machine = active()
            let action = machine.receivedHeaders(callID: id, headers: decodable ? headers() : nil, route: .found)
            #expect(goAway(of: action)?.code == StatusCode.internal.rawValue && closes(action))
        }
        var machine = active()
        open(&machine, 5)
        let reuse = machine.receivedHeaders(callID: 5, headers: headers(), route: .found)
        #expect(goAway(of: reuse)?.message.contains("reuses call id 5") == true)
        guard case .closeConnection(_, let ended) = reuse else { return }
        #expect(ended.map(\.callID) == [5], "the open call is stopped with the connection")
    }

    @Test func callOverTheConcurrencyCapIsRefusedAndTheConnectionLives() {
        var machine = active()
        open(&machine, 1)
        open(&machine, 3)
        guard case .refuseCall(5, let status) = machine.receivedHeaders(callID: 5, headers: headers(), route: .found)
        else {
            Issue.record("third call must be refused")
            return
        }
        #expect(status.code == StatusCode.resourceExhausted.rawValue)
        #expect(machine.openCalls == 2)
        // One ends: a new call fits again.
        _ = machine.receivedCancel(callID: 1)
        open(&machine, 7)
        // A late MESSAGE for the refused call is ignored.
        guard case .none = machine.receivedMessage(callID: 5, payload: ByteBuffer(), flags: .endStream) else {
            Issue.record("late")
            return
        }
    }

    @Test func tooManyMetadataEntriesUnknownMethodAndMissingCredentialAreRefused() {
        var machine = active()
        guard
            case .refuseCall(1, let many) = machine.receivedHeaders(
                callID: 1, headers: headers(entries: 4), route: .found)
        else {
            Issue.record("entries")
            return
        }
        #expect(many.code == StatusCode.resourceExhausted.rawValue)
        guard case .openCall(3, _) = machine.receivedHeaders(callID: 3, headers: headers(entries: 3), route: .found)
        else {
            Issue.record("3 entries fit")
            return
        }
        guard
            case .refuseCall(5, let unknown) = machine.receivedHeaders(
                callID: 5, headers: headers("/x.Y/Z"), route: .unknown)
        else {
            Issue.record("unknown")
            return
        }
        #expect(unknown.code == StatusCode.unimplemented.rawValue && unknown.message.contains("/x.Y/Z"))
        guard
            case .refuseCall(7, let unauthenticated) = machine.receivedHeaders(
                callID: 7, headers: headers(), route: .missingCredential)
        else {
            Issue.record("credential")
            return
        }
        #expect(unauthenticated.code == StatusCode.unauthenticated.rawValue)
        #expect(machine.openCalls == 1)
    }

    @Test func openingACallPassesItsTimeout() {
        var machine = active()
        guard
            case .openCall(1, 250) = machine.receivedHeaders(callID: 1, headers: headers(timeoutMs: 250), route: .found)
        else {
            Issue.record("timeout")
            return
        }
    }

    // MARK: active: messages, cancel, window, timers

    @Test func messageStartsTheHandlerAndUnknownCallIDsAreBreaches() {
        var machine = active()
        open(&machine, 1)
        guard
            case .startHandler(1, _, .endStream) = machine.receivedMessage(
                callID: 1, payload: ByteBuffer(), flags: .endStream)
        else {
            Issue.record("start")
            return
        }
        check(goAway(of: machine.receivedMessage(callID: 9, payload: ByteBuffer(), flags: [])) != nil, "never opened")
        var other = active()
        check(goAway(of: other.receivedMessage(callID: 0, payload: ByteBuffer(), flags: [])) != nil, "call id 0")
    }

    @Test func idleCheckClosesAConnectionWithNoCallSinceTheLastCheck() {
        var machine = active()
        open(&machine, 1)
        check(machine.idleCheckDue().isNone, "a call is open")
        guard case .endCall(let ended) = machine.deadlineExpired(callID: 1, timeoutMs: 10) else {
            Issue.record("deadline")
            return
        }
        #expect(ended.then == .none && ended.ending.status?.code == StatusCode.deadlineExceeded.rawValue)
        open(&machine, 3)
        _ = machine.receivedCancel(callID: 3)
        check(machine.idleCheckDue().isNone, "no call open, but one was opened since the last check")
        let idle = machine.idleCheckDue()
        #expect(closes(idle) && goAway(of: idle)?.code == 0)
    }

    @Test func requestTimeoutEndsACallStillWaitingForItsRequest() {
        var machine = active()
        open(&machine, 1)
        guard case .endCall(let ended) = machine.requestTimedOut(callID: 1) else {
            Issue.record("request timeout")
            return
        }
        #expect(ended.ending.status?.message.contains("no request message") == true)
    }

    @Test func windowUpdateOverflowIsAConnectionError() {
        var machine = active()
        open(&machine, 1)
        let action = machine.receivedWindowUpdate(callID: 1, increment: UInt32.max)
        #expect(goAway(of: action)?.code == StatusCode.internal.rawValue)
        check(machine.receivedWindowUpdate(callID: 0, increment: 1).isNone, "ignored once closed")
        var other = active()
        check(other.receivedWindowUpdate(callID: 0, increment: UInt32.max).isNone, "call 0 has no window")
    }

    @Test func sendsWaitForWritabilityAndReadsAreHeld() {
        var machine = active()
        open(&machine, 1)
        _ = machine.receivedMessage(callID: 1, payload: ByteBuffer(), flags: .endStream)
        check(machine.readRequested())
        check(machine.writabilityChanged(writable: false).isNone)
        check(!machine.readRequested(), "the peer is not reading: stop reading from it")
        guard case .suspend = machine.send(callID: 1, payload: ByteBuffer(), flags: [], waiter: 4) else {
            Issue.record("suspend")
            return
        }
        guard case .resumeReading(true, let writes, let ended, false) = machine.writabilityChanged(writable: true)
        else {
            Issue.record("resume")
            return
        }
        #expect(ended.isEmpty)
        #expect(writes.count == 1 && writes[0].callID == 1 && writes[0].sends.map(\.waiter) == [4])
        check(machine.readRequested())
        guard case .fail(5) = machine.send(callID: 99, payload: ByteBuffer(), flags: [], waiter: 5) else {
            Issue.record("unknown call")
            return
        }
    }

    @Test func unaryCompletionsWaitForWritabilityAndEndOnIt() {
        var machine = active()
        open(&machine, 1)
        _ = machine.receivedMessage(callID: 1, payload: ByteBuffer(), flags: .endStream)
        _ = machine.writabilityChanged(writable: false)
        check(
            machine.handlerFinished(callID: 1, response: (ByteBuffer(repeating: 1, count: 10), [])).isNone,
            "held while unwritable")
        check(machine.openCalls == 1)
        guard case .resumeReading(_, let writes, let ended, _) = machine.writabilityChanged(writable: true) else {
            Issue.record("resume")
            return
        }
        #expect(writes.isEmpty && ended.map(\.callID) == [1])
        #expect(ended.first?.ending.response?.payload.readableBytes == 10)
        check(machine.openCalls == 0)
    }

    // MARK: PINGs

    @Test func pingsWithoutCallsStrikeOutButSpacedPingsCallsAndOpenCallsDoNot() {
        var machine = active()
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        let ping = { (machine: inout Machine, seconds: Int64) -> Machine.Action in
            machine.receivedPing(payload: ByteBuffer(), now: start + .seconds(seconds))
        }
        guard case .sendPong = ping(&machine, 0) else {
            Issue.record("first")
            return
        }
        guard case .sendPong = ping(&machine, 1) else {
            Issue.record("strike 1")
            return
        }
        guard case .sendPong = ping(&machine, 2) else {
            Issue.record("strike 2")
            return
        }
        // A call in between resets the strikes; while it is open, PINGs are its keepalive.
        open(&machine, 1)
        for second in 3..<20 {
            guard case .sendPong = ping(&machine, Int64(second)) else {
                Issue.record("keepalive of an open call at \(second) s")
                return
            }
        }
        _ = machine.receivedCancel(callID: 1)
        guard case .sendPong = ping(&machine, 20) else {
            Issue.record("strike 1 after the call")
            return
        }
        // A spaced PING is no strike.
        guard case .sendPong = ping(&machine, 26) else {
            Issue.record("spaced")
            return
        }
        guard case .sendPong = ping(&machine, 27) else {
            Issue.record("strike 2")
            return
        }
        let calm = ping(&machine, 28)
        #expect(goAway(of: calm)?.code == StatusCode.resourceExhausted.rawValue)
        #expect(goAway(of: calm)?.message.hasPrefix("too_many_pings") == true)
    }

    // MARK: draining

    @Test func drainingFinishesOpenCallsRefusesNewOnesThenCloses() {
        var machine = active()
        open(&machine, 1)
        open(&machine, 3)
        guard case .sendGoAway(let goAway) = machine.beginGracefulShutdown() else {
            Issue.record("goaway")
            return
        }
        #expect(goAway.lastCallID == 3 && goAway.code == 0)
        check(machine.beginGracefulShutdown().isNone, "once")
        guard case .refuseCall(5, let status) = machine.receivedHeaders(callID: 5, headers: headers(), route: .found)
        else {
            Issue.record("refuse")
            return
        }
        #expect(status.code == StatusCode.unavailable.rawValue)
        guard case .startHandler = machine.receivedMessage(callID: 1, payload: ByteBuffer(), flags: .endStream) else {
            Issue.record("draining still serves")
            return
        }
        guard case .endCall(let first) = machine.handlerFinished(callID: 1, response: (ByteBuffer(), [])) else {
            Issue.record("finish 1")
            return
        }
        #expect(first.then == .none)
        guard case .endCall(let last) = machine.receivedCancel(callID: 3) else {
            Issue.record("cancel 3")
            return
        }
        #expect(last.then == .close)
        check(machine.receivedPing(payload: ByteBuffer(), now: .now()).isNone, "closed ignores")
    }

    @Test func gracefulShutdownWithNoCallsClosesAtOnce() {
        var machine = active()
        let action = machine.beginGracefulShutdown()
        #expect(closes(action) && goAway(of: action)?.code == 0)
    }

    @Test func forceShutdownEndsCallsWithUnavailable() {
        var machine = active()
        open(&machine, 1)
        _ = machine.beginGracefulShutdown()
        guard case .closeConnection(nil, let ended) = machine.forceShutdown() else {
            Issue.record("force")
            return
        }
        #expect(ended.map(\.ending.status?.code) == [StatusCode.unavailable.rawValue])
    }

    // MARK: closing

    @Test func decodingErrorsMapToGoAwayCodes() {
        var machine = active()
        check(
            goAway(of: machine.decodingFailed(WireError(.frameTooLarge, "big")))?.code
                == StatusCode.resourceExhausted.rawValue)
        machine = active()
        check(
            goAway(of: machine.decodingFailed(WireError(.frameTooShort, "short")))?.code == StatusCode.internal.rawValue
        )
        machine = active()
        check(goAway(of: machine.receivedForbiddenFrame(.trailers, callID: 1))?.code == StatusCode.internal.rawValue)
    }

    @Test func channelInactiveStopsEveryCallSilently() {
        var machine = active()
        open(&machine, 1)
        open(&machine, 3)
        guard case .closeConnection(nil, let ended) = machine.channelInactive() else {
            Issue.record("inactive")
            return
        }
        #expect(Set(ended.map(\.callID)) == [1, 3])
        #expect(ended.allSatisfy { $0.ending.status == nil })
        check(machine.channelInactive().isNone)
        check(machine.receivedHeaders(callID: 9, headers: headers(), route: .found).isNone)
        check(machine.readRequested())
    }
}

extension ServerConnectionStateMachine.Action {
    var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}
