import Foundation
import KioskStore
import KioskStoreTestSupport
import Testing

/// A PostgreSQL restart ends every session, and with it each store process's instance lock: the process must take
/// its lock again, or the other replicas take it for dead (and take over its payments while it is still charging).
/// Runs on the PostgreSQL pass; it restarts the pass's shared cluster, so it runs with the others one at a time.
@Suite(.enabled(if: TestLedger.isPostgres), .timeLimit(.minutes(1)))
struct PostgresRestartTests {
    @Test func aStoreTakesItsInstanceLockAgainAfterPostgreSQLRestarts() async throws {
        let location = try TestLedger.createDatabase()
        var live: PostgresLedgerBackend? = try #require(
            try Ledger(postgres: location).backend as? PostgresLedgerBackend)
        let observer = try #require(try Ledger(postgres: location).backend as? PostgresLedgerBackend)
        let instance = "restart-" + UUID().uuidString
        try live?.holdInstanceLock(instance)
        #expect(try observer.isInstanceAlive(instance))

        try TestLedger.restartCluster()
        // Every session ended with the restart; the live store's lock must come back by itself.
        let deadline = ContinuousClock.now + .seconds(30)
        var alive = false
        while !alive, ContinuousClock.now < deadline {
            alive = (try? observer.isInstanceAlive(instance)) ?? false
            if !alive { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(alive, "after the restart the live store looks dead to the other replicas")
        // And a store that is gone is seen gone: its backend closes the lock's connection and nothing takes it again.
        live = nil
        var gone = false
        let goneBy = ContinuousClock.now + .seconds(10)
        while !gone, ContinuousClock.now < goneBy {
            gone = (try? observer.isInstanceAlive(instance)) == false
            if !gone { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(gone, "a store whose ledger is gone still looks alive")
    }

    /// A store's sessions ask the server for TCP keepalives, so a store whose host vanished without closing its
    /// sockets loses its instance lock within about 25 s, not the kernel's default two hours.
    @Test func aStoresSessionsAskForKeepalives() throws {
        let ledger = try Ledger(postgres: try TestLedger.createDatabase())
        let settings = try ledger.backend.read { db in
            try db.value(
                String.self,
                "SELECT current_setting('tcp_keepalives_idle') || '/' || current_setting('tcp_keepalives_interval') || '/' || current_setting('tcp_keepalives_count')"
            )
        }
        #expect(settings == "10/5/3")
    }
}
