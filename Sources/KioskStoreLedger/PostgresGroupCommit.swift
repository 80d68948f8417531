import KioskAPI
import NIOConcurrencyHelpers
import NIOPosix

/// Group commit on PostgreSQL: writes about accounts that arrive while others are being written run together, one
/// after the other, in one transaction, and each caller is answered once that transaction has committed. A purchase's
/// writes then share BEGIN, COMMIT and the wait for the commit's WAL flush with the writes around them, as SQLite's
/// ``GroupCommit`` shares one fsync. Each write still sees the ones before it, and keeps its guarantees: its account's
/// row orders it against writes about the account in other transactions (``PostgresLedgerDatabase/orderWrites(on:)``).
///
/// There is no savepoint between the writes (two more statements for each): when any write of a group fails, or
/// PostgreSQL refuses the group's COMMIT, nothing of the group is recorded and each write runs again in a transaction
/// of its own (``PostgresLedgerBackend/transaction(_:serializingOn:lockingFirst:_:)``, the path a write takes when it
/// comes alone), so its caller gets its own answer and no other write's error. A COMMIT that gets no answer leaves the
/// group's outcome unknown: nothing runs again, and every caller gets the error, as one write's caller would.
package final class PostgresGroupCommit: Sendable {
    /// One write waiting for, or in, a group.
    package struct Job: Sendable {
        /// The account the write is about.
        package let account: String
        /// Runs the write's body in the group's transaction, keeping what it returned.
        package let run: @Sendable (any LedgerDatabase) throws -> Void
        /// Answers the caller with what the body returned, once the group committed.
        package let succeed: @Sendable () -> Void
        /// Answers the caller with an error.
        package let fail: @Sendable (any Error) -> Void
        /// Runs the write in a transaction of its own and answers the caller.
        package let alone: @Sendable () -> Void

        package init(
            account: String, run: @escaping @Sendable (any LedgerDatabase) throws -> Void,
            succeed: @escaping @Sendable () -> Void, fail: @escaping @Sendable (any Error) -> Void,
            alone: @escaping @Sendable () -> Void
        ) {
            self.account = account
            self.run = run
            self.succeed = succeed
            self.fail = fail
            self.alone = alone
        }
    }

    /// Most writes in one transaction: a group holds its accounts' rows until it commits, and a write that waits
    /// for the group ahead of it waits for all of it.
    package static let maximumBatch = 16

    private struct State {
        var queue: [Job] = []
        var draining = 0
        var stopped = false
        /// The accounts of the batches being committed.
        var inFlight: Set<String> = []
    }

    private let threads: NIOThreadPool
    private let drainers: Int
    private let maximumQueued: Int
    private let state = NIOLockedValueBox(State())
    /// Commits a batch (as one transaction, or each write alone) and answers every write of it.
    private let commit = NIOLockedValueBox<FunctionReference<@Sendable ([Job]) -> Void>?>(nil)

    /// - Parameters:
    ///   - threads: where batches are committed (the backend's threads: committing waits on the database).
    ///   - drainers: most batches committed at once (each on a thread and a connection of its own).
    ///   - maximumQueued: most writes waiting; past it a write fails at once with ``LedgerError/Kind/unavailable``.
    package init(threads: NIOThreadPool, drainers: Int, maximumQueued: Int) {
        self.threads = threads
        self.drainers = max(1, drainers)
        self.maximumQueued = maximumQueued
    }

    /// Sets what commits a batch; writes queued before it wait for it.
    package func start(committing commit: @escaping @Sendable ([Job]) -> Void) {
        self.commit.withLockedValue { $0 = FunctionReference(commit) }
    }

    /// Runs `body` in the next group's transaction (or, when the group cannot commit, `alone`); returns once it
    /// committed.
    package func write<T: Sendable>(
        account: String, _ body: @escaping @Sendable (any LedgerDatabase) throws -> T,
        alone: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let kept = NIOLockedValueBox<T?>(nil)
            let job = Job(
                account: account,
                run: { db in
                    let value = try body(db)
                    kept.withLockedValue { $0 = value }
                },
                succeed: {
                    if let value = kept.withLockedValue({ $0 }) {
                        continuation.resume(returning: value)
                    } else {
                        continuation.resume(throwing: LedgerError(.refused, "a grouped ledger write did not run"))
                    }
                },
                fail: { continuation.resume(throwing: $0) },
                alone: { continuation.resume(with: Result { try alone() }) })
            let admission = state.withLockedValue { state -> Admission in
                if state.stopped { return .stopped }
                guard state.queue.count < maximumQueued else { return .full }
                state.queue.append(job)
                guard state.draining < drainers else { return .queued }
                state.draining += 1
                return .drain
            }
            switch admission {
            case .queued:
                break
            case .drain:
                threads.submit { work in
                    if case .active = work {
                        self.drain()
                    } else {
                        self.state.withLockedValue { $0.draining -= 1 }
                        self.stop()
                    }
                }
            case .full:
                job.fail(
                    LedgerError(
                        .unavailable,
                        "the ledger's PostgreSQL connections are all busy (\(maximumQueued) writes waiting); retry later"
                    ))
            case .stopped:
                job.fail(LedgerError(.unavailable, "the ledger is shutting down"))
            }
        }
    }

    private enum Admission { case queued, drain, full, stopped }

    /// Runs `job` alone on the threads (a write of a group that did not commit); fails it if they have stopped.
    package func runAlone(_ job: Job) {
        threads.submit { work in
            if case .active = work {
                job.alone()
            } else {
                job.fail(LedgerError(.unavailable, "the ledger is shutting down"))
            }
        }
    }

    /// Commits batches until no write waits that this drainer may take.
    private func drain() {
        while let (batch, accounts) = state.withLockedValue({ Self.take(from: &$0) }) {
            if let commit = commit.withLockedValue({ $0 })?.function {
                commit(batch)
            } else {
                for job in batch { job.fail(LedgerError(.unavailable, "the ledger is not started")) }
            }
            state.withLockedValue { $0.inFlight.subtract(accounts) }
        }
    }

    /// The next batch, oldest writes first, and its accounts; nil, and one drainer fewer, when none waits. A write
    /// about an account of a batch being committed waits for that batch (its drainer takes it next): two groups in
    /// flight never write about one account, so they do not collide on its row (rows shared across accounts, and a
    /// group's writes running again alone, are not covered).
    private static func take(from state: inout State) -> (batch: [Job], accounts: Set<String>)? {
        let taken = batch(of: state.queue.map(\.account), inFlight: state.inFlight)
        guard !taken.isEmpty else {
            state.draining -= 1
            return nil
        }
        var batch: [Job] = []
        var rest: [Job] = []
        for (index, job) in state.queue.enumerated() {
            if taken.contains(index) { batch.append(job) } else { rest.append(job) }
        }
        state.queue = rest
        let accounts = Set(batch.map(\.account))
        state.inFlight.formUnion(accounts)
        return (batch, accounts)
    }

    /// Which of the writes waiting, about `accounts` (oldest first), go in the next batch: the oldest, up to
    /// ``maximumBatch``, whose account is not in a batch being committed (`inFlight`).
    package static func batch(of accounts: [String], inFlight: Set<String>) -> Set<Int> {
        var taken: Set<Int> = []
        for (index, account) in accounts.enumerated() where taken.count < maximumBatch {
            if !inFlight.contains(account) { taken.insert(index) }
        }
        return taken
    }

    /// `batch` in the order its writes run in their group: by account, and in their order of arrival within one
    /// account. Each write takes its account's row until the group commits, so two groups (two stores') sharing
    /// accounts then take them in the same order: the second waits for the first instead of each holding a row the
    /// other waits for (a deadlock, which PostgreSQL ends after `deadlock_timeout` by rolling one group back).
    package static func ordered(_ batch: [Job]) -> [Job] {
        order(of: batch.map(\.account)).map { batch[$0] }
    }

    /// The indices of `accounts` by account, and in their order within one account.
    package static func order(of accounts: [String]) -> [Int] {
        accounts.indices.sorted { (accounts[$0], $0) < (accounts[$1], $1) }
    }

    /// Fails every write waiting, and every write from now on (the backend is shutting down).
    package func stop() {
        let waiting = state.withLockedValue { state -> [Job] in
            state.stopped = true
            defer { state.queue = [] }
            return state.queue
        }
        for job in waiting { job.fail(LedgerError(.unavailable, "the ledger is shutting down")) }
    }
}
