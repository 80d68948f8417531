import Testing

@testable import KioskRPC

/// ClientCallStateMachine, event by event: the inbound window and the one end.
@Suite struct ClientCallStateMachineTests {
    @Test func callMachineWalksItsStates() {
        var call = ClientCallStateMachine(initialWindow: 10)
        check(call.receivedMessage(bytes: 15) == .deliver)
        check(call.receivedMessage(bytes: 1) == .windowExceeded(window: -5))
        check(call.granted(6))
        check(call.receivedMessage(bytes: 1) == .deliver)
        check(call.close())
        check(!call.close())
        check(!call.granted(1))
        check(call.receivedMessage(bytes: 1) == .ignore)
    }

    @Test func aCallClosedByItsDeadlineIgnoresTheServer() {
        var call = ClientCallStateMachine()
        check(call.close())
        check(call.receivedMessage(bytes: 10) == .ignore)
        #expect(!call.isOpen)
    }
}
