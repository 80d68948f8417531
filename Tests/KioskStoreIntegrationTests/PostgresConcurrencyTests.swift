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
}
