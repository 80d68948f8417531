import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// On PostgreSQL, purchases of different accounts made at the same moment run side by side without aborting one
/// another (a write about an account runs at REPEATABLE READ behind its lock; SERIALIZABLE's predicate locks on
/// shared index pages made most of them fail and retry), and purchases of one account still run one at a time.
@Suite(.enabled(if: TestLedger.isPostgres), .timeLimit(.minutes(1)))
struct PostgresConcurrencyTests {
    @Test func purchasesOfDifferentAccountsAtOnceAreNotRetried() async throws {
        try await StoreFixture.with { fixture in
            let tokens = try (0..<16).map { _ in try fixture.newAccount() }
            let backend = try #require(fixture.store.ledger.backend as? PostgresLedgerBackend)
            let before = backend.retries.withLockedValue { $0 }
            let states = try await withThrowingTaskGroup(of: StoreV1.TransactionState?.self) { group in
                for round in 0..<3 {
                    for token in tokens {
                        group.addTask {
                            try await fixture.buy("credits.5", token: token, key: "\(token.prefix(12))-\(round)")
                                .transaction?.state
                        }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(states.count == 48 && states.allSatisfy { $0 == .purchased })
            #expect(backend.retries.withLockedValue { $0 } - before == 0, "purchases of different accounts retried")
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

    /// A purchase's two writes (its intent, then its outcome) wait for PostgreSQL at most 8 times between them, from
    /// the lock to COMMIT (19 when every statement waited for its answer): the statements whose answers a write does
    /// not read (its inserts, its updates) are queued without waiting and answered with the next statement that
    /// waits, at the latest its COMMIT; the lock and BEGIN are queued with the write's first statement. (The wire
    /// still carries one statement at a time: these are the store thread's waits, not network round trips.)
    @Test func aPurchasesWritesWaitForPostgreSQLAtMostEightTimes() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let backend = try #require(fixture.store.ledger.backend as? PostgresLedgerBackend)
            _ = try await fixture.buy("credits.5", token: token, key: "warm-up")
            var counts: [Int] = []
            for n in 0..<5 {
                let before = backend.accountWrites.withLockedValue { $0 }
                let response = try await fixture.buy("credits.5", token: token, key: "counted-\(n)")
                let after = backend.accountWrites.withLockedValue { $0 }
                #expect(response.transaction?.state == .purchased)
                #expect(after.writes - before.writes == 2)
                counts.append(after.roundTrips - before.roundTrips)
            }
            print("waits per purchase: \(counts)")
            #expect(counts.allSatisfy { $0 <= 8 }, "waits of a purchase's writes: \(counts)")
        }
    }
}
