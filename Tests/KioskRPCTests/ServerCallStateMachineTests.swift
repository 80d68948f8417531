import KioskWire
import NIOCore
import Testing

@testable import KioskRPC

/// ServerCallStateMachine, event by event: every state, every event.
@Suite struct ServerCallStateMachineTests {
    typealias Machine = ServerCallStateMachine<Int>

    func bytes(_ count: Int) -> ByteBuffer { ByteBuffer(repeating: 0, count: count) }

    func running(window: Int = 100) -> Machine {
        var machine = Machine(initialWindow: window)
        guard case .startHandler = machine.receivedMessage(payload: bytes(1), flags: .endStream) else {
            Issue.record("request did not start the handler")
            return machine
        }
        return machine
    }

    @Test func awaitingRequestStartsTheHandlerOnItsMessage() {
        var machine = Machine()
        guard
            case .startHandler(let payload, let flags) = machine.receivedMessage(
                payload: bytes(3), flags: [.endStream, .compressed])
        else {
            Issue.record("expected startHandler")
            return
        }
        #expect(payload.readableBytes == 3 && flags == [.endStream, .compressed])
        guard case .running = machine.state else {
            Issue.record("not running")
            return
        }
    }

    @Test func awaitingRequestEndsOnEveryTerminalEvent() {
        var machine = Machine()
        check(machine.requestTimedOut(after: .seconds(10))?.status?.code == StatusCode.deadlineExceeded.rawValue)
        #expect(machine.isClosed)

        machine = Machine()
        check(machine.deadlineExpired(timeoutMs: 50)?.status?.message == "deadline of 50 ms exceeded")
        machine = Machine()
        let cancel = machine.receivedCancel()
        #expect(cancel != nil && cancel?.status == nil, "CANCEL ends silently")
        machine = Machine()
        check(machine.connectionClosed()?.status == nil)
        machine = Machine()
        check(machine.shutdownForced()?.status?.code == StatusCode.unavailable.rawValue)
        machine = Machine()
        check(machine.handlerFailed(status: CallStatus(code: 16))?.status?.code == 16, "authentication refused")
        machine = Machine()
        check(
            machine.handlerFinished(response: nil, connectionWritable: true).isNone,
            "no handler runs before the request")
        guard case .fail(7) = machine.send(payload: bytes(1), flags: [], waiter: 7, connectionWritable: true) else {
            Issue.record("a send before the request fails")
            return
        }
    }

    @Test func requestTimeoutOnlyAppliesBeforeTheRequest() {
        var machine = running()
        check(machine.requestTimedOut(after: .seconds(10)) == nil)
        #expect(!machine.isClosed)
    }

    @Test func secondRequestMessageIsInvalidArgument() {
        var machine = running()
        guard case .end(let ending) = machine.receivedMessage(payload: bytes(1), flags: []) else {
            Issue.record("expected end")
            return
        }
        #expect(ending.status?.code == StatusCode.invalidArgument.rawValue)
        #expect(machine.isClosed)
    }

    @Test func sendsFollowTheWindowAndWritability() {
        var machine = running(window: 100)
        guard case .write = machine.send(payload: bytes(60), flags: [], waiter: 1, connectionWritable: true) else {
            Issue.record("1")
            return
        }
        // The window may go below zero by one message.
        guard case .write = machine.send(payload: bytes(60), flags: [], waiter: 2, connectionWritable: true) else {
            Issue.record("2")
            return
        }
        guard case .suspend = machine.send(payload: bytes(10), flags: [], waiter: 3, connectionWritable: true) else {
            Issue.record("3")
            return
        }
        guard case .suspend = machine.send(payload: bytes(10), flags: [], waiter: 4, connectionWritable: true) else {
            Issue.record("4")
            return
        }
        // -20 + 20 = 0: still closed.
        guard case .none = machine.receivedWindowUpdate(increment: 20, connectionWritable: true) else {
            Issue.record("5")
            return
        }
        guard case .write(let ready) = machine.receivedWindowUpdate(increment: 15, connectionWritable: true) else {
            Issue.record("6")
            return
        }
        #expect(ready.map(\.waiter) == [3, 4], "15 opens the window; 3 takes it to 5, 4 to -5, in order")
    }

    @Test func unwritableConnectionHoldsSendsUntilWritable() {
        var machine = running(window: 1000)
        guard case .suspend = machine.send(payload: bytes(10), flags: [], waiter: 1, connectionWritable: false) else {
            Issue.record("1")
            return
        }
        // A later send queues behind it even once writable: order is kept.
        guard case .suspend = machine.send(payload: bytes(10), flags: [], waiter: 2, connectionWritable: true) else {
            Issue.record("2")
            return
        }
        guard case .none = machine.receivedWindowUpdate(increment: 1, connectionWritable: false) else {
            Issue.record("3")
            return
        }
        var budget = Int.max
        check(machine.connectionBecameWritable(budget: &budget).sends.map(\.waiter) == [1, 2])
        check(machine.connectionBecameWritable(budget: &budget).sends.isEmpty)
    }

    @Test func windowPastTwoToTheThirtyOneIsAnOverflow() {
        var machine = Machine(initialWindow: 1024 * 1024)
        guard case .overflow = machine.receivedWindowUpdate(increment: UInt32(Int32.max), connectionWritable: true)
        else {
            Issue.record("expected overflow while awaiting the request")
            return
        }
        var running = running(window: 1024 * 1024)
        let fits = UInt32(OutboundFlowWindow.maximumSize - 1024 * 1024)
        guard case .none = running.receivedWindowUpdate(increment: fits, connectionWritable: true) else {
            Issue.record("exactly 2^31-1 is allowed")
            return
        }
        guard case .overflow = running.receivedWindowUpdate(increment: 1, connectionWritable: true) else {
            Issue.record("one more overflows")
            return
        }
    }

    @Test func endingARunningCallFailsItsWaitingSends() {
        var machine = running(window: 10)
        _ = machine.send(payload: bytes(20), flags: [], waiter: 1, connectionWritable: true)
        _ = machine.send(payload: bytes(20), flags: [], waiter: 2, connectionWritable: true)
        _ = machine.send(payload: bytes(20), flags: [], waiter: 3, connectionWritable: true)
        let ending = machine.deadlineExpired(timeoutMs: 5)
        #expect(ending?.waiters == [2, 3])
        #expect(ending?.status?.code == StatusCode.deadlineExceeded.rawValue)
    }

    @Test func handlerFinishingSendsResponseAndOK() {
        var machine = running()
        guard
            case .end(let ending) = machine.handlerFinished(response: (bytes(4), .compressed), connectionWritable: true)
        else {
            Issue.record("expected end")
            return
        }
        #expect(ending.status?.code == 0)
        #expect(ending.response?.payload.readableBytes == 4 && ending.response?.flags == .compressed)
        #expect(machine.isClosed)
    }

    @Test func unaryCompletionWaitsForWritability() {
        var machine = running(window: 1000)
        guard case .held = machine.handlerFinished(response: (bytes(500), []), connectionWritable: false) else {
            Issue.record("held")
            return
        }
        check(!machine.isClosed)
        check(machine.handlerFinished(response: nil, connectionWritable: true).isNone, "completes once")
        var budget = 100
        let (sends, ending) = machine.connectionBecameWritable(budget: &budget)
        #expect(sends.isEmpty && ending?.status?.code == 0 && ending?.response?.payload.readableBytes == 500)
        #expect(budget == -400)
        check(machine.isClosed)
    }

    @Test func releaseOnWritabilityStopsAtTheBudget() {
        var machine = running(window: 10_000)
        for waiter in 1...4 {
            _ = machine.send(payload: bytes(100), flags: [], waiter: waiter, connectionWritable: false)
        }
        var budget = 150
        #expect(
            machine.connectionBecameWritable(budget: &budget).sends.map(\.waiter) == [1, 2],
            "the second send takes the budget below zero")
        budget = 1_000
        #expect(machine.connectionBecameWritable(budget: &budget).sends.map(\.waiter) == [3, 4])
    }

    @Test func closedIgnoresEverything() {
        var machine = running()
        _ = machine.receivedCancel()
        guard case .none = machine.receivedMessage(payload: bytes(1), flags: []) else {
            Issue.record("message")
            return
        }
        guard case .fail(9) = machine.send(payload: bytes(1), flags: [], waiter: 9, connectionWritable: true) else {
            Issue.record("send")
            return
        }
        guard case .none = machine.receivedWindowUpdate(increment: 1, connectionWritable: true) else {
            Issue.record("window")
            return
        }
        var budget = Int.max
        check(machine.connectionBecameWritable(budget: &budget).sends.isEmpty)
        check(machine.handlerFinished(response: nil, connectionWritable: true).isNone)
        check(machine.handlerFailed(status: CallStatus(code: 2)) == nil)
        check(machine.receivedCancel() == nil)
        check(machine.deadlineExpired(timeoutMs: 1) == nil)
        check(machine.requestTimedOut(after: .seconds(1)) == nil)
        check(machine.shutdownForced() == nil)
        check(machine.connectionClosed() == nil)
    }
}

extension ServerCallStateMachine.OnFinish {
    var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}
