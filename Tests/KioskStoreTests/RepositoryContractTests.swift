import Foundation
import KioskStoreCore
import KioskStoreTestSupport
import Testing

@testable import KioskStore

// One contract for the repository ports (KioskStoreCore's `StoreRepositories`), run on every
// implementation: the in-memory one the domain's tests use, and the SQL ledger (SQLite, or PostgreSQL
// with KIOSK_TEST_LEDGER=postgres). Each check reads back through the ports only, after its write
// has committed, so both answer the same questions the same way.

/// A ledger the contract runs on: its writes, and accounts to write about.
protocol RepositoryHarness: Sendable {
    /// The implementation's name, for messages.
    var name: String { get }
    /// Runs `body` as one write: all of it, or (when it throws) none.
    func write<T: Sendable>(_ body: @escaping @Sendable (any StoreRepositories) throws -> T) async throws -> T
    /// Creates an account holding `credits`.
    func createAccount(_ id: String, credits: UInt64) async throws
}

extension RepositoryHarness {
    func createAccount(_ id: String) async throws { try await createAccount(id, credits: 0) }

    func balance(_ accountID: String) async throws -> UInt64? {
        try await write { try $0.account(id: accountID)?.creditBalance }
    }

    func transaction(_ id: String) async throws -> TransactionRecord? {
        try await write { try $0.transaction(id: id) }
    }

    func latestEventID() async throws -> UInt64 {
        try await write { try $0.latestEventID() }
    }

    func events(after cursor: UInt64) async throws -> [EventRecord] {
        try await write { try $0.events(after: cursor, limit: 100) }
    }

    func intent(_ id: String) async throws -> PaymentIntent? {
        try await write { try $0.intent(id: id) }
    }

    func subscription(_ originalID: String) async throws -> Subscription? {
        try await write { try $0.subscription(originalID: originalID) }
    }

    func refundRequest(_ transactionID: String) async throws -> RefundRequest? {
        try await write { try $0.refundRequest(transactionID: transactionID) }
    }
}

/// The in-memory ledger of KioskStoreCore.
struct InMemoryRepositoryHarness: RepositoryHarness {
    let ledger = InMemoryLedger()

    var name: String { "in-memory" }

    func write<T: Sendable>(_ body: @escaping @Sendable (any StoreRepositories) throws -> T) async throws -> T {
        try ledger.write { try body($0) }
    }

    func createAccount(_ id: String, credits: UInt64) async throws {
        ledger.createAccount(id: id, credits: credits)
    }
}

/// The SQL ledger the tests run on, in a data dir of its own (removed with the harness).
final class LedgerRepositoryHarness: RepositoryHarness {
    let directory: String
    let ledger: Ledger

    init() throws {
        directory = temporaryDirectory()
        ledger = try testLedger(directory: directory)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    var name: String { TestLedger.isPostgres ? "postgres" : "sqlite" }

    func write<T: Sendable>(_ body: @escaping @Sendable (any StoreRepositories) throws -> T) async throws -> T {
        try await ledger.write { db in try body(db) }
    }

    func createAccount(_ id: String, credits: UInt64) async throws {
        let tokenHash = (0..<32).map { _ in UInt8.random(in: 0...255) }
        try ledger.createAccount(id: id, tokenHash: tokenHash, paymentsAllowed: true, nowMs: 0)
        if credits > 0 {
            try await write {
                try $0.addCredits(Int64(clamping: credits), account: id, transaction: nil, reason: "grant", nowMs: 0)
            }
        }
    }
}

/// The implementations every contract test runs on.
enum RepositoryContractBackend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inMemory
    case ledger

    var testDescription: String {
        switch self {
        case .inMemory: "in-memory"
        case .ledger: TestLedger.isPostgres ? "postgres" : "sqlite"
        }
    }

    /// A fresh, empty ledger of this kind.
    func make() throws -> any RepositoryHarness {
        switch self {
        case .inMemory: return InMemoryRepositoryHarness()
        case .ledger: return try LedgerRepositoryHarness()
        }
    }
}

/// `value` after `change`.
private func changed<T>(_ value: T, _ change: (inout T) throws -> Void) rethrows -> T {
    var value = value
    try change(&value)
    return value
}

/// A transaction of account a1 (by default a purchased consumable, its own original).
private func contractTransaction(
    _ id: String, account: String = "a1", product: String = "credits.10", type: ProductKind = .consumable,
    state: TransactionState = .purchased, purchaseMs: Int64 = 1_000, expiresMs: Int64 = 0, paymentID: String? = nil,
    credits: UInt64 = 0
) -> TransactionRecord {
    TransactionRecord(
        id: id, originalID: id, accountID: account, productID: product, productType: type, quantity: 1, state: state,
        purchaseMs: purchaseMs, expiresMs: expiresMs, price: "0.99", currency: "USD", paymentMethod: "card",
        paymentID: paymentID,
        environment: .sandbox, credits: credits)
}

/// A pending purchase intent of account a1 (by default for the non-consumable `premium`).
private func contractIntent(
    _ paymentID: String, product: String = "premium", type: ProductKind = .nonConsumable, owner: String = "o1",
    atMs: Int64 = 1_000
) -> PaymentIntent {
    PaymentIntent(
        kind: .purchase, paymentID: paymentID, transactionID: "t-\(paymentID)", accountID: "a1", productID: product,
        productType: type,
        creditsPerUnit: type == .consumable ? 10 : 0, subscriptionPeriod: "", quantity: 1, unitPrice: "0.99",
        currency: "USD",
        paymentMethod: "card", purchaseMs: atMs, idempotencyKey: "key-\(paymentID)", requestHash: [1, 2, 3],
        owner: owner, createdMs: atMs,
        attemptMs: atMs)
}

/// A subscription of account a1 whose first and latest transaction is `originalID`.
private func contractSubscription(
    _ originalID: String, product: String = "sub.monthly", expiresMs: Int64,
    state: Subscription.State = .active
) -> Subscription {
    changed(
        Subscription(
            originalID: originalID, accountID: "a1", productID: product, paymentMethod: "card", expiresMs: expiresMs,
            latestTransactionID: originalID)
    ) {
        $0.state = state
        $0.periodsPaid = 1
    }
}

@Suite struct RepositoryContractTests {
    // MARK: Transactions

    @Test(arguments: RepositoryContractBackend.allCases)
    func aTransactionReadsBackWholeByIDAndByPayment(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let paid = TransactionRecord(
            id: "t1", originalID: "t0", accountID: "a1", productID: "sub.monthly",
            productType: .autoRenewableSubscription, quantity: 2,
            state: .purchased, purchaseMs: 1_000, expiresMs: 2_000, periodStartMs: 1_000, offerID: "introductory",
            price: "0.99",
            currency: "EUR", paymentMethod: "card", paymentID: "pay-1", receipt: [1, 2, 3], environment: .production)
        let failed = TransactionRecord(
            id: "t2", originalID: "t2", accountID: "a1", productID: "credits.10", productType: .consumable, quantity: 1,
            state: .failed,
            purchaseMs: 1_500, price: "1.99", currency: "USD", paymentMethod: "card", paymentID: nil, errorCode: 2,
            errorReason: "card_declined", errorMessage: "the card was declined", receipt: nil, finished: true,
            environment: .sandbox, credits: 5)
        try await ledger.write { repositories in
            try repositories.insertTransaction(paid)
            try repositories.insertTransaction(failed)
        }
        let (byID, byPayment, other, unknown) = try await ledger.write { repositories in
            (
                try repositories.transaction(id: "t1"), try repositories.transaction(paymentID: "pay-1"),
                try repositories.transaction(id: "t2"),
                try repositories.transaction(paymentID: "pay-2")
            )
        }
        #expect(byID == paid, "\(ledger.name)")
        #expect(byPayment == paid)
        #expect(other == failed)
        #expect(unknown == nil)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func aPaymentOrIDRecordedTwiceIsRefusedAndItsWholeWriteRollsBack(_ backend: RepositoryContractBackend) async throws
    {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { try $0.insertTransaction(contractTransaction("t1", paymentID: "pay-1", credits: 10)) }
        let eventsBefore = try await ledger.latestEventID()
        let samePayment = await #expect(throws: StoreError.self) {
            try await ledger.write { repositories in
                try repositories.recordEvent(EventRecord(type: .test, accountID: "a1", createdMs: 2_000))
                try repositories.addCredits(5, account: "a1", transaction: nil, reason: "grant", nowMs: 2_000)
                try repositories.insertTransaction(contractTransaction("t2", paymentID: "pay-1", credits: 10))
            }
        }
        #expect(samePayment?.kind == .conflict)
        let sameID = await #expect(throws: StoreError.self) {
            try await ledger.write { try $0.insertTransaction(contractTransaction("t1", paymentID: "pay-9")) }
        }
        #expect(sameID?.kind == .conflict)
        #expect(try await ledger.transaction("t2") == nil)
        #expect(try await ledger.transaction("t1")?.paymentID == "pay-1")
        #expect(try await ledger.latestEventID() == eventsBefore)
        #expect(try await ledger.balance("a1") == 10)
    }

    /// On PostgreSQL the insert goes out without waiting for its answer: its refusal arrives with the answer to a
    /// later statement of the write (here a read), and is still the conflict, and still ends the whole write.
    @Test(arguments: RepositoryContractBackend.allCases)
    func aRefusalAnsweredWithALaterStatementEndsTheWrite(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { try $0.insertTransaction(contractTransaction("t1", paymentID: "pay-1", credits: 10)) }
        let eventsBefore = try await ledger.latestEventID()
        let refused = await #expect(throws: StoreError.self) {
            try await ledger.write { repositories -> TransactionRecord? in
                try repositories.insertTransaction(contractTransaction("t2", paymentID: "pay-1", credits: 10))
                try repositories.addCredits(5, account: "a1", transaction: nil, reason: "grant", nowMs: 2_000)
                try repositories.appendEvent(EventRecord(type: .test, accountID: "a1", createdMs: 2_000))
                return try repositories.transaction(id: "t1")
            }
        }
        #expect(refused?.kind == .conflict, "\(ledger.name)")
        #expect(try await ledger.transaction("t2") == nil)
        #expect(try await ledger.latestEventID() == eventsBefore)
        #expect(try await ledger.balance("a1") == 10)
    }

    /// What a write sent without waiting is there for the statements after it in the same write.
    @Test(arguments: RepositoryContractBackend.allCases)
    func aWriteSeesWhatItSentBefore(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let (seen, balance) = try await ledger.write { repositories -> (TransactionRecord?, UInt64?) in
            try repositories.insertTransaction(contractTransaction("t1", paymentID: "pay-1", credits: 10))
            try repositories.appendEvent(EventRecord(type: .test, accountID: "a1", createdMs: 2_000))
            return (try repositories.transaction(id: "t1"), try repositories.account(id: "a1")?.creditBalance)
        }
        #expect(seen?.paymentID == "pay-1", "\(ledger.name)")
        #expect(balance == 10)
        let events = try await ledger.events(after: 0)
        #expect(events.map(\.type) == [.purchased, .test])
        #expect(events.count == 2 && events[0].id < events[1].id)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func aSecondLivePurchaseOfANonConsumableIsRefused(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write {
            try $0.insertTransaction(
                contractTransaction("t1", product: "premium", type: .nonConsumable, paymentID: "p1"))
        }
        let second = await #expect(throws: StoreError.self) {
            try await ledger.write {
                try $0.insertTransaction(
                    contractTransaction("t2", product: "premium", type: .nonConsumable, paymentID: "p2"))
            }
        }
        #expect(second?.kind == .conflict)
        // An ask to buy waits beside the purchase; once that is refunded, a new purchase is recorded.
        try await ledger.write { repositories in
            try repositories.insertTransaction(
                contractTransaction("t3", product: "premium", type: .nonConsumable, state: .deferred))
            _ = try repositories.revoke(transactionID: "t1", reason: "refund", nowMs: 2_000)
            try repositories.insertTransaction(
                contractTransaction("t2", product: "premium", type: .nonConsumable, paymentID: "p2"))
        }
        #expect(try await ledger.transaction("t2")?.state == .purchased)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func aPurchasedConsumableAddsItsCreditsAndRecordsItsEvent(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1", credits: 5)
        let before = try await ledger.latestEventID()
        try await ledger.write { repositories in
            try repositories.insertTransaction(
                contractTransaction("t1", purchaseMs: 3_000, paymentID: "p1", credits: 10))
            try repositories.insertTransaction(
                contractTransaction("t2", purchaseMs: 4_000, paymentID: "p2", credits: 1), event: .renewed)
        }
        #expect(try await ledger.balance("a1") == 16)
        let events = try await ledger.events(after: before)
        #expect(events.map(\.type) == [.purchased, .renewed])
        let purchased = try #require(events.first)
        #expect(
            [purchased.accountID, purchased.transactionID, purchased.originalTransactionID, purchased.productID] == [
                "a1", "t1", "t1", "credits.10",
            ])
        #expect(purchased.createdMs == 3_000)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func anAskToBuyRecordsDeferredAndAFailureNothing(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let before = try await ledger.latestEventID()
        try await ledger.write { repositories in
            try repositories.insertTransaction(
                contractTransaction("t1", product: "premium", type: .nonConsumable, state: .deferred))
            try repositories.insertTransaction(
                contractTransaction("t2", product: "premium", type: .nonConsumable, state: .failed))
            try repositories.insertTransaction(contractTransaction("t3", state: .failed, credits: 10))
        }
        let events = try await ledger.events(after: before)
        #expect(events.map(\.type) == [.deferred])
        #expect(events.first?.transactionID == "t1")
        #expect(try await ledger.balance("a1") == 0)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func anApprovalRewritesTheAskInPlaceAndRecordsApproved(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let asked = contractTransaction("t1", state: .deferred, purchaseMs: 1_000)
        try await ledger.write { repositories in
            try repositories.insertTransaction(asked)
            try repositories.insertTransaction(contractTransaction("t2", purchaseMs: 1_500, paymentID: "p2"))
        }
        let before = try await ledger.latestEventID()
        let approved = changed(asked) {
            $0.state = .purchased
            $0.purchaseMs = 2_000
            $0.paymentID = "p1"
            $0.receipt = [9, 9]
            $0.credits = 10
        }
        try await ledger.write { try $0.replaceTransaction(approved) }
        #expect(try await ledger.transaction("t1") == approved)
        #expect(try await ledger.balance("a1") == 10)
        let events = try await ledger.events(after: before)
        #expect(events.map(\.type) == [.approved])
        #expect(events.first?.transactionID == "t1" && events.first?.createdMs == 2_000)
        // Still the first of the account's purchases of the product: it kept its place.
        let history = try await ledger.write { try $0.subscriptionHistory(accountID: "a1", productID: "credits.10") }
        #expect(history.originalID == "t1")
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func ownedFollowsTheKindOfProduct(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { repositories in
            try repositories.insertTransaction(
                contractTransaction("t1", product: "premium", type: .nonConsumable, paymentID: "p1"))
            try repositories.insertTransaction(contractTransaction("t2", paymentID: "p2", credits: 10))
            try repositories.insertTransaction(
                contractTransaction(
                    "t3", product: "sub.monthly", type: .autoRenewableSubscription, expiresMs: 10_000, paymentID: "p3"))
        }
        func owned(_ product: String, _ kind: ProductKind, at nowMs: Int64) async throws -> String? {
            try await ledger.write { try $0.owned(accountID: "a1", productID: product, kind: kind, nowMs: nowMs)?.id }
        }
        #expect(try await owned("premium", .nonConsumable, at: 5_000) == "t1")
        #expect(try await owned("credits.10", .consumable, at: 5_000) == nil)
        // No subscription row: the transaction's own expiry decides.
        #expect(try await owned("sub.monthly", .autoRenewableSubscription, at: 5_000) == "t3")
        #expect(try await owned("sub.monthly", .autoRenewableSubscription, at: 10_000) == nil)
        // With one, the row decides: entitled → its latest transaction, however the transaction's expiry reads.
        try await ledger.write { try $0.saveSubscription(contractSubscription("t3", expiresMs: 20_000), nowMs: 1_000) }
        #expect(try await owned("sub.monthly", .autoRenewableSubscription, at: 15_000) == "t3")
        #expect(try await owned("sub.monthly", .autoRenewableSubscription, at: 20_000) == nil)
        try await ledger.write {
            try $0.saveSubscription(contractSubscription("t3", expiresMs: 20_000, state: .inBillingRetry), nowMs: 2_000)
        }
        #expect(try await owned("sub.monthly", .autoRenewableSubscription, at: 5_000) == nil)
        // A refunded non-consumable is not owned.
        try await ledger.write { _ = try $0.revoke(transactionID: "t1", reason: "refund", nowMs: 3_000) }
        #expect(try await owned("premium", .nonConsumable, at: 5_000) == nil)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func subscriptionHistoryNamesTheFirstLivePurchaseAndTheLatestExpiry(
        _ backend: RepositoryContractBackend
    ) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        func history() async throws -> (originalID: String?, latestExpiryMs: Int64) {
            try await ledger.write { try $0.subscriptionHistory(accountID: "a1", productID: "pass") }
        }
        let empty = try await history()
        #expect(empty.originalID == nil && empty.latestExpiryMs == 0)
        let rows: [(id: String, state: TransactionState, expiresMs: Int64)] = [
            ("t1", .purchased, 3_000), ("t2", .purchased, 5_000), ("t3", .failed, 9_000), ("t4", .deferred, 9_000),
        ]
        try await ledger.write { repositories in
            for (id, state, expiresMs) in rows {
                try repositories.insertTransaction(
                    contractTransaction(
                        id, product: "pass", type: .nonRenewingSubscription, state: state,
                        expiresMs: expiresMs, paymentID: state == .purchased ? "p-\(id)" : nil))
            }
            try repositories.insertTransaction(
                contractTransaction("t5", product: "other", type: .nonRenewingSubscription, expiresMs: 9_999))
        }
        let both = try await history()
        #expect(both.originalID == "t1" && both.latestExpiryMs == 5_000)
        try await ledger.write { _ = try $0.revoke(transactionID: "t2", reason: "refund", nowMs: 4_000) }
        let first = try await history()
        #expect(first.originalID == "t1" && first.latestExpiryMs == 3_000)
        try await ledger.write { _ = try $0.revoke(transactionID: "t1", reason: "refund", nowMs: 4_000) }
        let none = try await history()
        #expect(none.originalID == nil && none.latestExpiryMs == 0)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func revokingASpentConsumableRecordsTheShortfall(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { repositories in
            try repositories.insertTransaction(contractTransaction("t1", paymentID: "p1", credits: 10))
            try repositories.addCredits(-4, account: "a1", transaction: nil, reason: "spend", nowMs: 2_000)
        }
        let before = try await ledger.latestEventID()
        let revocation = try await ledger.write { try $0.revoke(transactionID: "t1", reason: "asked", nowMs: 9_000) }
        #expect(revocation.cursor > 0)
        #expect(
            [revocation.transactionID, revocation.originalTransactionID, revocation.accountID, revocation.reason] == [
                "t1", "t1", "a1", "asked",
            ])
        #expect(revocation.revokedMs == 9_000 && revocation.creditShortfall == 4)
        let (feed, latest) = try await ledger.write { repositories in
            (try repositories.revocations(after: 0, limit: 10), try repositories.latestRevocationCursor())
        }
        #expect(feed == [revocation] && latest == revocation.cursor)
        #expect(try await ledger.write { try $0.revocations(after: revocation.cursor, limit: 10) }.isEmpty)
        let revoked = try #require(try await ledger.transaction("t1"))
        #expect(revoked.revokedMs == 9_000 && revoked.revocationReason == "asked" && revoked.refundCreditShortfall == 4)
        #expect(try await ledger.balance("a1") == 0)
        let events = try await ledger.events(after: before)
        #expect(events.map(\.type) == [.refunded])
        #expect(
            events.first?.reason == "asked" && events.first?.creditShortfall == 4 && events.first?.createdMs == 9_000)
        let again = await #expect(throws: StoreError.self) {
            try await ledger.write { try $0.revoke(transactionID: "t1", reason: "again", nowMs: 9_500) }
        }
        #expect(again?.kind == .conflict)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func revokeRefusesWhatIsNotAPurchaseEndsTheSubscriptionAndAdvancesTheFeed(
        _ backend: RepositoryContractBackend
    ) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { repositories in
            try repositories.insertTransaction(contractTransaction("t1", state: .deferred))
            try repositories.insertTransaction(
                contractTransaction(
                    "t2", product: "sub.monthly", type: .autoRenewableSubscription, expiresMs: 10_000, paymentID: "p2"))
            try repositories.insertTransaction(
                contractTransaction("t3", product: "premium", type: .nonConsumable, paymentID: "p3"))
            try repositories.saveSubscription(contractSubscription("t2", expiresMs: 10_000), nowMs: 1_000)
        }
        for id in ["t1", "unknown"] {
            let refused = await #expect(throws: StoreError.self) {
                try await ledger.write { try $0.revoke(transactionID: id, reason: "refund", nowMs: 2_000) }
            }
            #expect(refused?.kind == .conflict)
        }
        let first = try await ledger.write { try $0.revoke(transactionID: "t2", reason: "refund", nowMs: 2_000) }
        let second = try await ledger.write { try $0.revoke(transactionID: "t3", reason: "refund", nowMs: 3_000) }
        #expect(first.cursor > 0 && second.cursor > first.cursor)
        let ended = try await ledger.subscription("t2")
        #expect(ended?.state == .revoked && ended?.dueMs == 0 && ended?.willAutoRenew == false)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func markFinishedFinishesTheTransaction(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { try $0.insertTransaction(contractTransaction("t1", paymentID: "p1")) }
        #expect(try await ledger.transaction("t1")?.finished == false)
        try await ledger.write { try $0.markFinished(transactionID: "t1") }
        #expect(try await ledger.transaction("t1")?.finished == true)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func failDeferredFailsTheAskWithItsErrorAndRecordsNothing(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { try $0.insertTransaction(contractTransaction("t1", state: .deferred)) }
        let before = try await ledger.latestEventID()
        try await ledger.write {
            try $0.failDeferred(
                transactionID: "t1", code: 2, reason: "declined", message: "the ask-to-buy request was declined")
        }
        let failed = try #require(try await ledger.transaction("t1"))
        #expect(failed.state == .failed && failed.errorCode == 2)
        #expect(failed.errorReason == "declined" && failed.errorMessage == "the ask-to-buy request was declined")
        #expect(try await ledger.latestEventID() == before)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func deferredListsOldAsksOldestFirst(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.createAccount("a2")
        try await ledger.write { repositories in
            try repositories.insertTransaction(contractTransaction("t1", state: .deferred, purchaseMs: 1_000))
            try repositories.insertTransaction(
                contractTransaction("t2", account: "a2", state: .deferred, purchaseMs: 3_000))
            try repositories.insertTransaction(
                contractTransaction("t3", account: "a2", state: .deferred, purchaseMs: 2_000))
            try repositories.insertTransaction(contractTransaction("t4", state: .failed, purchaseMs: 500))
            try repositories.insertTransaction(contractTransaction("t5", purchaseMs: 100, paymentID: "p5"))
        }
        let (due, oldest, none) = try await ledger.write { repositories in
            (
                try repositories.deferred(before: 2_500, limit: 10).map { "\($0.id)/\($0.accountID)" },
                try repositories.deferred(before: 2_500, limit: 1).map { "\($0.id)/\($0.accountID)" },
                try repositories.deferred(before: 1_000, limit: 10).map { "\($0.id)/\($0.accountID)" }
            )
        }
        #expect(due == ["t1/a1", "t3/a2"])
        #expect(oldest == ["t1/a1"])
        #expect(none.isEmpty)
    }

    // MARK: Accounts

    @Test(arguments: RepositoryContractBackend.allCases)
    func creditsNeverGoBelowZero(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1", credits: 3)
        await #expect(throws: (any Error).self) {
            try await ledger.write {
                try $0.addCredits(-5, account: "a1", transaction: nil, reason: "spend", nowMs: 1_000)
            }
        }
        #expect(try await ledger.balance("a1") == 3)
        try await ledger.write { try $0.addCredits(-3, account: "a1", transaction: nil, reason: "spend", nowMs: 1_000) }
        #expect(try await ledger.balance("a1") == 0)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func anIdempotencyKeyAnswersItsOwnRequestOnly(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let (noKey, unused) = try await ledger.write { repositories in
            (
                try repositories.remembered(account: "a1", key: nil, operation: "buy", hash: [1]),
                try repositories.remembered(account: "a1", key: "k", operation: "buy", hash: [1])
            )
        }
        #expect(noKey == nil && unused == nil)
        try await ledger.write {
            try $0.remember([7], account: "a1", key: "k", operation: "buy", hash: [1], nowMs: 1_000)
        }
        // One kept already stays.
        try await ledger.write {
            try $0.remember([8], account: "a1", key: "k", operation: "buy", hash: [1], nowMs: 2_000)
        }
        let (kept, otherAccount) = try await ledger.write { repositories in
            (
                try repositories.remembered(account: "a1", key: "k", operation: "buy", hash: [1]),
                try repositories.remembered(account: "a2", key: "k", operation: "buy", hash: [1])
            )
        }
        #expect(kept == [7] && otherAccount == nil)
        let otherRequests: [(operation: String, hash: [UInt8])] = [("buy", [2]), ("spend", [1])]
        for (operation, hash) in otherRequests {
            let reused = await #expect(throws: StoreError.self) {
                try await ledger.write { try $0.remembered(account: "a1", key: "k", operation: operation, hash: hash) }
            }
            #expect(reused?.kind == .keyReused)
        }
        try await ledger.write {
            try $0.remember([9], account: "a1", key: "k", operation: "spend", hash: [3], nowMs: 3_000, replacing: true)
        }
        let replaced = try await ledger.write {
            try $0.remembered(account: "a1", key: "k", operation: "spend", hash: [3])
        }
        #expect(replaced == [9])
    }

    // MARK: Payment intents

    @Test(arguments: RepositoryContractBackend.allCases)
    func oneExclusiveIntentIsPendingAtATime(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let first = contractIntent("p1")
        try await ledger.write { try $0.insertIntent(first, nowMs: 1_000) }
        #expect(try await ledger.intent("purchase:p1") == first)
        let busy = await #expect(throws: StoreError.self) {
            try await ledger.write { try $0.insertIntent(contractIntent("p2"), nowMs: 1_100) }
        }
        #expect(busy?.kind == .inProgress)
        // Consumables are bought any number of times: their intents may be pending together.
        try await ledger.write { repositories in
            try repositories.insertIntent(contractIntent("p3", product: "credits.10", type: .consumable), nowMs: 1_200)
            try repositories.insertIntent(contractIntent("p4", product: "credits.10", type: .consumable), nowMs: 1_300)
        }
        let (pending, credits) = try await ledger.write { repositories in
            (
                try repositories.pendingIntentIDs(accountID: "a1", productIDs: ["premium", "credits.10"]),
                try repositories.pendingIntentIDs(accountID: "a1", productIDs: ["credits.10"])
            )
        }
        #expect(Set(pending) == ["purchase:p1", "purchase:p3", "purchase:p4"])
        #expect(Set(credits) == ["purchase:p3", "purchase:p4"])
        try await ledger.write {
            try $0.settle("purchase:p1", .closed, outcome: "declined:card_declined", nowMs: 2_000)
        }
        let settled = try #require(try await ledger.intent("purchase:p1"))
        #expect(settled.state == .closed && settled.outcome == "declined:card_declined" && settled.attemptMs == 2_000)
        // Settled, it no longer holds the product: the next payment may start.
        try await ledger.write { try $0.insertIntent(contractIntent("p2"), nowMs: 2_100) }
        let now = try await ledger.write { try $0.pendingIntentIDs(accountID: "a1", productIDs: ["premium"]) }
        #expect(now == ["purchase:p2"])
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func aReopenedIntentIsSettledOnlyByItsOwnAttempt(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { repositories in
            try repositories.insertIntent(contractIntent("p1"), nowMs: 1_000)
            try repositories.settle("purchase:p1", .closed, outcome: "declined", nowMs: 1_500)
            try repositories.insertIntent(contractIntent("p2"), nowMs: 1_600)
        }
        let closed = try #require(try await ledger.intent("purchase:p1"))
        // p2 is pending for the same product: p1 cannot be pending beside it.
        let busy = await #expect(throws: StoreError.self) {
            try await ledger.write { try $0.reopen(closed, owner: "o2", nowMs: 2_000) }
        }
        #expect(busy?.kind == .inProgress)
        try await ledger.write { try $0.settle("purchase:p2", .completed, outcome: "charged", nowMs: 2_100) }
        let reopened = try await ledger.write { try $0.reopen(closed, owner: "o2", nowMs: 3_000) }
        #expect(reopened.state == .pending && reopened.owner == "o2" && reopened.attemptMs == 3_000)
        let stored = try #require(try await ledger.intent("purchase:p1"))
        #expect(stored.state == .pending && stored.outcome == "" && stored.owner == "o2" && stored.attemptMs == 3_000)
        let once = try await ledger.write {
            try $0.settleIfUnchanged(reopened, .completed, outcome: "charged", nowMs: 4_000)
        }
        let twice = try await ledger.write {
            try $0.settleIfUnchanged(reopened, .completed, outcome: "charged", nowMs: 4_100)
        }
        #expect(once && !twice)
        // Another attempt (same owner, later) and another owner (same time) each take it over.
        let retried = try await ledger.write { try $0.reopen(reopened, owner: "o2", nowMs: 5_000) }
        let staleAttempt = try await ledger.write {
            try $0.settleIfUnchanged(reopened, .closed, outcome: "late", nowMs: 5_100)
        }
        #expect(!staleAttempt)
        _ = try await ledger.write { try $0.reopen(retried, owner: "o3", nowMs: 5_000) }
        let staleOwner = try await ledger.write {
            try $0.settleIfUnchanged(retried, .closed, outcome: "late", nowMs: 5_200)
        }
        #expect(!staleOwner)
        let current = try #require(try await ledger.intent("purchase:p1"))
        #expect(current.state == .pending && current.owner == "o3" && current.outcome == "")
    }

    // MARK: Subscriptions

    @Test(arguments: RepositoryContractBackend.allCases)
    func subscriptionsReadBackAndListLatestEndingFirst(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let monthly = changed(contractSubscription("o1", expiresMs: 5_000)) {
            $0.willAutoRenew = false
            $0.attempts = 2
            $0.pendingProductID = "sub.yearly"
            $0.offerID = "introductory"
            $0.offerPeriodsUsed = 1
            $0.acceptedPrice = "0.99"
        }
        let yearly = contractSubscription("o2", product: "sub.yearly", expiresMs: 9_000)
        let tied = contractSubscription("o0", expiresMs: 5_000)
        let elsewhere = contractSubscription("o3", product: "sub.other", expiresMs: 7_000)
        try await ledger.write { repositories in
            for subscription in [monthly, yearly, tied, elsewhere] {
                try repositories.saveSubscription(subscription, nowMs: 1_000)
            }
        }
        let (read, group, none) = try await ledger.write { repositories in
            (
                try repositories.subscription(originalID: "o1"),
                try repositories.subscriptions(accountID: "a1", productIDs: ["sub.monthly", "sub.yearly"]),
                try repositories.subscriptions(accountID: "a1", productIDs: [])
            )
        }
        #expect(read == monthly)
        #expect(group.map(\.originalID) == ["o2", "o0", "o1"])
        #expect(none.isEmpty)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func aLiveSubscriptionThatEndsRecordsExpiredOnce(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let live = contractSubscription("o1", expiresMs: 5_000)
        try await ledger.write { try $0.saveSubscription(live, nowMs: 1_000) }
        let before = try await ledger.latestEventID()
        let ended = changed(live) {
            $0.state = .expired
            $0.expirationReason = .cancelled
            $0.dueMs = 0
            $0.willAutoRenew = false
        }
        try await ledger.write { try $0.saveSubscription(ended, nowMs: 5_000) }
        // Ended already, or never live: nothing more.
        try await ledger.write { try $0.saveSubscription(ended, nowMs: 6_000) }
        let neverLive = changed(ended) { $0.originalID = "o2" }
        try await ledger.write { try $0.saveSubscription(neverLive, nowMs: 6_000) }
        let events = try await ledger.events(after: before)
        #expect(events.map(\.type) == [.expired])
        let expired = try #require(events.first)
        #expect(
            [expired.accountID, expired.transactionID, expired.originalTransactionID, expired.productID] == [
                "a1", "o1", "o1", "sub.monthly",
            ])
        #expect(expired.expirationReason == .cancelled && expired.createdMs == 5_000)
        #expect(try await ledger.subscription("o1") == ended)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func anOfferNonceIsUsedOnce(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.createAccount("a2")
        let (first, again, elsewhere) = try await ledger.write { repositories in
            (
                try repositories.useOfferNonce("n1", accountID: "a1", nowMs: 1_000),
                try repositories.useOfferNonce("n1", accountID: "a1", nowMs: 1_100),
                try repositories.useOfferNonce("n1", accountID: "a2", nowMs: 1_200)
            )
        }
        #expect(first && !again && !elsewhere)
        let later = try await ledger.write { try $0.useOfferNonce("n1", accountID: "a1", nowMs: 2_000) }
        let other = try await ledger.write { try $0.useOfferNonce("n2", accountID: "a1", nowMs: 2_000) }
        #expect(!later && other)
    }

    // MARK: Refund requests

    @Test(arguments: RepositoryContractBackend.allCases)
    func aRefundRequestIsMadeOnceAndDecidedOverTheStateItWasDecidedFrom(
        _ backend: RepositoryContractBackend
    ) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        let request = try RefundRequest.asked(
            transactionID: "t1", accountID: "a1", productID: "premium", purchased: true, refunded: false,
            reason: "it does not work", atMs: 1_000)
        try await ledger.write { try $0.insertRefundRequest(request) }
        #expect(try await ledger.refundRequest("t1") == request)
        let duplicate = await #expect(throws: StoreError.self) {
            try await ledger.write { try $0.insertRefundRequest(request) }
        }
        #expect(duplicate?.kind == .conflict)
        let denied = try changed(request) { try $0.denied(reason: "used for a month", atMs: 2_000) }
        let first = try await ledger.write { try $0.updateRefundRequest(denied, from: .pending) }
        let again = try await ledger.write { try $0.updateRefundRequest(denied, from: .pending) }
        #expect(first && !again)
        #expect(try await ledger.refundRequest("t1") == denied)
        let granted = changed(denied) { _ = $0.granted(reason: "refunded after all", atMs: 3_000) }
        let overDenied = try await ledger.write { try $0.updateRefundRequest(granted, from: .denied) }
        #expect(overDenied)
        #expect(try await ledger.refundRequest("t1") == granted)
    }

    // MARK: Signing keys

    @Test(arguments: RepositoryContractBackend.allCases)
    func signingKeysKeepTheirOrderTheirSealAndTheirRetirement(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        let first = SigningKeyRecord(id: "k1", publicKey: Array(repeating: 1, count: 32), notBeforeMs: 1_000)
        let second = SigningKeyRecord(id: "k2", publicKey: Array(repeating: 2, count: 32), notBeforeMs: 2_000)
        try await ledger.write { repositories in
            try repositories.addSigningKey(first, sealedPrivateKey: nil)
            try repositories.addSigningKey(second, sealedPrivateKey: [9, 9])
            try repositories.addSigningKey(
                SigningKeyRecord(id: "k1", publicKey: [0], notBeforeMs: 5), sealedPrivateKey: [7])  // exists: unchanged
            try repositories.sealPrivateKey(id: "k1", sealed: [1, 1])
            try repositories.sealPrivateKey(id: "k2", sealed: [8, 8])  // sealed already: kept
            try repositories.retireSigningKey(id: "k1", atMs: 3_000)
        }
        let (keys, sealedFirst, sealedSecond, none) = try await ledger.write { repositories in
            (
                try repositories.signingKeys(), try repositories.sealedPrivateKey(id: "k1"),
                try repositories.sealedPrivateKey(id: "k2"),
                try repositories.sealedPrivateKey(id: "k9")
            )
        }
        var retired = first
        retired.notAfterMs = 3_000
        #expect(keys == [retired, second])
        #expect(sealedFirst == [1, 1] && sealedSecond == [9, 9] && none == nil)
    }

    // MARK: Webhooks

    @Test(arguments: RepositoryContractBackend.allCases)
    func webhookDeliveriesQueueOnePerAccountAtATimeUnderTheLease(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        let hook = WebhookRecord(id: "wh_1", url: "https://example.com/hook", enqueuedThrough: 0, createdMs: 1_000)
        try await ledger.write { repositories in
            try repositories.insertWebhook(hook, secret: Array(repeating: 7, count: 16))
            // Events 1 and 3 of account a1, 2 of a2: a1's second waits for its first.
            for (event, account) in [(UInt64(1), "a1"), (2, "a2"), (3, "a1")] {
                try repositories.queueWebhookDelivery(
                    webhookID: "wh_1", eventID: event, accountID: account, nowMs: 2_000)
            }
            // Already queued: unchanged.
            try repositories.queueWebhookDelivery(webhookID: "wh_1", eventID: 1, accountID: "a1", nowMs: 9_999)
            try repositories.setEnqueuedThrough(webhookID: "wh_1", eventID: 3)
        }
        let (hooks, least, due, early) = try await ledger.write { repositories in
            (
                try repositories.webhooksWithSecrets(), try repositories.leastEnqueuedThrough(),
                try repositories.dueWebhookDeliveries(webhookID: "wh_1", nowMs: 2_000, limit: 8),
                try repositories.dueWebhookDeliveries(webhookID: "wh_1", nowMs: 1_999, limit: 8)
            )
        }
        #expect(hooks.map(\.webhook.enqueuedThrough) == [3] && hooks.first?.secret == Array(repeating: 7, count: 16))
        #expect(least == 3)
        #expect(due.map(\.eventID) == [1, 2] && due.allSatisfy { $0.nextAttemptMs == 2_000 && $0.attempts == 0 })
        #expect(early.isEmpty)

        // A failure is written only under the lease; a success always.
        var failed = due[0]
        failed.attempts = 1
        failed.firstAttemptMs = 2_000
        failed.nextAttemptMs = 3_000
        failed.lastError = "HTTP 503"
        var delivered = due[1]
        delivered.state = .delivered
        delivered.attempts = 1
        delivered.firstAttemptMs = 2_000
        delivered.deliveredMs = 2_100
        let (failedFailure, failedSuccess) = (failed, delivered)
        let noLease = try await ledger.write { repositories -> Bool in
            try repositories.recordWebhookAttempt(failedFailure, leaseOwner: "inst_a")
            return try repositories.webhookDeliveries(webhookID: "wh_1", state: nil, limit: 10).first {
                $0.eventID == 1
            }?.attempts == 0
        }
        #expect(noLease, "a failure without the lease is not written")
        let (leased, renewedByOther) = try await ledger.write { repositories in
            try repositories.takeWebhookLease(owner: "inst_a", untilMs: 60_000)
            try repositories.recordWebhookAttempt(failedFailure, leaseOwner: "inst_a")
            try repositories.recordWebhookAttempt(failedSuccess, leaseOwner: "inst_b")
            return (
                try repositories.webhookLease(), try repositories.renewWebhookLease(owner: "inst_b", untilMs: 90_000)
            )
        }
        #expect(leased?.owner == "inst_a" && leased?.untilMs == 60_000 && !renewedByOther)
        let (listed, pendingOnly, dueLater) = try await ledger.write { repositories in
            (
                try repositories.webhookDeliveries(webhookID: "wh_1", state: nil, limit: 10),
                try repositories.webhookDeliveries(webhookID: nil, state: .pending, limit: 10),
                try repositories.dueWebhookDeliveries(webhookID: "wh_1", nowMs: 3_000, limit: 8)
            )
        }
        #expect(listed.map(\.eventID) == [3, 2, 1], "newest first")
        #expect(
            listed.first { $0.eventID == 2 }?.state == .delivered
                && listed.first { $0.eventID == 1 }?.lastError == "HTTP 503")
        #expect(pendingOnly.map(\.eventID) == [3, 1])
        #expect(dueLater.map(\.eventID) == [1], "a1's event 3 waits behind its event 1")

        // Given up, then redriven; the lease released; the webhook removed with its deliveries.
        var givenUp = failed
        givenUp.state = .failed
        givenUp.attempts = 2
        let gaveUp = givenUp
        let (redriven, redrivenDelivery, leaseAfter, removed, removedAgain, left) = try await ledger.write {
            repositories in
            try repositories.recordWebhookAttempt(gaveUp, leaseOwner: "inst_a")
            let count = try repositories.redriveWebhookDeliveries(webhookID: "wh_1", eventID: nil, nowMs: 5_000)
            let delivery = try repositories.webhookDeliveries(webhookID: "wh_1", state: .pending, limit: 10).first {
                $0.eventID == 1
            }
            try repositories.releaseWebhookLease(owner: "inst_b")
            try repositories.releaseWebhookLease(owner: "inst_a")
            let lease = try repositories.webhookLease()
            return (
                count, delivery, lease, try repositories.removeWebhook(id: "wh_1"),
                try repositories.removeWebhook(id: "wh_1"),
                try repositories.webhookDeliveries(webhookID: nil, state: nil, limit: 10)
            )
        }
        #expect(redriven == 1 && redrivenDelivery?.attempts == 0 && redrivenDelivery?.nextAttemptMs == 5_000)
        #expect(leaseAfter == nil)
        #expect(removed && !removedAgain && left.isEmpty)
    }

    // MARK: Service credentials

    @Test(arguments: RepositoryContractBackend.allCases)
    func aServiceCredentialIsFoundByItsHashUntilRevoked(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        let content = ServiceCredentialRecord(id: "svc_1", role: .content, name: "content-1", createdMs: 1_000)
        let admin = ServiceCredentialRecord(id: "svc_2", role: .admin, name: "ops", createdMs: 2_000)
        try await ledger.write { repositories in
            try repositories.addServiceCredential(content, tokenHash: Array(repeating: 1, count: 32))
            try repositories.addServiceCredential(admin, tokenHash: Array(repeating: 2, count: 32))
        }
        await #expect(throws: StoreError.self) {
            try await ledger.write {
                try $0.addServiceCredential(
                    ServiceCredentialRecord(id: "svc_3", role: .admin, name: "again", createdMs: 3_000),
                    tokenHash: Array(repeating: 2, count: 32))
            }
        }
        let (found, listed) = try await ledger.write { repositories in
            (
                try repositories.serviceCredential(tokenHash: Array(repeating: 1, count: 32)),
                try repositories.serviceCredentials()
            )
        }
        #expect(found == content)
        #expect(listed == [content, admin], "the refused third one left nothing behind")
        let (revoked, again, unknown) = try await ledger.write { repositories in
            (
                try repositories.revokeServiceCredential(id: "svc_1", nowMs: 5_000),
                try repositories.revokeServiceCredential(id: "svc_1", nowMs: 6_000),
                try repositories.revokeServiceCredential(id: "svc_9", nowMs: 6_000)
            )
        }
        #expect(revoked && !again && !unknown)
        let (afterRevoke, revokedIDs, kept) = try await ledger.write { repositories in
            (
                try repositories.serviceCredential(tokenHash: Array(repeating: 1, count: 32)),
                try repositories.revokedServiceCredentialIDs(),
                try repositories.serviceCredentials().first
            )
        }
        #expect(afterRevoke == nil && revokedIDs == ["svc_1"] && kept?.revokedMs == 5_000)
    }

    // MARK: Events

    /// Replicas of two versions share one ledger during an upgrade: an event of a kind this version does not know
    /// is kept, read back with its number, and found by a filter naming it; it stops no reader.
    @Test(arguments: RepositoryContractBackend.allCases)
    func anEventOfAKindThisVersionDoesNotKnowIsKeptAndRead(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        let newer = EventKind(rawValue: 99)
        #expect(!newer.isKnown && newer.shortName == "EventType(99)")
        let recorded = try await ledger.write { repositories in
            try [
                repositories.recordEvent(EventRecord(type: newer, accountID: "a1", createdMs: 1_000)),
                repositories.recordEvent(EventRecord(type: .purchased, accountID: "a1", createdMs: 2_000)),
            ]
        }
        let (all, ofNewer) = try await ledger.write { repositories in
            (
                try repositories.events(after: 0, limit: 10),
                try repositories.events(after: 0, limit: 10, accountID: nil, types: [newer])
            )
        }
        #expect(all == recorded)
        #expect(ofNewer.map(\.type) == [newer])
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func eventIDsIncreaseAndReadsFilterAndLimit(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        #expect(try await ledger.latestEventID() == 0)
        let recorded = try await ledger.write { repositories in
            try [
                repositories.recordEvent(EventRecord(type: .test, accountID: "", createdMs: 1_000, reason: "wired?")),
                repositories.recordEvent(
                    EventRecord(
                        type: .purchased, accountID: "a1", transactionID: "t1", originalTransactionID: "t1",
                        productID: "premium", createdMs: 2_000)),
                repositories.recordEvent(
                    EventRecord(
                        type: .refunded, accountID: "a2", transactionID: "t2", originalTransactionID: "t2",
                        productID: "credits.10", createdMs: 3_000, reason: "asked", creditShortfall: 4)),
                repositories.recordEvent(
                    EventRecord(type: .autoRenewChanged, accountID: "a1", createdMs: 4_000, autoRenew: true)),
            ]
        }
        let later = try await ledger.write {
            try $0.recordEvent(
                EventRecord(
                    type: .expired, accountID: "a1", transactionID: "t3", createdMs: 5_000, price: "1.99",
                    expirationReason: .billingError))
        }
        let all = recorded + [later]
        let ids = all.map(\.id)
        #expect((ids.min() ?? 0) > 0 && ids == ids.sorted() && Set(ids).count == ids.count, "ids \(ids)")
        #expect(try await ledger.latestEventID() == later.id)
        let secondID = all[1].id
        let (everything, firstTwo, ofA1, expiries, a1Refunds, afterSecond) = try await ledger.write { repositories in
            (
                try repositories.events(after: 0, limit: 10),
                try repositories.events(after: 0, limit: 2),
                try repositories.events(after: 0, limit: 10, accountID: "a1", types: []),
                try repositories.events(after: 0, limit: 10, accountID: nil, types: [.expired, .refunded]),
                try repositories.events(after: 0, limit: 10, accountID: "a1", types: [.refunded, .test]),
                try repositories.events(after: secondID, limit: 10)
            )
        }
        #expect(everything == all)
        #expect(firstTwo == Array(all.prefix(2)))
        #expect(ofA1 == [all[1], all[3], all[4]])
        #expect(expiries == [all[2], all[4]])
        #expect(a1Refunds.isEmpty)
        #expect(afterSecond == Array(all.dropFirst(2)))
        let (a1First, none) = try await ledger.write { repositories in
            (
                try repositories.events(after: 0, limit: 1, accountID: "a1", types: []),
                try repositories.events(after: later.id, limit: 10)
            )
        }
        #expect(a1First == [all[1]])
        #expect(none.isEmpty)
    }

    @Test(arguments: RepositoryContractBackend.allCases)
    func reinstatingUndoesTheRevocationAndGivesBackWhatItTook(_ backend: RepositoryContractBackend) async throws {
        let ledger = try backend.make()
        try await ledger.createAccount("a1")
        try await ledger.write { repositories in
            try repositories.insertTransaction(contractTransaction("t1", paymentID: "p1", credits: 10))
            try repositories.addCredits(-4, account: "a1", transaction: nil, reason: "spend", nowMs: 2_000)
        }
        _ = try await ledger.write { try $0.revoke(transactionID: "t1", reason: "disputed: fraudulent", nowMs: 9_000) }
        let before = try await ledger.latestEventID()
        let back = try await ledger.write { try $0.reinstate(transactionID: "t1", reason: "dispute won", nowMs: 9_500) }
        #expect(back.revokedMs == 0 && back.revocationReason.isEmpty && back.refundCreditShortfall == 0)
        #expect(try await ledger.transaction("t1") == back)
        // 10 granted, 4 spent, the 6 left taken by the revocation: the 6 it took come back.
        #expect(try await ledger.balance("a1") == 6)
        #expect(try await ledger.write { try $0.revocations(after: 0, limit: 10) }.isEmpty)
        let events = try await ledger.events(after: before)
        #expect(events.map(\.type) == [.refundReversed] && events.first?.reason == "dispute won")
        let again = await #expect(throws: StoreError.self) {
            try await ledger.write { try $0.reinstate(transactionID: "t1", reason: "again", nowMs: 9_600) }
        }
        #expect(again?.kind == .conflict)

        // Disputes by id: recorded, then moved on.
        let opened = Dispute(id: "du_1", transactionID: "t1", state: .open, revokedTransaction: true, updatedMs: 1)
        try await ledger.write { try $0.saveDispute(opened) }
        let won = Dispute(id: "du_1", transactionID: "t1", state: .won, revokedTransaction: true, updatedMs: 2)
        try await ledger.write { try $0.saveDispute(won) }
        #expect(try await ledger.write { try $0.dispute(id: "du_1") } == won)
        #expect(try await ledger.write { try $0.dispute(id: "du_2") } == nil)
        // A payment disputed twice: both, by id; another transaction's are not among them.
        let second = Dispute(id: "du_0", transactionID: "t1", state: .lost, revokedTransaction: false, updatedMs: 3)
        let elsewhere = Dispute(id: "du_3", transactionID: "t2", state: .open, revokedTransaction: true, updatedMs: 4)
        try await ledger.write {
            try $0.saveDispute(second)
            try $0.saveDispute(elsewhere)
        }
        #expect(try await ledger.write { try $0.disputes(transactionID: "t1") } == [second, won])
        #expect(try await ledger.write { try $0.disputes(transactionID: "t9") } == [])
    }
}
