import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// On PostgreSQL, purchases of different accounts made at the same moment run side by side without aborting one
/// another (a write about an account runs at REPEATABLE READ, ordered by its account's row; SERIALIZABLE's predicate
/// locks on shared index pages made most of them fail and retry), and purchases of one account all count.
@Suite(.enabled(if: TestLedger.isPostgres), .timeLimit(.minutes(1)))
struct PostgresConcurrencyTests {
    @Test func purchasesOfDifferentAccountsAtOnceAreNotRetried() async throws {
        try await StoreFixture.with { fixture in
            let tokens = try (0..<16).map { _ in try fixture.newAccount() }
            let backend = try #require(fixture.store.ledger.backend as? PostgresLedgerBackend)
            let before = (backend.retries.withLockedValue { $0 }, backend.contended.withLockedValue { $0 })
            // Each account buys three times in a row; the sixteen accounts at once.
            let states = try await withThrowingTaskGroup(of: [StoreV1.TransactionState?].self) { group in
                for token in tokens {
                    group.addTask {
                        var states: [StoreV1.TransactionState?] = []
                        for round in 0..<3 {
                            states.append(
                                try await fixture.buy("credits.5", token: token, key: "\(token.prefix(12))-\(round)")
                                    .transaction?.state)
                        }
                        return states
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            #expect(states.count == 48 && states.allSatisfy { $0 == .purchased })
            #expect(backend.retries.withLockedValue { $0 } - before.0 == 0, "purchases of different accounts retried")
            #expect(
                backend.contended.withLockedValue { $0 } - before.1 == 0,
                "purchases of different accounts collided")
            for token in tokens { #expect(try await fixture.balance(token) == 15) }
        }
    }

    @Test func purchasesOfOneAccountAtOnceAllCount() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for n in 0..<12 {
                    group.addTask {
                        let response = try await fixture.buy("credits.5", token: token, key: "one-account-\(n)")
                        #expect(response.transaction?.state == .purchased)
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await fixture.balance(token) == 60)
        }
    }

    /// A purchase's two writes (its intent, then its outcome) wait for PostgreSQL at most 4 times between them, from
    /// BEGIN to COMMIT (19 when every statement waited for its answer and each write took its account's lock): the
    /// statements whose answers a write does not read (its inserts, its updates) are queued without waiting and
    /// answered with the next statement that waits, at the latest its COMMIT; BEGIN is queued with the write's first
    /// statement; each write's first reads are read ahead as one; and a write that meets no other about its account
    /// takes no lock. (The wire still carries one statement at a time: these are the store thread's waits, not
    /// network round trips.)
    @Test func aPurchasesWritesWaitForPostgreSQLAtMostFourTimes() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let backend = try #require(fixture.store.ledger.backend as? PostgresLedgerBackend)
            _ = try await fixture.buy("credits.5", token: token, key: "warm-up")
            var counts: [Int] = []
            var statements: [Int] = []
            for n in 0..<5 {
                let before = backend.accountWrites.withLockedValue { $0 }
                let response = try await fixture.buy("credits.5", token: token, key: "counted-\(n)")
                let after = backend.accountWrites.withLockedValue { $0 }
                #expect(response.transaction?.state == .purchased)
                #expect(after.writes - before.writes == 2)
                counts.append(after.roundTrips - before.roundTrips)
                statements.append(after.statements - before.statements)
            }
            print("waits per purchase: \(counts); statements: \(statements)")
            #expect(counts.allSatisfy { $0 <= 4 }, "waits of a purchase's writes: \(counts)")
            // BEGIN to COMMIT, both writes: each write's first reads go as one statement, the outcome's inserts and
            // updates as one (the credits' update of the account's row stands for the update that orders writes).
            #expect(statements.allSatisfy { $0 <= StatementBudget.purchaseWrites }, "statements: \(statements)")
            // Prepared on the connection the purchases used: PostgreSQL parsed and planned them once.
            let prepared = try await backend.readStatement { db in
                try db.value(Int.self, "SELECT count(*) FROM pg_prepared_statements") ?? 0
            }
            #expect(prepared > 0)
        }
    }

    /// Two writes about one account at once, each changing only another table: neither takes the account's lock
    /// first, but each updates the account's row before its first write, so the second waits for the first, fails
    /// with a serialization failure, and runs again behind the lock on a snapshot that holds the first; the next
    /// write about the account takes the lock first.
    @Test func aWriteThatMeetsAnotherAboutItsAccountRunsAgainBehindTheLock() throws {
        let location = try TestLedger.createDatabase()
        try Ledger(postgres: location).createAccount(id: "acct", tokenHash: [1], paymentsAllowed: true, nowMs: 0)
        let backend = try PostgresLedgerBackend(location: location, connections: 3)
        let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
        let (contendedBefore, retriesBefore) = (
            backend.contended.withLockedValue { $0 }, backend.retries.withLockedValue { $0 }
        )
        let (written, release, finished) = (
            DispatchSemaphore(value: 0), DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)
        )
        let firstResult = NIOLockedValueBox<Result<Void, any Error>?>(nil)
        DispatchQueue.global().async {
            let result = Result {
                try backend.transaction(begin, serializingOn: "acct") { db in
                    _ = try db.execute("INSERT INTO settings (key, value) VALUES ('probe-first', '1')", [])
                    written.signal()
                    release.wait()
                }
            }
            firstResult.withLockedValue { $0 = result }
            finished.signal()
        }
        written.wait()
        let seen = NIOLockedValueBox<[String?]>([])
        let secondResult = NIOLockedValueBox<Result<Void, any Error>?>(nil)
        DispatchQueue.global().async {
            let result = Result {
                try backend.transaction(begin, serializingOn: "acct") { db in
                    let first = try db.value(String.self, "SELECT value FROM settings WHERE key = 'probe-first'", [])
                    seen.withLockedValue { $0.append(first) }
                    _ = try db.execute("INSERT INTO settings (key, value) VALUES ('probe-second', '2')", [])
                }
            }
            secondResult.withLockedValue { $0 = result }
            finished.signal()
        }
        // The second waits for the first's row lock on the account (observed, at most 10 s).
        let waiting = try (0..<1_000).contains { _ in
            let count = try backend.read { db in
                try db.value(
                    Int64.self,
                    """
                    SELECT COUNT(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')
                      AND pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database())
                    """, [])
            }
            if count ?? 0 > 0 { return true }
            usleep(10_000)
            return false
        }
        #expect(waiting, "the second write did not wait for the first's update of the account's row")
        release.signal()
        finished.wait()
        finished.wait()
        try #require(try firstResult.withLockedValue { $0 }?.get())
        try #require(try secondResult.withLockedValue { $0 }?.get())
        #expect(
            seen.withLockedValue { $0 } == [nil, "1"], "the second write's runs saw \(seen.withLockedValue { $0 })")
        #expect(backend.contended.withLockedValue { $0 } - contendedBefore == 1)
        #expect(backend.retries.withLockedValue { $0 } - retriesBefore == 0)
        // For a while, this process's next writes about the account queue behind its lock from their first attempt:
        // a write that waits for the lock is not overtaken by new ones that did not take it.
        #expect(backend.isContended("acct"))
        #expect(!backend.isContended("another"))
        let statements = { @Sendable (account: String, key: String) throws -> Int in
            let before = backend.accountWrites.withLockedValue { $0.statements }
            try backend.transaction(begin, serializingOn: account) { db in
                _ = try db.execute("INSERT INTO settings (key, value) VALUES (?, '3')", [key])
            }
            return backend.accountWrites.withLockedValue { $0.statements } - before
        }
        // The same write about an account that did not collide, then about this one: the lock and the unlock more.
        #expect(try statements("acct", "probe-third") == statements("another", "probe-other") + 2)
    }

    /// A write about an account that only reads sends no update of its row (PostgreSQL gives it no transaction id);
    /// one that writes makes a new version of the row in its own transaction.
    @Test func onlyAWriteAboutAnAccountThatWritesUpdatesItsRow() throws {
        let location = try TestLedger.createDatabase()
        try Ledger(postgres: location).createAccount(id: "acct", tokenHash: [2], paymentsAllowed: true, nowMs: 0)
        let backend = try PostgresLedgerBackend(location: location)
        let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
        let reading = try backend.transaction(begin, serializingOn: "acct") { db in
            _ = try db.fetchAll("SELECT * FROM accounts WHERE id = ?", ["acct"])
            return try db.value(String.self, "SELECT CAST(pg_current_xact_id_if_assigned() AS TEXT)", [])
        }
        #expect(reading == nil, "a write that only read was given transaction id \(reading ?? "")")
        let ordered = try backend.transaction(begin, serializingOn: "acct") { db in
            _ = try db.execute("INSERT INTO settings (key, value) VALUES ('probe-order', '1')", [])
            return try db.value(
                Bool.self, "SELECT CAST(xmin AS TEXT) = CAST(pg_current_xact_id() AS TEXT) FROM accounts WHERE id = ?",
                ["acct"])
        }
        #expect(ordered == true, "the account's row was not updated by the write")
    }

    /// A table changed under a prepared `SELECT *` (a newer store's migration during a rolling upgrade): the write
    /// that meets the stale plan is run again with the statement prepared anew, and reads the new column.
    @Test func aStatementPreparedBeforeASchemaChangeIsPreparedAgain() async throws {
        // One connection: the read meets the plan it prepared before the change.
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 1)
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE TABLE kiosk_probe (a BIGINT)", [])
            try db.execute("INSERT INTO kiosk_probe (a) VALUES (1)", [])
        }
        let read = { @Sendable in
            try await backend.groupWrite(serializingOn: nil) { db in
                try db.fetchAll("SELECT * FROM kiosk_probe", []).map { $0.columns.names }
            }
        }
        #expect(try await read() == [["a"]])
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("ALTER TABLE kiosk_probe ADD COLUMN b BIGINT", [])
        }
        let retriesBefore = backend.retries.withLockedValue { $0 }
        #expect(try await read() == [["a", "b"]])
        #expect(backend.retries.withLockedValue { $0 } - retriesBefore == 1, "the stale plan was not met and retried")
    }

    /// An account whose writes collided takes the lock first for 2 s, then no longer.
    @Test func aContendedAccountIsRememberedForTwoSeconds() throws {
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 1)
        let start = ContinuousClock.now
        backend.noteContention("acct", now: start)
        #expect(PostgresLedgerBackend.contentionMemory == .seconds(2))
        #expect(backend.isContended("acct", now: start + .milliseconds(1_999)))
        #expect(!backend.isContended("acct", now: start + .seconds(2)))
        // Looked at once expired, it is forgotten.
        #expect(backend.contendedAccountsCount == 0)
    }

    /// The accounts remembered as contended are bounded: past 4,096, those expired are forgotten, and when none
    /// has, the memory starts again rather than grow.
    @Test func theContendedAccountsRememberedAreBounded() throws {
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 1)
        let cap = PostgresLedgerBackend.contendedAccountsRemembered
        let start = ContinuousClock.now
        // Half of them noted a second later: still remembered when the first half has expired.
        for index in 0..<cap { backend.noteContention("acct-\(index)", now: start + .seconds(index < cap / 2 ? 0 : 1)) }
        #expect(backend.contendedAccountsCount == cap)
        let later = start + .milliseconds(2_500)
        backend.noteContention("one-more", now: later)
        #expect(backend.contendedAccountsCount == cap / 2 + 1)
        #expect(!backend.isContended("acct-0", now: later))
        #expect(backend.isContended("acct-\(cap - 1)", now: later) && backend.isContended("one-more", now: later))
        // Full of live ones: all forgotten but the newest.
        var live = 0
        while backend.contendedAccountsCount < cap {
            backend.noteContention("live-\(live)", now: later)
            live += 1
        }
        backend.noteContention("newest", now: later)
        #expect(backend.contendedAccountsCount == 1)
        #expect(backend.isContended("newest", now: later) && !backend.isContended("live-\(live - 1)", now: later))
    }

    /// A write about an account that meets a stale plan runs again as a retry, not as a collision: no other write
    /// met it, so it neither counts as contended nor makes its account take the lock first.
    @Test func aStalePlanInAnAccountWriteIsNoCollision() throws {
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 1)
        let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
        try backend.transaction(begin, serializingOn: nil) { db in
            try db.execute("CREATE TABLE kiosk_probe (a BIGINT)", [])
        }
        let read = {
            try backend.transaction(begin, serializingOn: "acct") { db in
                try db.fetchAll("SELECT * FROM kiosk_probe", []).map { $0.columns.names }
            }
        }
        #expect(try read() == [])
        try backend.transaction(begin, serializingOn: nil) { db in
            try db.execute("ALTER TABLE kiosk_probe ADD COLUMN b BIGINT", [])
            try db.execute("INSERT INTO kiosk_probe (a, b) VALUES (1, 2)", [])
        }
        let before = (backend.retries.withLockedValue { $0 }, backend.contended.withLockedValue { $0 })
        #expect(try read() == [["a", "b"]])
        #expect(backend.retries.withLockedValue { $0 } - before.0 == 1, "the stale plan was not met and retried")
        #expect(backend.contended.withLockedValue { $0 } - before.1 == 0)
        #expect(!backend.isContended("acct"))
    }

    /// A connection prepares a statement once for each kind of its arguments and runs it again by name; past its
    /// 256 statements, new SQL runs unnamed and the session holds no more.
    @Test func aConnectionPreparesAStatementOnceAndAtMost256() async throws {
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 1)
        let prepared = { @Sendable in
            try await backend.readStatement { db in
                _ = try db.fetchAll("SELECT value FROM settings WHERE key = ?", ["environment"])
                return try db.values(String.self, "SELECT statement FROM pg_prepared_statements", [])
            }
        }
        let first = try await prepared()
        #expect(first.contains("SELECT value FROM settings WHERE key = $1::text"))
        #expect(try await prepared().sorted() == first.sorted(), "a statement was prepared again")
        // The same SQL with a NULL is another statement (a NULL's type is left to PostgreSQL); each is found again.
        let withNull = { @Sendable in
            try await backend.readStatement { db in
                _ = try db.fetchAll("SELECT value FROM settings WHERE key = ?", [String?.none])
                return try db.values(String.self, "SELECT statement FROM pg_prepared_statements", [])
            }
        }
        let second = try await withNull()
        #expect(Set(second) == Set(first + ["SELECT value FROM settings WHERE key = $1"]), "\(second)")
        #expect(try await withNull().sorted() == second.sorted(), "a statement was prepared again")
        #expect(try await prepared().sorted() == second.sorted(), "a statement was prepared again")
        let count = try await backend.readStatement { db in
            for n in 0..<300 { _ = try db.fetchAll("SELECT \(n) + ?", [Int64(n)]) }
            return try db.value(Int.self, "SELECT count(*) FROM pg_prepared_statements") ?? -1
        }
        #expect(count == PreparedStatements.capacity)
    }

    /// `--database-statements unnamed`: nothing is prepared on the session (a pooler that does not keep prepared
    /// statements would lose them), and held writes still go as one statement.
    @Test func unnamedStatementsPrepareNothing() async throws {
        var location = try TestLedger.createDatabase()
        location.preparesStatements = false
        let backend = try PostgresLedgerBackend(location: location)
        let (rows, prepared, sent) = try await backend.groupWrite(serializingOn: nil) { db in
            let database = try #require(db as? PostgresLedgerDatabase)
            let begun = database.sent
            try db.executeLater("INSERT INTO settings (key, value) VALUES (?, ?)", ["probe-a", "1"], refusal: nil)
            try db.executeLater("UPDATE accounts SET credit_balance = 0 WHERE id = ?", ["nobody"], refusal: nil)
            // The read mentions the first write's table: the two writes go as one statement ahead of it.
            let rows = try db.fetchAll("SELECT value FROM settings WHERE key = ?", ["probe-a"]).count
            let sent = database.sent - begun
            return (rows, try db.value(Int.self, "SELECT count(*) FROM pg_prepared_statements") ?? -1, sent)
        }
        #expect(rows == 1 && prepared == 0)
        #expect(sent == 2, "statements sent for two held writes and a read: \(sent)")
    }

    /// Reads ahead run as one statement and answer the transaction's next reads of the same SQL and arguments, a
    /// read that found nothing included, until any other statement runs; a read of more than one row leaves each
    /// read to run alone.
    @Test func aReadAheadAnswersItsReadsUntilAnotherStatementRuns() async throws {
        let backend = try PostgresLedgerBackend(location: try TestLedger.createDatabase(), connections: 1)
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE TABLE kiosk_probe (id TEXT PRIMARY KEY, v BIGINT)", [])
            try db.execute("INSERT INTO kiosk_probe (id, v) VALUES ('a', 1), ('b', 2)", [])
        }
        let byID = "SELECT * FROM kiosk_probe WHERE id = ?"
        let seen = try await backend.groupWrite(serializingOn: nil) { db -> [String] in
            let database = try #require(db as? PostgresLedgerDatabase)
            var seen: [String] = []
            let start = database.sent
            try db.readAhead([LedgerRead(byID, ["a"]), LedgerRead(byID, ["b"]), LedgerRead(byID, ["c"])])
            seen.append("sent \(database.sent - start)")
            seen.append("b=\(try db.fetchOne(byID, ["b"]).map { try $0["v"] as Int64 } ?? -1)")
            seen.append("c=\(try db.fetchOne(byID, ["c"]) == nil ? "none" : "some")")
            seen.append("sent \(database.sent - start)")
            try db.execute("UPDATE kiosk_probe SET v = 10 WHERE id = 'a'", [])
            // Read ahead before the update: answered by PostgreSQL again, with the update's value.
            seen.append("a=\(try db.fetchOne(byID, ["a"]).map { try $0["v"] as Int64 } ?? -1)")
            seen.append("sent \(database.sent - start)")
            // Two rows for one read: nothing is kept, each read runs.
            try db.readAhead([
                LedgerRead("SELECT * FROM kiosk_probe WHERE v > ?", [Int64(0)]), LedgerRead(byID, ["b"]),
            ])
            seen.append("rows=\(try db.fetchAll("SELECT * FROM kiosk_probe WHERE v > ?", [Int64(0)]).count)")
            seen.append("sent \(database.sent - start)")
            return seen
        }
        #expect(seen == ["sent 1", "b=2", "c=none", "sent 1", "a=10", "sent 3", "rows=2", "sent 5"])
    }

    enum StatementBudget {
        /// BEGIN, the read-ahead, the intent's writes, COMMIT; BEGIN, the read-ahead, the outcome's writes, COMMIT.
        static let purchaseWrites = 8
    }

    struct Refused: Error, Equatable { var table: String }

    /// Held writes of several tables go as one statement; a refusal there is the refusal of the write whose table
    /// PostgreSQL named, whichever statement carried it (a run of writes alone, or a read that carried them).
    @Test func aRefusalInARunOfHeldWritesIsItsOwnWrites() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            _ = try await fixture.buy("credits.5", token: token, key: "first")
            let backend = try #require(fixture.store.ledger.backend as? PostgresLedgerBackend)
            let existing = try #require(
                try await backend.readStatement { db in
                    try db.value(String.self, "SELECT id FROM transactions LIMIT 1")
                })
            let duplicate = "INSERT INTO transactions SELECT * FROM transactions WHERE id = ?"
            let settings = "UPDATE settings SET value = value WHERE key = 'environment'"
            let overdrawn = "UPDATE accounts SET credit_balance = -1 WHERE id = (SELECT MIN(id) FROM accounts)"
            // A run sent with COMMIT: the second write's refusal.
            await #expect(throws: Refused(table: "transactions")) {
                try await backend.groupWrite(serializingOn: nil) { db in
                    let begun = (db as? PostgresLedgerDatabase)?.sent
                    try db.executeLater(settings, [], refusal: { _ in Refused(table: "settings") })
                    try db.executeLater(duplicate, [existing], refusal: { _ in Refused(table: "transactions") })
                    let sent = (db as? PostgresLedgerDatabase)?.sent
                    #expect(sent == begun, "held writes were sent before the write's next statement")
                }
            }
            // The first write's refusal, a CHECK this time.
            await #expect(throws: Refused(table: "accounts")) {
                try await backend.groupWrite(serializingOn: nil) { db in
                    try db.executeLater(overdrawn, [], refusal: { _ in Refused(table: "accounts") })
                    try db.executeLater(settings, [], refusal: { _ in Refused(table: "settings") })
                }
            }
            // Carried by a read of another table: one statement, and the read throws the write's refusal.
            await #expect(throws: Refused(table: "accounts")) {
                try await backend.groupWrite(serializingOn: nil) { db in
                    try db.executeLater(settings, [], refusal: { _ in Refused(table: "settings") })
                    try db.executeLater(overdrawn, [], refusal: { _ in Refused(table: "accounts") })
                    let database = try #require(db as? PostgresLedgerDatabase)
                    let begun = database.sent
                    defer { #expect(database.sent == begun + 1, "the read did not carry the held writes") }
                    _ = try db.fetchAll("SELECT COUNT(*) FROM transactions", [])
                }
            }
            // Nothing of the three was recorded, and the ledger still serves.
            #expect(try await fixture.balance(token) == 5)
            #expect(try await fixture.buy("credits.5", token: token, key: "after").transaction?.state == .purchased)
        }
    }
}
