import NIOConcurrencyHelpers

/// Wakes `WatchRevocations` streams when a revocation is written in this process.
final class RevocationSignal: Sendable {
    private let state = NIOLockedValueBox<
        (generation: UInt64, waiters: [UInt64: CheckedContinuation<Void, Never>], next: UInt64)
    >((0, [:], 0))

    /// Wakes every waiter.
    func notify() {
        let waiters = state.withLockedValue { state in
            state.generation += 1
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// How many times ``notify()`` has run: read it before looking for
    /// revocations, then ``wait(after:timeout:)`` with it, so a refund made in
    /// between is not slept through.
    var generation: UInt64 { state.withLockedValue { $0.generation } }

    /// Returns after a ``notify()`` later than `generation` (at once if one
    /// already happened) or after `timeout`, whichever comes first.
    /// - Throws: `CancellationError` when the task is cancelled.
    func wait(after generation: UInt64, timeout: Duration) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await Task.sleep(for: timeout) }
            group.addTask { await self.waitForNotify(after: generation) }
            _ = try await group.next()
            group.cancelAll()
        }
        try Task.checkCancellation()
    }

    private func waitForNotify(after generation: UInt64) async {
        let id = state.withLockedValue { state -> UInt64 in
            state.next += 1
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let cancelled = state.withLockedValue { state -> Bool in
                    if Task.isCancelled || state.generation != generation { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if cancelled { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }
}
