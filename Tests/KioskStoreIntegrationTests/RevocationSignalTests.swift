import Testing

@testable import KioskStore

@Suite struct RevocationSignalTests {
    /// A refund that lands between a watcher's query and its wait must wake it, not be slept through.
    @Test func aNotifyBetweenQueryAndWaitIsNotSleptThrough() async throws {
        let signal = RevocationSignal()
        let seen = signal.generation
        signal.notify()
        let start = ContinuousClock.now
        try await signal.wait(after: seen, timeout: .seconds(60))
        #expect(start.duration(to: .now) < .seconds(30))
    }

    @Test func aWaitWithNoNewNotifyEndsAtItsTimeout() async throws {
        let signal = RevocationSignal()
        signal.notify()
        let start = ContinuousClock.now
        try await signal.wait(after: signal.generation, timeout: .milliseconds(100))
        #expect(start.duration(to: .now) >= .milliseconds(100))
    }
}
