import KioskStoreCore
import NIOConcurrencyHelpers

/// Runs operations on one key one at a time, in this process: retries of one
/// payment queue behind it and replay its answer instead of asking the
/// processor again. Not a guard against charging twice — the ledger's
/// constraints are, across processes too.
package final class KeyedLock: Sendable {
    private struct State {
        package var busy: Set<String> = []
        package var waiters: [String: [CheckedContinuation<Void, Never>]] = [:]
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    package func withLock<R: Sendable>(_ key: String, _ body: () async throws -> R) async throws -> R {
        await acquire(key)
        defer { release(key) }
        return try await body()
    }

    private func acquire(_ key: String) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLockedValue { state -> Bool in
                if state.busy.insert(key).inserted { return true }
                state.waiters[key, default: []].append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    private func release(_ key: String) {
        let next = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            guard var queue = state.waiters[key], !queue.isEmpty else {
                state.busy.remove(key)
                state.waiters[key] = nil
                return nil
            }
            let first = queue.removeFirst()
            state.waiters[key] = queue.isEmpty ? nil : queue
            return first  // ownership passes to the next waiter; the key stays busy
        }
        next?.resume()
    }
}
