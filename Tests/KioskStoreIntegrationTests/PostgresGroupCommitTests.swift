import Foundation
import KioskStoreTestSupport
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// On PostgreSQL, writes about accounts that arrive together commit together: one transaction, each write after the
/// one before it, each caller answered once it committed. A write that fails, or a COMMIT PostgreSQL refuses, sends
/// every write of the group alone; a COMMIT without an answer fails them all and runs none again.
@Suite(.enabled(if: TestLedger.isPostgres), .timeLimit(.minutes(1)))
struct PostgresGroupCommitTests {
    /// What happened to each write of a batch, by account.
    final class Answers: Sendable {
        private let answers = NIOLockedValueBox<[String: String]>([:])
        private let noted: AsyncStream<Void>
        private let continuation: AsyncStream<Void>.Continuation
        init() {
            let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
            noted = stream
            self.continuation = continuation
        }
        func note(_ account: String, _ answer: String) {
            answers.withLockedValue { $0[account] = answer }
            continuation.yield()
        }
        var all: [String: String] { answers.withLockedValue { $0 } }
        /// Returns once `count` writes have their answer (writes run alone answer on the backend's threads).
        func awaitAnswers(_ count: Int) async {
            for await _ in noted where all.count >= count { return }
        }
    }

    /// A write of a batch; alone, it runs in a transaction of its own on `backend` when one is given (as the
    /// store's writes do), and only says so otherwise.
    static func job(
        _ account: String, _ answers: Answers, on backend: PostgresLedgerBackend? = nil,
        _ body: @escaping @Sendable (any LedgerDatabase) throws -> Void
    ) -> PostgresGroupCommit.Job {
        PostgresGroupCommit.Job(
            account: account, run: body, succeed: { answers.note(account, "committed") },
            fail: { answers.note(account, "failed: \(($0 as? LedgerError)?.kind == .unavailable ? "14" : "\($0)")") },
            alone: {
                guard let backend else { return answers.note(account, "alone") }
                do {
                    try backend.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ", serializingOn: account, body)
                    answers.note(account, "alone: committed")
                } catch {
                    answers.note(account, "alone: \(error)")
                }
            })
    }

    static func backendWithProbe() async throws -> PostgresLedgerBackend {
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 2)
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE TABLE kiosk_group_probe (account TEXT, xid BIGINT, place BIGINT)", [])
        }
        return backend
    }

    static func probe(_ account: String) -> @Sendable (any LedgerDatabase) throws -> Void {
        { db in
            try db.execute(
                "INSERT INTO kiosk_group_probe (account, xid, place) VALUES (?, txid_current(), ?)",
                [account, db.nextEventPlace()])
        }
    }

    static func rows(_ backend: PostgresLedgerBackend) throws -> [(account: String, xid: Int64, place: Int64)] {
        try backend.read { db in
            try db.fetchAll("SELECT account, xid, place FROM kiosk_group_probe ORDER BY place", []).map {
                (try $0["account"], try $0["xid"], try $0["place"])
            }
        }
    }

    @Test func aGroupIsOneTransactionItsWritesInOrder() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = Answers()
        let accounts = ["a", "b", "c", "d"]
        backend.commitGroup(accounts.map { Self.job($0, answers, Self.probe($0)) })
        #expect(answers.all == Dictionary(uniqueKeysWithValues: accounts.map { ($0, "committed") }))
        let rows = try Self.rows(backend)
        // One transaction; event places follow the writes' order, none shared.
        #expect(rows.map(\.account) == accounts && rows.map(\.place) == [0, 1, 2, 3])
        #expect(Set(rows.map(\.xid)).count == 1)
        #expect(
            backend.commits.withLockedValue { $0 }.commits == 1 && backend.commits.withLockedValue { $0 }.writes == 4)
    }

    struct Refused: Error, CustomStringConvertible {
        var description: String { "refused" }
    }

    @Test func aFailedWriteLeavesNothingOfItsGroupAndEachRunsAlone() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = Answers()
        backend.commitGroup([
            Self.job("a", answers, on: backend, Self.probe("a")),
            Self.job("b", answers, on: backend) { db in
                try Self.probe("b")(db)
                throw Refused()
            },
            Self.job("c", answers, on: backend, Self.probe("c")),
        ])
        // The others run alone on the backend's threads; each caller gets its own answer.
        await answers.awaitAnswers(3)
        #expect(answers.all == ["a": "alone: committed", "b": "alone: refused", "c": "alone: committed"])
        #expect(try Self.rows(backend).map(\.account).sorted() == ["a", "c"])
        #expect(backend.groupsRerun.withLockedValue { $0 } == 1)
    }

    /// Two stores' groups about the same two accounts, arriving in opposite orders, run their writes in the same
    /// order (by account): the second group waits for the first, meets its write about the account they share
    /// first and runs again alone, as writes about one account from two stores do. In arrival order each group would
    /// hold the row of one account and wait for the other's: a deadlock, here left to PostgreSQL's
    /// `deadlock_timeout` (20 s for this database), so the writes would wait out the store's statement timeout.
    @Test func twoStoresGroupsTakeSharedAccountsInOneOrder() async throws {
        let location = try TestLedger.createDatabase()
        let ledger = try Ledger(postgres: location)
        for (index, account) in ["acct-a", "acct-b"].enumerated() {
            try ledger.createAccount(id: account, tokenHash: [UInt8(index + 1)], paymentsAllowed: true, nowMs: 0)
        }
        try await (try #require(ledger.backend as? PostgresLedgerBackend)).groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE TABLE kiosk_group_probe (account TEXT, xid BIGINT, place BIGINT)", [])
            let name = try #require(try db.value(String.self, "SELECT current_database()", []))
            try db.execute("ALTER DATABASE \(name) SET deadlock_timeout = '20s'", [])
        }
        let (one, two) = (
            try PostgresLedgerBackend(location: location, connections: 2),
            try PostgresLedgerBackend(location: location, connections: 2)
        )
        // Each group's first write, once it holds its account's row, waits (at most a second) for the other group's
        // first write to hold its own: in arrival order both would then hold one row each.
        let (oneHolds, twoHolds) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let answers = Answers()
        func job(
            _ store: String, _ account: String, holding: (DispatchSemaphore, DispatchSemaphore)? = nil
        )
            -> PostgresGroupCommit.Job
        {
            let name = "\(store) \(account)"
            return PostgresGroupCommit.Job(
                account: account,
                run: { db in
                    try Self.probe(account)(db)
                    guard let (signal, other) = holding else { return }
                    _ = try db.fetchAll("SELECT 1", [])  // the account's row taken, answered
                    signal.signal()
                    _ = other.wait(timeout: .now() + 1)
                },
                succeed: { answers.note(name, "committed") },
                fail: { answers.note(name, "failed: \($0)") }, alone: { answers.note(name, "alone") })
        }
        let (oneGroup, twoGroup) = (
            [job("one", "acct-a", holding: (oneHolds, twoHolds)), job("one", "acct-b")],
            [job("two", "acct-b", holding: (twoHolds, oneHolds)), job("two", "acct-a")]
        )
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) { one.commitGroup(oneGroup) }
        DispatchQueue.global().async(group: group) { two.commitGroup(twoGroup) }
        await answers.awaitAnswers(4)
        group.wait()
        #expect(
            answers.all == [
                "one acct-a": "committed", "one acct-b": "committed", "two acct-a": "alone", "two acct-b": "alone",
            ]
                || answers.all == [
                    "one acct-a": "alone", "one acct-b": "alone", "two acct-a": "committed", "two acct-b": "committed",
                ], "\(answers.all)")
        #expect(one.groupsRerun.withLockedValue { $0 } + two.groupsRerun.withLockedValue { $0 } == 1)
    }

    /// A group's writes run by account, in their order of arrival within one account.
    @Test func aGroupRunsItsWritesByAccount() {
        #expect(PostgresGroupCommit.order(of: ["b", "a", "b", "c", "a"]) == [1, 4, 0, 2, 3])
        #expect(PostgresGroupCommit.order(of: []) == [])
    }

    /// The ledger reports its backend's reruns (the store's `kiosk_store_ledger_reruns_total`).
    @Test func theLedgerCountsAGroupThatRolledBack() async throws {
        let ledger = try Ledger(postgres: try TestLedger.createDatabase())
        let backend = try #require(ledger.backend as? PostgresLedgerBackend)
        let answers = Answers()
        backend.commitGroup([
            Self.job("a", answers) { _ in }, Self.job("b", answers) { _ in throw Refused() },
        ])
        await answers.awaitAnswers(2)
        #expect(answers.all == ["a": "alone", "b": "alone"])
        #expect(ledger.rerunStatistics == (retries: 0, collisions: 0, groupsRolledBack: 1))
    }

    @Test func aCommitRefusedLeavesNothingAndEachRunsAlone() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = Answers()
        // A held write that fails (a duplicate key) is met by the COMMIT: PostgreSQL refuses the group.
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE UNIQUE INDEX kiosk_group_probe_account ON kiosk_group_probe (account)", [])
            try db.execute("INSERT INTO kiosk_group_probe (account, xid, place) VALUES ('taken', 0, -1)", [])
        }
        // The last write's held insert is refused as the store's are, with an error of the domain.
        backend.commitGroup([
            Self.job("a", answers, on: backend, Self.probe("a")),
            Self.job("taken", answers, on: backend) { db in
                try db.executeLater(
                    "INSERT INTO kiosk_group_probe (account, xid, place) VALUES (?, 0, 0)", ["taken"],
                    refusal: { _ in Refused() })
            },
        ])
        await answers.awaitAnswers(2)
        #expect(answers.all == ["a": "alone: committed", "taken": "alone: refused"])
        #expect(try Self.rows(backend).map(\.account) == ["taken", "a"])
    }

    /// A COMMIT PostgreSQL refuses (a deferred unique constraint checked at COMMIT) leaves nothing of the group, and
    /// each write runs alone.
    @Test func aCommitRefusedByPostgreSQLSendsEachWriteAlone() async throws {
        let backend = try await Self.backendWithProbe()
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute(
                "ALTER TABLE kiosk_group_probe ADD CONSTRAINT kiosk_group_probe_once UNIQUE (account) DEFERRABLE "
                    + "INITIALLY DEFERRED", [])
            try db.execute("INSERT INTO kiosk_group_probe (account, xid, place) VALUES ('taken', 0, -1)", [])
        }
        let answers = Answers()
        backend.commitGroup([Self.job("a", answers, Self.probe("a")), Self.job("taken", answers, Self.probe("taken"))])
        await answers.awaitAnswers(2)
        #expect(answers.all == ["a": "alone", "taken": "alone"])
        #expect(try Self.rows(backend).map(\.account) == ["taken"])
        #expect(backend.groupsRerun.withLockedValue { $0 } == 1)
    }

    /// A COMMIT answered with an error at severity ERROR (a deferred trigger raising) rolled the group back: each
    /// write runs alone, and gets its own answer.
    @Test func aCommitAnsweredWithAnErrorSendsEachWriteAlone() async throws {
        let backend = try await Self.backendWithProbe()
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.createDeferredTrigger(
                "kiosk_refuse_bad", on: "kiosk_group_probe",
                body: "BEGIN IF NEW.account = 'bad' THEN RAISE EXCEPTION 'no' USING ERRCODE = '58030'; END IF; "
                    + "RETURN NULL; END")
        }
        let answers = Answers()
        backend.commitGroup([
            Self.job("a", answers, on: backend, Self.probe("a")),
            Self.job("bad", answers, on: backend, Self.probe("bad")),
        ])
        await answers.awaitAnswers(2)
        #expect(answers.all["a"] == "alone: committed" && answers.all["bad"]?.hasPrefix("alone: ") == true)
        #expect(answers.all["bad"] != "alone: committed", "\(answers.all)")
        #expect(try Self.rows(backend).map(\.account) == ["a"])
        #expect(backend.groupsRerun.withLockedValue { $0 } == 1)
    }

    /// A statement is not sent on a connection whose session PostgreSQL has ended: it fails at once with
    /// unavailable instead of after the statement timeout, and the database is not marked as not answering.
    @Test func aStatementOnAnEndedSessionFailsAtOnce() async throws {
        let backend = try await Self.backendWithProbe()
        let ended = #expect(throws: LedgerError.self) {
            try backend.transaction("BEGIN") { db in
                let session = try #require(try db.value(Int64.self, "SELECT pg_backend_pid()::int8", []))
                _ = try backend.read { other in
                    try other.value(Bool.self, "SELECT pg_terminate_backend(CAST(? AS integer))", [session])
                }
                try (db as? PostgresLedgerDatabase)?.connection.closeFuture.wait()
                return try db.fetchAll("SELECT 1", [])
            }
        }
        #expect(
            ended?.kind == .unavailable && ended?.message.contains("closed") == true, "\(String(describing: ended))")
        try backend.health.requireAnswering()
        #expect(try Self.rows(backend).isEmpty)
    }

    /// The group's session ends before its COMMIT (a restart of PostgreSQL): nothing of it stands, the COMMIT is
    /// not sent, and each write runs alone; the ended connection is not waited on for the statement timeout, nor
    /// taken for a database that stopped answering (the read after it is answered).
    @Test func aSessionEndedBeforeItsCommitSendsEachWriteAlone() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = Answers()
        backend.commitGroup([
            Self.job("a", answers, Self.probe("a")),
            Self.job("b", answers) { db in
                try Self.probe("b")(db)
                let session = try #require(try db.value(Int64.self, "SELECT pg_backend_pid()::int8", []))
                _ = try backend.read { other in
                    try other.value(Bool.self, "SELECT pg_terminate_backend(CAST(? AS integer))", [session])
                }
                try (db as? PostgresLedgerDatabase)?.connection.closeFuture.wait()
            },
        ])
        await answers.awaitAnswers(2)
        #expect(answers.all == ["a": "alone", "b": "alone"])
        #expect(try Self.rows(backend).isEmpty)
    }

    /// A COMMIT whose answer does not come (here: a deferred trigger keeps it past the store's statement timeout,
    /// `databaseTimeout`, and the store closes the connection) leaves the outcome unknown: every write fails with 14 and none runs again. The
    /// group did commit: running its writes again would have recorded them twice.
    @Test func aCommitWithoutAnAnswerFailsEveryWriteAndRunsNoneAgain() async throws {
        let location = try TestLedger.createDatabase()
        let backend = try PostgresLedgerBackend(location: location, connections: 2, timeout: .seconds(1))
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE TABLE kiosk_group_probe (account TEXT, xid BIGINT, place BIGINT)", [])
            try db.createDeferredTrigger(
                "kiosk_slow_commit", on: "kiosk_group_probe",
                body: "BEGIN IF NEW.account = 'slow' THEN PERFORM pg_sleep(2); END IF; RETURN NULL; END")
        }
        let answers = Answers()
        backend.commitGroup([Self.job("a", answers, Self.probe("a")), Self.job("slow", answers, Self.probe("slow"))])
        #expect(answers.all == ["a": "failed: 14", "slow": "failed: 14"])
        #expect(backend.groupsRerun.withLockedValue { $0 } == 0)
        // Read from a store of its own (this one marks the database as not answering for a second), once the
        // group's transaction has ended: the lock waits for it.
        let reader = try PostgresLedgerBackend(location: location, connections: 1)
        let recorded = try reader.transaction("BEGIN ISOLATION LEVEL READ COMMITTED") { db in
            try db.execute("LOCK TABLE kiosk_group_probe IN SHARE MODE", [])
            return try db.fetchAll("SELECT account FROM kiosk_group_probe ORDER BY place", []).map {
                try $0["account"] as String
            }
        }
        #expect(recorded == ["a", "slow"])
    }

    /// The next batch: the oldest writes, at most 16, none about an account of a batch being committed (its writes
    /// wait for that batch, in their order).
    @Test func aBatchTakesNoAccountOfAnotherInFlight() {
        #expect(PostgresGroupCommit.batch(of: ["a", "b", "a", "c"], inFlight: ["b"]) == [0, 2, 3])
        #expect(PostgresGroupCommit.batch(of: ["b", "b"], inFlight: ["b"]) == [])
        let many = (0..<40).map { "acct-\($0 % 20)" }
        #expect(PostgresGroupCommit.batch(of: many, inFlight: []) == Set(0..<PostgresGroupCommit.maximumBatch))
    }

    /// With one connection there is no half of the pool to commit groups on: every write goes alone (a drainer
    /// holding the only thread would starve the reads and the writes run again alone).
    @Test func aPoolOfOneWritesAlone() async throws {
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 1)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<16 {
                group.addTask {
                    try await backend.groupWrite(serializingOn: "acct-\(index)") { db in
                        _ = try db.fetchAll("SELECT 1", [])
                    }
                }
            }
            try await group.waitForAll()
        }
        let (commits, writes) = backend.commits.withLockedValue { $0 }
        #expect(commits == 16 && writes == 16)
    }

    /// Writes about 64 accounts at once all commit, in fewer transactions than writes, and each caller gets its own
    /// answer.
    @Test func writesArrivingTogetherCommitInGroups() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<64 {
                group.addTask {
                    try await backend.groupWrite(serializingOn: "acct-\(index)") { db in
                        try Self.probe("acct-\(index)")(db)
                        return "acct-\(index)"
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(answers) == Set((0..<64).map { "acct-\($0)" }))
        #expect(Set(try Self.rows(backend).map(\.account)) == Set(answers))
        let (commits, writes) = backend.commits.withLockedValue { $0 }
        #expect(writes == 64 && commits < 64, "\(writes) writes in \(commits) commits")
    }
}
