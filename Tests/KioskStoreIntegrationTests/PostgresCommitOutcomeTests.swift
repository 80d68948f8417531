import Foundation
import KioskStoreTestSupport
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import KioskStore

/// A write's caller is told "nothing was recorded" only when PostgreSQL cannot have committed it: a write one of whose
/// statements failed is never sent to COMMIT, and a COMMIT that ends without saying whether it committed is
/// unavailable (14), never a refusal. A statement whose connection closes before it is answered ends its wait then.
@Suite(.enabled(if: TestLedger.isPostgres), .timeLimit(.minutes(1)))
struct PostgresCommitOutcomeTests {
    static func backend(
        prepared: Bool = true, timeout: Duration = .seconds(5)
    ) async throws
        -> PostgresLedgerBackend
    {
        var location = try TestLedger.createDatabase()
        location.preparesStatements = prepared
        let backend = try PostgresLedgerBackend(location: location, connections: 2, timeout: timeout)
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute("CREATE TABLE kiosk_outcome_probe (n BIGINT)", [])
        }
        return backend
    }

    static func recorded(_ backend: PostgresLedgerBackend) throws -> [Int64] {
        try backend.read { db in
            try db.fetchAll("SELECT n FROM kiosk_outcome_probe ORDER BY n", []).map { try $0["n"] }
        }
    }

    /// A statement postgres-nio refuses to send (more parameters than the protocol carries) fails on this side only:
    /// PostgreSQL's transaction is not aborted, and a COMMIT would record the statements around it. The write is
    /// refused and rolled back instead, so that "nothing of it was recorded" is true: whether the body went past the
    /// failure, or the statement was held to go with the COMMIT.
    @Test func aWriteWhoseStatementFailedHereIsRolledBackNotCommitted() async throws {
        let backend = try await Self.backend(prepared: false)
        let tooMany = Array(repeating: Int64(1), count: Int(UInt16.max) + 1)
        let placeholders = Array(repeating: "?", count: tooMany.count).joined(separator: ",")
        let caught = #expect(throws: LedgerError.self) {
            try backend.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ", serializingOn: "acct") { db in
                try db.execute("INSERT INTO kiosk_outcome_probe (n) VALUES (1)", [])
                do {
                    try db.executeLater("SELECT 1 WHERE 1 IN (\(placeholders))", tooMany, refusal: nil)
                } catch {
                    // The body goes past the failure, as a body may.
                }
                try db.execute("INSERT INTO kiosk_outcome_probe (n) VALUES (2)", [])
            }
        }
        #expect(caught?.kind == .refused && caught?.message.contains("nothing of it was recorded") == true)
        let held = #expect(throws: LedgerError.self) {
            try backend.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ", serializingOn: "acct") { db in
                try db.execute("INSERT INTO kiosk_outcome_probe (n) VALUES (3)", [])
                try db.executeLater(
                    "INSERT INTO kiosk_outcome_probe (n) SELECT 4 WHERE 1 IN (\(placeholders))", tooMany, refusal: nil)
            }
        }
        #expect(
            held?.kind == .refused && held?.message.contains("at most 65,535") == true, "\(String(describing: held))")
        #expect(try Self.recorded(backend) == [])
    }

    /// A COMMIT answered with an error at severity ERROR (here 58030 raised by a deferred trigger) leaves the
    /// session going and the transaction rolled back: the refusal stands, nothing is recorded.
    @Test func aCommitAnsweredWithAnErrorIsRolledBack() async throws {
        let backend = try await Self.backend()
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.createDeferredTrigger(
                "kiosk_failing_commit", on: "kiosk_outcome_probe",
                body: "BEGIN RAISE EXCEPTION 'could not fsync' USING ERRCODE = '58030'; END")
        }
        let refused = #expect(throws: LedgerError.self) {
            try backend.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ", serializingOn: "acct") { db in
                try db.execute("INSERT INTO kiosk_outcome_probe (n) VALUES (1)", [])
            }
        }
        #expect(refused?.kind == .refused && refused?.message.contains("could not fsync") == true)
        #expect(try Self.recorded(backend) == [])
    }

    /// A COMMIT whose session ends before it is answered (FATAL: here the backend terminates itself in a deferred
    /// trigger; a PANIC as the commit record is flushed ends it the same way) may have committed: unavailable, not
    /// refused, and the write does not run again.
    @Test func aCommitWhoseSessionEndsIsUnavailableNotRefused() async throws {
        let backend = try await Self.backend()
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.createDeferredTrigger(
                "kiosk_ending_commit", on: "kiosk_outcome_probe",
                body: "BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(1); RETURN NULL; END")
        }
        let runs = Counter()
        let unknown = #expect(throws: LedgerError.self) {
            try backend.transaction("BEGIN ISOLATION LEVEL REPEATABLE READ", serializingOn: "acct") { db in
                runs.add()
                try db.execute("INSERT INTO kiosk_outcome_probe (n) VALUES (1)", [])
            }
        }
        #expect(unknown?.kind == .unavailable, "\(String(describing: unknown))")
        #expect(unknown?.message.contains("may have been recorded") == true)
        #expect(runs.value == 1)
        #expect(backend.retries.withLockedValue { $0 } == 0 && backend.contended.withLockedValue { $0 } == 0)
    }

    /// A deferred constraint refusing the COMMIT says the transaction rolled back: the refusal stands.
    @Test func aCommitRefusedByADeferredConstraintIsARefusal() async throws {
        let backend = try await Self.backend()
        try await backend.groupWrite(serializingOn: nil) { db in
            try db.execute(
                "ALTER TABLE kiosk_outcome_probe ADD CONSTRAINT kiosk_outcome_once UNIQUE (n) DEFERRABLE INITIALLY "
                    + "DEFERRED; INSERT INTO kiosk_outcome_probe (n) VALUES (1)", [])
        }
        let refused = #expect(throws: LedgerError.self) {
            try backend.transaction("BEGIN ISOLATION LEVEL READ COMMITTED") { db in
                try db.execute("INSERT INTO kiosk_outcome_probe (n) VALUES (1)", [])
            }
        }
        #expect(refused?.kind == .uniqueViolation, "\(String(describing: refused))")
        #expect(try Self.recorded(backend) == [1])
    }

    /// A statement whose connection closes without answering it (postgres-nio leaves a statement written as the
    /// connection closes unanswered for good) ends its wait once the connection is closed, not at the timeout.
    @Test func aWaitEndsWhenItsConnectionClosesUnanswered() async throws {
        let backend = try await Self.backend()
        try await backend.readStatement { db in
            let connection = try #require((db as? PostgresLedgerDatabase)?.connection)
            let never = connection.eventLoop.makePromise(of: Void.self)
            defer { never.succeed(()) }
            try connection.close().wait()
            #expect(throws: PostgresConnectionClosed.self) {
                try waitFor(never.futureResult, timeout: .seconds(30), unlessClosed: connection)
            }
            // Without the connection to look at, the wait lasts its timeout.
            #expect(throws: PostgresTimedOut.self) {
                try waitFor(never.futureResult, timeout: .milliseconds(200))
            }
        }
        // The closed connection was dropped; the next read opens another.
        #expect(try Self.recorded(backend) == [])
    }
}

/// A count kept across threads.
final class Counter: Sendable {
    private let count = NIOLockedValueBox(0)
    func add() { count.withLockedValue { $0 += 1 } }
    var value: Int { count.withLockedValue { $0 } }
}
