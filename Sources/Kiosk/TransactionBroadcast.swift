import NIOConcurrencyHelpers

/// Fans transactions out to every listener of ``KioskClient/transactionUpdates``;
/// keeps what arrives while nobody listens for the first listener.
final class TransactionBroadcast: Sendable {
    private struct State {
        var listeners: [Int: AsyncStream<Transaction>.Continuation] = [:]
        var next = 0
        var backlog: [Transaction] = []
    }

    private let state = NIOLockedValueBox(State())

    func yield(_ transaction: Transaction) {
        let listeners = state.withLockedValue { state -> [AsyncStream<Transaction>.Continuation] in
            if state.listeners.isEmpty { state.backlog.append(transaction) }
            return Array(state.listeners.values)
        }
        for listener in listeners { listener.yield(transaction) }
    }

    func subscribe() -> AsyncStream<Transaction> {
        let (stream, continuation) = AsyncStream.makeStream(of: Transaction.self)
        let id = state.withLockedValue { state -> Int in
            state.next += 1
            state.listeners[state.next] = continuation
            for transaction in state.backlog { continuation.yield(transaction) }
            state.backlog.removeAll()
            return state.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.listeners.removeValue(forKey: id) }
        }
        return stream
    }

    func finish() {
        let listeners = state.withLockedValue { state in
            defer { state.listeners.removeAll() }
            return Array(state.listeners.values)
        }
        for listener in listeners { listener.finish() }
    }
}
