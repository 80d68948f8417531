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

    static func job(
        _ account: String, _ answers: Answers, _ body: @escaping @Sendable (any LedgerDatabase) throws -> Void
    ) -> PostgresGroupCommit.Job {
        PostgresGroupCommit.Job(
            account: account, run: body, succeed: { answers.note(account, "committed") },
            fail: { answers.note(account, "failed: \(($0 as? LedgerError)?.kind == .unavailable ? "14" : "\($0)")") },
            alone: { answers.note(account, "alone") })
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

    @Test func aFailedWriteLeavesNothingOfItsGroupAndEachRunsAlone() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = Answers()
        struct Refused: Error {}
        backend.commitGroup([
            Self.job("a", answers, Self.probe("a")),
            Self.job("b", answers) { db in
                try Self.probe("b")(db)
                throw Refused()
            },
            Self.job("c", answers, Self.probe("c")),
        ])
        // The others run alone on the backend's threads.
        await answers.awaitAnswers(3)
        #expect(answers.all == ["a": "alone", "b": "alone", "c": "alone"])
        #expect(try Self.rows(backend).isEmpty, "a write of a group that did not commit was recorded")
        #expect(backend.groupsRerun.withLockedValue { $0 } == 1)
    }

    @Test func aCommitRefusedLeavesNothingAndEachRunsAlone() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = Answers()
        // A held write that fails (a duplicate key) is met by the COMMIT: PostgreSQL refuses the group.
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE UNIQUE INDEX kiosk_group_probe_account ON kiosk_group_probe (account)", [])
            try db.execute("INSERT INTO kiosk_group_probe (account, xid, place) VALUES ('taken', 0, -1)", [])
        }
        backend.commitGroup([
            Self.job("a", answers, Self.probe("a")),
            Self.job("taken", answers) { db in
                try db.executeLater(
                    "INSERT INTO kiosk_group_probe (account, xid, place) VALUES (?, 0, 0)", ["taken"], refusal: nil)
            },
        ])
        await answers.awaitAnswers(2)
        #expect(answers.all == ["a": "alone", "taken": "alone"])
        #expect(try Self.rows(backend).map(\.account) == ["taken"])
    }

    @Test func aCommitWithoutAnAnswerFailsEveryWriteAndRunsNoneAgain() async throws {
        let backend = try await Self.backendWithProbe()
        let answers = Answers()
        backend.commitGroup([
            Self.job("a", answers, Self.probe("a")),
            Self.job("b", answers) { db in
                try Self.probe("b")(db)
                // The group's session is ended from another before its COMMIT (as a restart of PostgreSQL would).
                let session = try #require(try db.value(Int64.self, "SELECT pg_backend_pid()::int8", []))
                _ = try backend.read { other in
                    try other.value(Bool.self, "SELECT pg_terminate_backend(CAST(? AS integer))", [session])
                }
            },
        ])
        #expect(answers.all == ["a": "failed: 14", "b": "failed: 14"])
        #expect(try Self.rows(backend).isEmpty)
        #expect(backend.groupsRerun.withLockedValue { $0 } == 0)
    }

    /// The next batch: the oldest writes, at most 16, none about an account of a batch being committed (its writes
    /// wait for that batch, in their order).
    @Test func aBatchTakesNoAccountOfAnotherInFlight() {
        #expect(PostgresGroupCommit.batch(of: ["a", "b", "a", "c"], inFlight: ["b"]) == [0, 2, 3])
        #expect(PostgresGroupCommit.batch(of: ["b", "b"], inFlight: ["b"]) == [])
        let many = (0..<40).map { "acct-\($0 % 20)" }
        #expect(PostgresGroupCommit.batch(of: many, inFlight: []) == Set(0..<PostgresGroupCommit.maximumBatch))
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
