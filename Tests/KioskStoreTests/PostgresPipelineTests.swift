import Dispatch
import Foundation
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// On PostgreSQL a write sends the statements whose answers it does not read without waiting for them
/// (`LedgerDatabase.executeLater`). Their failures must still end the write: never a COMMIT that PostgreSQL turned
/// into a ROLLBACK reported as done.
@Suite(.enabled(if: TestLedger.isPostgres), .timeLimit(.minutes(1)))
struct PostgresPipelineTests {
    /// A body that catches the error of a statement it sent without waiting, and goes on to return, still fails:
    /// the transaction was aborted at that statement, and nothing of it is recorded.
    @Test func aWriteWhoseSentStatementFailedNeverCommits() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = try testLedger(directory: directory)
        try ledger.createAccount(id: "a1", tokenHash: [1], paymentsAllowed: true, nowMs: 1)
        let caught = NSLock()
        var swallowed: (any Error)?
        let refused = #expect(throws: LedgerError.self) {
            try ledger.backend.write { db in
                try db.executeLater("UPDATE accounts SET credit_balance = 7 WHERE id = ?", ["a1"])
                // A second account with the same token hash: the unique index refuses it.
                try db.executeLater(
                    "INSERT INTO accounts (id, token_hash, payments_allowed, created_ms) VALUES (?, ?, 1, 2)",
                    ["a2", [UInt8]([1])])
                do {
                    _ = try db.fetchAll("SELECT id FROM accounts", [])
                } catch {
                    caught.withLock { swallowed = error }
                }
            }
        }
        #expect(refused?.kind == .refused)
        #expect((caught.withLock { swallowed } as? LedgerError)?.kind == .uniqueViolation)
        #expect(try ledger.account(id: "a1")?.creditBalance == 0)
        #expect(try ledger.account(id: "a2") == nil)
    }

    /// The lock, BEGIN and a write's first statement go out together; a write that throws before any statement of
    /// its own still lets go of the account lock, and the next write about the account runs at once.
    @Test func aWriteThatThrowsBeforeItsFirstStatementLetsGoOfTheLock() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = try testLedger(directory: directory)
        try ledger.createAccount(id: "a1", tokenHash: [1], paymentsAllowed: true, nowMs: 1)
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await ledger.write(account: "a1") { _ in throw Refused() }
        }
        let balance = try await ledger.write(account: "a1") { db in
            try db.addCredits(5, account: "a1", transaction: nil, reason: "grant", nowMs: 2)
            return try db.account(id: "a1")?.creditBalance
        }
        #expect(balance == 5)
    }

    /// A write behind its account's lock (an attempt after a collision) that only sends statements it does not wait
    /// for still commits only under the lock: when the lock is refused (here PostgreSQL's `lock_timeout`, while
    /// another session holds it), the write fails and nothing of it is recorded, though the connection ran what was
    /// sent after the refused lock.
    @Test func aWriteWhoseLockIsRefusedCommitsNothing() throws {
        let location = try TestLedger.createDatabase()
        let holder = try Ledger(postgres: location)
        try holder.createAccount(id: "a1", tokenHash: [1], paymentsAllowed: true, nowMs: 1)
        try holder.backend.write { db in
            try db.execute("ALTER DATABASE \(location.database) SET lock_timeout = '200ms'")
        }
        // Its sessions start after the ALTER: their lock waits end after 200 ms with 55P03.
        let writer = try Ledger(postgres: location)
        let backend = try #require(holder.backend as? PostgresLedgerBackend)
        let locked = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let released = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = try? backend.transaction(
                "BEGIN ISOLATION LEVEL REPEATABLE READ", serializingOn: "a1", lockingFirst: true
            ) { db in
                _ = try db.fetchAll("SELECT 1", [])
                locked.signal()
                release.wait()
            }
            released.signal()
        }
        locked.wait()
        let refused = #expect(throws: LedgerError.self) {
            try (writer.backend as? PostgresLedgerBackend)?.transaction(
                "BEGIN ISOLATION LEVEL REPEATABLE READ", serializingOn: "a1", lockingFirst: true
            ) { db in
                try db.executeLater("UPDATE accounts SET credit_balance = 9 WHERE id = ?", ["a1"])
            }
        }
        release.signal()
        released.wait()
        #expect(refused?.kind == .unavailable, "\(refused.map { "\($0)" } ?? "")")
        #expect(try holder.account(id: "a1")?.creditBalance == 0, "the write committed without its lock")
    }
}
