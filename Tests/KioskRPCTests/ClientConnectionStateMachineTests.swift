import KioskWire
import Testing

@testable import KioskRPC

/// ClientConnectionStateMachine, event by event.
@Suite struct ClientConnectionStateMachineTests {
    typealias Machine = ClientConnectionStateMachine<String>

    func open(_ machine: inout Machine, _ name: String) -> UInt32 {
        guard case .send(let id, false) = machine.openCall(name, method: "/t.S/M") else {
            Issue.record("\(name) not opened")
            return 0
        }
        return id
    }

    @Test func callIDsIncreaseFromOne() {
        var machine = Machine(target: "t")
        #expect(open(&machine, "a") == 1)
        #expect(open(&machine, "b") == 2)
        #expect(machine.openCalls == 2)
    }

    @Test func messagesAreDeliveredWithinTheWindowAndABreachClosesTheConnection() {
        var machine = Machine(target: "t")
        let id = open(&machine, "a")
        let other = open(&machine, "b")
        guard case .deliver("a") = machine.receivedMessage(callID: id, bytes: 1024 * 1024) else {
            Issue.record("within")
            return
        }
        // The window is now 0: the server may not send.
        guard case .closeWithError(let failing, let error) = machine.receivedMessage(callID: id, bytes: 1) else {
            Issue.record("breach")
            return
        }
        #expect(Set(failing) == ["a", "b"])
        #expect(error.code == .internal && error.message.contains("window"))
        check(machine.receivedMessage(callID: other, bytes: 1).isNone, "closed ignores")
    }

    @Test func grantsReopenTheWindow() {
        var machine = Machine(target: "t")
        let id = open(&machine, "a")
        _ = machine.receivedMessage(callID: id, bytes: 1024 * 1024 + 10)
        guard case .sendWindowUpdate(id, 20) = machine.granted(callID: id, increment: 20) else {
            Issue.record("grant")
            return
        }
        guard case .deliver = machine.receivedMessage(callID: id, bytes: 5) else {
            Issue.record("reopened")
            return
        }
        check(machine.granted(callID: 77, increment: 1).isNone, "unknown call")
    }

    @Test func trailersFinishOnceAndLateFramesAreIgnored() {
        var machine = Machine(target: "t")
        let id = open(&machine, "a")
        guard
            case .finish("a", let status, false) = machine.receivedTrailers(
                callID: id, status: CallStatus(code: 5, message: "nf"))
        else {
            Issue.record("finish")
            return
        }
        #expect(status.code == 5)
        check(machine.receivedTrailers(callID: id, status: CallStatus(code: 0)).isNone)
        check(machine.receivedMessage(callID: id, bytes: 1).isNone)
        guard case .closeWithError = machine.receivedTrailers(callID: id, status: nil) else {
            Issue.record("undecodable trailers")
            return
        }
    }

    @Test func abandonSendsCancelOnce() {
        var machine = Machine(target: "t")
        let id = open(&machine, "a")
        guard
            case .abandon(id, "a", let error, false) = machine.abandon(
                callID: id, error: RPCError(.cancelled, "c", source: .local))
        else {
            Issue.record("abandon")
            return
        }
        #expect(error.code == .cancelled)
        check(machine.abandon(callID: id, error: RPCError(.cancelled, "c")).isNone)
    }

    @Test func goAwayFailsCallsAboveItsLastIDAndDrains() {
        var machine = Machine(target: "t")
        let first = open(&machine, "a")
        _ = open(&machine, "b")
        guard
            case .retire(let failing, let error, false) = machine.receivedGoAway(
                GoAway(lastCallID: first, code: 0, message: "bye"))
        else {
            Issue.record("retire")
            return
        }
        #expect(failing == ["b"] && error.code == .unavailable)
        guard case .fail(let refused) = machine.openCall("c", method: "/t.S/M") else {
            Issue.record("no new calls")
            return
        }
        #expect(refused.message.contains("shutting down"))
        guard case .finish("a", _, true) = machine.receivedTrailers(callID: first, status: CallStatus(code: 0)) else {
            Issue.record("last closes")
            return
        }
    }

    @Test func goAwayWithNoCallsClosesAndNamesItsCode() {
        var machine = Machine(target: "t")
        guard
            case .retire([], _, true) = machine.receivedGoAway(
                GoAway(lastCallID: 0, code: 8, message: "too_many_pings"))
        else {
            Issue.record("close")
            return
        }
        #expect(machine.closingReason.code == .resourceExhausted)
        #expect(machine.closingReason.message.contains("too_many_pings"))
        guard case .closeWithError = Machine(target: "t").withGoAway(nil) else {
            Issue.record("undecodable goaway")
            return
        }
    }

    @Test func spentCallIDsRetireTheConnection() {
        var machine = Machine(target: "t")
        machine.forceNextCallID(UInt32.max - 1)
        guard case .send(let id, true) = machine.openCall("last", method: "/t.S/M") else {
            Issue.record("retire")
            return
        }
        #expect(id == UInt32.max - 1)
        guard case .fail = machine.openCall("more", method: "/t.S/M") else {
            Issue.record("refused")
            return
        }
    }

    @Test func channelInactiveFailsEveryCallWithTheReason() {
        var machine = Machine(target: "t")
        _ = open(&machine, "a")
        guard
            case .failAll(let calls, let error, let unsent, _) = machine.channelInactive(
                reason: RPCError(.unavailable, "keepalive", source: .connection))
        else {
            Issue.record("fail all")
            return
        }
        #expect(calls == ["a"] && unsent.isEmpty && error.message == "keepalive")
        check(machine.channelInactive(reason: nil).isNone)
        guard case .fail(let refused) = machine.openCall("b", method: "/t.S/M") else {
            Issue.record("closed")
            return
        }
        #expect(refused.message.contains("keepalive"))
    }
}

extension ClientConnectionStateMachineTests {
    /// Calls opened after the last flush never reached the socket: they fail as unprocessed (safe to retry),
    /// the others as possibly executed.
    @Test func callsNeverFlushedFailAsUnprocessed() {
        var machine = Machine(target: "t")
        _ = open(&machine, "a")
        _ = open(&machine, "b")
        _ = open(&machine, "c")
        guard
            case .failAll(let calls, let error, let unsent, let unsentError) = machine.channelInactive(
                reason: RPCError(.unavailable, "keepalive", source: .connection), unsentFrom: 2)
        else {
            Issue.record("fail all")
            return
        }
        #expect(calls == ["a"] && error.source == .connection)
        #expect(
            Set(unsent) == ["b", "c"] && unsentError.source == .unprocessed
                && unsentError.message == "keepalive; the call was not sent")
    }
}

extension ClientConnectionStateMachine.Action {
    var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}

extension ClientConnectionStateMachine {
    func withGoAway(_ goAway: GoAway?) -> Action {
        var copy = self
        return copy.receivedGoAway(goAway)
    }
}
