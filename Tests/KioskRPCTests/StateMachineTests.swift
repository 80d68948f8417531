import Testing

@testable import KioskRPC

/// The protocol's value-type state, tested alone.
@Suite struct StateMachineTests {
    @Test func outboundWindowFollowsTheProtocolRule() {
        var window = OutboundFlowWindow(initial: 100)
        #expect(window.isOpen)
        window.didSend(bytes: 60)
        #expect(window.isOpen)
        // May go below zero by one message, then closes.
        window.didSend(bytes: 60)
        #expect(window.available == -20 && !window.isOpen)
        #expect(window.didReceiveUpdate(increment: 20) == false, "exactly zero is still closed")
        #expect(!window.isOpen)
        #expect(window.didReceiveUpdate(increment: 1) == true, "reopened")
        #expect(window.didReceiveUpdate(increment: .max) == false, "already open")
        #expect(window.available == 1 + Int(UInt32.max))
    }

    @Test func inboundWindowBatchesGrants() {
        var window = InboundFlowWindow(initial: 1000)
        #expect(window.threshold == 250)
        #expect(window.didConsume(bytes: 100) == nil)
        #expect(window.didConsume(bytes: 100) == nil)
        #expect(window.didConsume(bytes: 100) == 300)
        #expect(window.pending == 0)
        #expect(window.didConsume(bytes: 5000) == 5000)
    }

    @Test func backoffGrowsCapsAndJitters() {
        let backoff = ConnectionBackoff(
            initial: .milliseconds(100), maximum: .seconds(1), multiplier: 2, jitter: 0.2, maximumAttempts: 10)
        #expect(backoff.delay(afterAttempt: 1, random: 0.5) == .milliseconds(100))
        #expect(backoff.delay(afterAttempt: 2, random: 0.5) == .milliseconds(200))
        #expect(backoff.delay(afterAttempt: 3, random: 0.5) == .milliseconds(400))
        #expect(backoff.delay(afterAttempt: 5, random: 0.5) == .seconds(1), "capped")
        #expect(backoff.delay(afterAttempt: 60, random: 0.5) == .seconds(1))
        #expect(backoff.delay(afterAttempt: 1, random: 0) == .milliseconds(80), "-20%")
        #expect(backoff.delay(afterAttempt: 1, random: 1) == .milliseconds(120), "+20%")
        for _ in 0..<100 {
            let delay = backoff.delay(afterAttempt: 2)
            #expect(delay >= .milliseconds(160) && delay <= .milliseconds(240))
        }
    }

    @Test func keepaliveStatePingsOnceAndDetectsSilence() {
        var state = KeepaliveState(seed: 10)
        #expect(state.intervalElapsed() == .sendPing(opaque: 11))
        #expect(state.intervalElapsed() == .none, "one PING outstanding at a time")
        #expect(state.pongReceived(opaque: 99) == false)
        #expect(state.timeoutElapsed(opaque: 11) == .peerUnresponsive)
        #expect(state.pongReceived(opaque: 11) == true)
        #expect(state.timeoutElapsed(opaque: 11) == .none)
        #expect(state.intervalElapsed() == .sendPing(opaque: 12))
    }

    @Test func statusCodeNames() {
        #expect(StatusCode.deadlineExceeded.name == "DEADLINE_EXCEEDED")
        #expect(StatusCode(rawValue: 16) == .unauthenticated)
        #expect(StatusCode(rawValue: 99).name == "CODE_99")
    }
}
