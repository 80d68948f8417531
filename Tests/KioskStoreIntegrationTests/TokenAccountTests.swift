import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// An account's bearer token is looked up in the ledger once a process: a token never changes account. What the
/// account's settings and balance are now is still read for every GetAccount, and an unknown token is looked up again
/// at each call.
@Suite struct TokenAccountTests {
    /// The second call with a token does not read the ledger for it: here the ledger no longer knows the token (the
    /// test changes its hash behind the store's back, which nothing in Kiosk does), and the call is still served
    /// as the account, while a fresh lookup refuses it.
    @Test func anAccountsTokenIsReadOnceAProcess() async throws {
        try await StoreFixture.with { fixture in
            let (id, token) = try fixture.store.createAccount()
            #expect(try await fixture.restore(token: token).isEmpty)
            #expect(fixture.store.tokenAccounts.count == 1)
            try fixture.store.ledger.backend.write { db in
                try db.execute(
                    "UPDATE accounts SET token_hash = ? WHERE id = ?", [Array(repeating: UInt8(7), count: 32), id])
            }
            #expect(try await fixture.restore(token: token).isEmpty)
            await #expect(throws: StoreError.self) { try await fixture.store.authenticate(token: token) }
        }
    }

    /// GetAccount answers with the account as it is now, not as the call's token was first authenticated.
    @Test func getAccountAnswersTheAccountAsItIsNow() async throws {
        try await StoreFixture.with { fixture in
            let (id, token) = try fixture.store.createAccount()
            let before = try await fixture.call(
                "GetAccount", StoreV1.GetAccountRequest(), as: StoreV1.Account.self, token: token)
            #expect(before.paymentsAllowed && before.storefront == fixture.store.defaultStorefront)
            try fixture.store.setPaymentsAllowed(accountID: id, false)
            try fixture.store.ledger.backend.write { db in
                try db.execute("UPDATE accounts SET storefront = 'FRA', credit_balance = 3 WHERE id = ?", [id])
            }
            let after = try await fixture.call(
                "GetAccount", StoreV1.GetAccountRequest(), as: StoreV1.Account.self, token: token)
            #expect(!after.paymentsAllowed && after.storefront == "FRA" && after.creditBalance == 3)
        }
    }

    /// A token no account has is refused, and not remembered: once an account with it exists (created by another
    /// replica, say), its calls are served.
    @Test func anUnknownTokenIsLookedUpAtEachCall() async throws {
        try await StoreFixture.with { fixture in
            let token = "kiosk_" + Store.randomHex(bytes: 32)
            let refused = await #expect(throws: RPCError.self) { try await fixture.restore(token: token) }
            #expect(refused?.code == .unauthenticated)
            #expect(fixture.store.tokenAccounts.count == 0)
            try fixture.store.ledger.createAccount(
                id: "acct_later", tokenHash: Store.tokenHash(token), paymentsAllowed: true, nowMs: 0)
            #expect(try await fixture.restore(token: token).isEmpty)
        }
    }

    /// The memory of tokens holds at most twice its capacity, and keeps the tokens in use: one found in the older
    /// generation moves to the newer, and a token not used for a generation is forgotten.
    @Test func theTokensRememberedAreBoundedAndTheUsedOnesKept() {
        let accounts = TokenAccounts(capacity: 2)
        func record(_ id: String) -> AccountRecord { AccountRecord(id: id, paymentsAllowed: true, creditBalance: 0) }
        accounts.remember(record("a0"), for: [0])
        accounts.remember(record("a1"), for: [1])
        accounts.remember(record("a2"), for: [2])  // the newer generation was full: [0] and [1] are the older
        #expect(accounts.count == 3)
        #expect(accounts.account(for: [0])?.id == "a0")  // used: moves to the newer, which is then full
        accounts.remember(record("a3"), for: [3])  // [2] and [0] become the older; [1] is forgotten
        #expect(accounts.account(for: [1]) == nil)
        #expect(accounts.account(for: [0])?.id == "a0" && accounts.account(for: [3])?.id == "a3")
        for index in 4..<100 { accounts.remember(record("a\(index)"), for: [UInt8(index)]) }
        #expect(accounts.count <= 4)
    }
}
