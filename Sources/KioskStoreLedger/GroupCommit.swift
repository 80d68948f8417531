import GRDB
import KioskStoreCore
import NIOConcurrencyHelpers

/// Group commit: writes that arrive while the ledger is committing (and
/// fsyncing) are run together in the next transaction, each in its own
/// savepoint, and each caller is answered only after that transaction is on
/// disk. One fsync then covers many purchases, as PostgreSQL's and InnoDB's
/// group commit do, while each write still sees the ones before it and one
/// write's error rolls back only its own savepoint.
package final class GroupCommit: Sendable {
    /// Most writes in one transaction.
    package static let maximumBatch = 128

    private struct Job: Sendable {
        /// Runs the write inside the batch's transaction, keeping its own result.
        package let run: @Sendable (Database) -> Void
        /// Answers the caller: with its result once committed, or with the commit's error.
        package let finish: @Sendable ((any Error)?) -> Void
    }

    private struct State {
        package var queue: [Job] = []
        package var draining = false
        package var commits = 0
        package var writes = 0
    }

    /// Transactions committed (each one fsync of the WAL) and the writes they carried.
    package var statistics: (commits: Int, writes: Int) { state.withLockedValue { ($0.commits, $0.writes) } }

    private let pool: DatabasePool
    private let state = NIOLockedValueBox(State())

    package init(pool: DatabasePool) {
        self.pool = pool
    }

    /// Runs `body` in the next group's transaction; returns once it is committed.
    package func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let outcome = NIOLockedValueBox<Result<T, any Error>?>(nil)
            let job = Job(
                run: { db in
                    do {
                        var value: T?
                        try db.inSavepoint {
                            value = try body(db)
                            return .commit
                        }
                        outcome.withLockedValue { $0 = value.map { .success($0) } }
                    } catch {
                        outcome.withLockedValue { $0 = .failure(error) }
                    }
                },
                finish: { commitError in
                    if let commitError {
                        continuation.resume(throwing: commitError)
                    } else if let result = outcome.withLockedValue({ $0 }) {
                        continuation.resume(with: result)
                    } else {
                        continuation.resume(throwing: StoreError(.internalFailure, "a ledger write did not run"))
                    }
                })
            let start = state.withLockedValue { state -> Bool in
                state.queue.append(job)
                guard !state.draining else { return false }
                state.draining = true
                return true
            }
            // Detached: the drain commits every process's writes, and must not carry the task-locals (the operator
            // acting, `OperatorScope`) of the write that happened to start it.
            if start { Task.detached { await self.drain() } }
        }
    }

    /// Commits batches until the queue is empty.
    private func drain() async {
        while true {
            let batch = state.withLockedValue { state -> [Job] in
                guard !state.queue.isEmpty else {
                    state.draining = false
                    return []
                }
                let batch = Array(state.queue.prefix(Self.maximumBatch))
                state.queue.removeFirst(batch.count)
                return batch
            }
            guard !batch.isEmpty else { return }
            do {
                try await pool.write { db in
                    for job in batch { job.run(db) }
                }
                state.withLockedValue { state in
                    state.commits += 1
                    state.writes += batch.count
                }
                for job in batch { job.finish(nil) }
            } catch {
                for job in batch { job.finish(error) }
            }
        }
    }
}
