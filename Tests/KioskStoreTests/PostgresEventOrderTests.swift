import Dispatch
import Foundation
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// A value shared between a test and the threads it starts.
private final class Shared<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLockedValue<T>(_ body: (inout Value) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// On PostgreSQL, writes about different accounts record events side by side (no lock every event-writing commit
/// holds), and a reader following the log by id still never misses one: it reads only below the oldest
/// transaction still running, so an event whose transaction started earlier but commits later is not skipped.
@Suite(.enabled(if: TestLedger.isPostgres), .timeLimit(.minutes(1)))
struct PostgresEventOrderTests {
    static func event(_ account: String, _ n: Int) -> EventRecord {
        EventRecord(type: .purchased, accountID: account, transactionID: "t-\(account)-\(n)", createdMs: Int64(n))
    }

    /// Writer A records an event and stays open; writer B, younger, records one and commits. Until A commits, a
    /// reader sees neither (B's id is above A's, and A may still commit below it); then both, A's first.
    @Test func anEventCommittedWhileAnOlderWriterRunsStaysUnreadUntilItCommits() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = try testLedger(directory: directory)
        let recorded = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let older = Shared<Result<EventRecord, any Error>?>(nil)
        DispatchQueue.global().async {
            let result = Result {
                try ledger.backend.write { db -> EventRecord in
                    let event = try db.recordEvent(Self.event("a", 1))
                    recorded.signal()
                    release.wait()
                    return event
                }
            }
            older.withLockedValue { $0 = result }
            finished.signal()
        }
        recorded.wait()
        let younger = try ledger.backend.write { db in try db.recordEvent(Self.event("b", 1)) }
        let whileOpen = try ledger.backend.read { db in
            (
                try db.events(after: 0, limit: 100, accountID: nil, types: []), try db.latestEventID(),
                try db.eventsHeldBack()
            )
        }
        release.signal()
        finished.wait()
        let first = try #require(try older.withLockedValue { $0 }?.get())
        #expect(first.id < younger.id, "ids follow the writers' transaction ids")
        #expect(whileOpen.0.isEmpty, "an event above a running writer's id was readable: \(whileOpen.0.map(\.id))")
        #expect(whileOpen.1 == 0)
        #expect(whileOpen.2, "a committed event waiting behind an open writer is not reported held back")
        let after = try ledger.backend.read { db in
            (
                try db.events(after: 0, limit: 100, accountID: nil, types: []), try db.latestEventID(),
                try db.eventsHeldBack()
            )
        }
        #expect(after.0.map(\.id) == [first.id, younger.id])
        #expect(after.1 == younger.id)
        #expect(!after.2)
    }

    /// Revocations are followed by cursor too. Refund A takes its cursor and stays open; refund B, of another account,
    /// waits for A's commit before it takes its own, so no reader can see B's cursor while A's, below it, may still
    /// commit (a follower would skip A for good: its purchase still served).
    @Test func aRevocationWaitsForAnOlderOneToCommit() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = try testLedger(directory: directory)
        for account in ["a", "b"] {
            try ledger.createAccount(id: account, tokenHash: Array(account.utf8), paymentsAllowed: true, nowMs: 1)
            try ledger.backend.write { db in
                try db.insertTransaction(
                    TransactionRecord(
                        id: "t-\(account)", originalID: "t-\(account)", accountID: account, productID: "premium",
                        productType: .nonConsumable, quantity: 1, state: .purchased, purchaseMs: 1, expiresMs: 0,
                        price: "0.99", currency: "USD", paymentMethod: "card", paymentID: "p-\(account)",
                        environment: .sandbox))
            }
        }
        let revoked = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        let results = Shared<[String: Result<RevocationRecord, any Error>]>([:])
        DispatchQueue.global().async {
            let result = Result {
                try ledger.backend.write { db -> RevocationRecord in
                    let revocation = try db.revoke(transactionID: "t-a", reason: "refund", nowMs: 2)
                    revoked.signal()
                    release.wait()
                    return revocation
                }
            }
            results.withLockedValue { $0["a"] = result }
            finished.signal()
        }
        revoked.wait()
        DispatchQueue.global().async {
            let result = Result {
                try ledger.backend.write { db in try db.revoke(transactionID: "t-b", reason: "refund", nowMs: 3) }
            }
            results.withLockedValue { $0["b"] = result }
            finished.signal()
        }
        // B waits on the revocations' lock (observed, at most 10 s).
        let waiting = try (0..<1_000).contains { _ in
            let count = try ledger.backend.read { db in
                try db.value(
                    Int64.self,
                    "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            }
            if count == 1 { return true }
            usleep(10_000)
            return false
        }
        #expect(waiting, "the second refund did not wait for the first's commit")
        let whileOpen = try ledger.backend.read { db in try db.revocations(after: 0, limit: 10) }
        #expect(whileOpen.isEmpty, "a revocation was readable while an older one could still commit below it")
        release.signal()
        finished.wait()
        finished.wait()
        let a = try #require(try results.withLockedValue { $0["a"] }?.get())
        let b = try #require(try results.withLockedValue { $0["b"] }?.get())
        #expect(a.cursor < b.cursor)
        let after = try ledger.backend.read { db in try db.revocations(after: 0, limit: 10) }
        #expect(after.map(\.transactionID) == ["t-a", "t-b"])
    }

    /// A ledger restored into another cluster holds ids above what that cluster's transaction counter gives: a store
    /// starting on it raises the ids' base, so new events still come after every recorded one and a follower's
    /// cursor reaches them.
    @Test func eventsOfALedgerFromAClusterFurtherOnComeAfterItsIDs() throws {
        let location = try TestLedger.createDatabase()
        let first = try Ledger(postgres: location)
        // As if the old cluster's counter had been 2^30 transactions ahead of this one's.
        let ahead = try first.backend.write { db -> Int64 in
            let now = try db.value(Int64.self, "SELECT CAST(CAST(pg_current_xact_id() AS TEXT) AS BIGINT)") ?? 0
            let id = (now + (1 << 30)) * Ledger.eventsPerTransaction
            try db.execute(
                "INSERT INTO events (id, type, account_id, created_ms) VALUES (?, 1, 'restored', 0)", [id])
            return id
        }
        let restarted = try Ledger(postgres: location)
        let recorded = try restarted.backend.write { db in try db.recordEvent(Self.event("after", 1)) }
        #expect(recorded.id > UInt64(ahead), "a new event's id \(recorded.id) is below the restored \(ahead)")
        let followed = try restarted.backend.read { db in
            try db.events(after: UInt64(ahead), limit: 10, accountID: nil, types: [])
        }
        #expect(followed.map(\.id) == [recorded.id])
        // The base is the ledger's: a store started later uses it too.
        let later = try Ledger(postgres: location)
        let next = try later.backend.write { db in try db.recordEvent(Self.event("after", 2)) }
        #expect(next.id > recorded.id)
        withExtendedLifetime(first) {}
    }

    /// A follower's looks read little more of the events than they return, however many there are: with 20,000
    /// events below the horizon and no statistics on the table yet (a new ledger before autovacuum's first ANALYZE),
    /// and the pages' statements planned without their values (as a prepared statement comes to be), the look for
    /// events held back, the latest id and a page after a cursor (of all events, and of one account's of one type)
    /// scan nothing of the table and fetch a few rows through its indexes.
    @Test func aFollowersLooksScanNoEventTable() throws {
        let ledger = try Ledger(postgres: try TestLedger.createDatabase())
        try ledger.backend.write { db in
            // No ANALYZE comes between (autovacuum would run one within a minute).
            try db.execute("ALTER TABLE events SET (autovacuum_enabled = false)", [])
            try db.execute(
                "INSERT INTO events (id, type, account_id, created_ms) "
                    + "SELECT g, 1, 'many', 0 FROM generate_series(1, 20000) g", [])
        }
        let (heldBack, read) = try ledger.backend.read { db -> ([Bool], (Int64, Int64)?) in
            try db.execute("SET LOCAL plan_cache_mode = force_generic_plan", [])
            let heldBack = try (0..<3).map { _ in try db.eventsHeldBack() }
            #expect(try db.latestEventID() == 20_000)
            #expect(
                try db.events(after: 19_990, limit: 3, accountID: nil, types: []).map(\.id) == [19_991, 19_992, 19_993])
            #expect(
                try db.events(after: 19_990, limit: 2, accountID: "many", types: [.purchased]).map(\.id) == [
                    19_991, 19_992,
                ])
            // This transaction's counts so far: rows read by scanning the table, rows fetched through an index.
            let read = try db.fetchAll(
                "SELECT seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relname = 'events'", [])
            let counts = try read.first.map { (try $0["seq_tup_read"] as Int64, try $0["idx_tup_fetch"] as Int64) }
            return (heldBack, counts)
        }
        #expect(heldBack == [false, false, false])
        let (scanned, fetched) = try #require(read)
        #expect(scanned == 0, "the looks scanned \(scanned) event rows")
        // They return 10 rows (3 looks, the latest id, 3 and 2 events): a plan that fetched every event of the
        // account, or of the table, would fetch 20,000.
        #expect(fetched <= 40, "the looks fetched \(fetched) event rows through an index")
    }

    /// Eight writers, each its own account, 25 events each (some writes record two): a follower reading by cursor
    /// while they write gets every event once, ids increasing, each account's in the order it recorded them.
    @Test func concurrentWritersEventsReachAFollowerOnceEachInOrder() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = try testLedger(directory: directory)
        let writers = 8
        let perWriter = 25
        let done = Shared(0)
        let follower = Task.detached { () throws -> [EventRecord] in
            var seen: [EventRecord] = []
            var cursor: UInt64 = 0
            while true {
                let writing = done.withLockedValue { $0 } < writers
                let batch = try ledger.backend.read { db in
                    try db.events(after: cursor, limit: 50, accountID: nil, types: [])
                }
                seen += batch
                cursor = batch.last?.id ?? cursor
                if batch.isEmpty, !writing { return seen }
                if batch.isEmpty { try await Task.sleep(for: .milliseconds(2)) }
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    let account = "w\(writer)"
                    var n = 0
                    while n < perWriter {
                        let pair = n % 5 == 4 && n + 1 < perWriter
                        let first = n
                        try await ledger.write(account: account) { db in
                            try db.recordEvent(Self.event(account, first))
                            if pair { try db.recordEvent(Self.event(account, first + 1)) }
                        }
                        n += pair ? 2 : 1
                    }
                    done.withLockedValue { $0 += 1 }
                }
            }
            try await group.waitForAll()
        }
        let seen = try await follower.value
        #expect(seen.count == writers * perWriter)
        #expect(Set(seen.map(\.id)).count == seen.count, "an event was read twice")
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.id < $1.id }, "ids did not increase")
        for writer in 0..<writers {
            let mine = seen.filter { $0.accountID == "w\(writer)" }.map(\.createdMs)
            #expect(mine == (0..<Int64(perWriter)).map { $0 }, "w\(writer)'s events out of order: \(mine)")
        }
    }
}
