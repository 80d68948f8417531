import Foundation
import GRDB
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskTesting
import KioskWire
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// A store on a fresh data dir with a ``TestPaymentProcessor``, no server.
private func withStore<R>(
    processor: any PaymentProcessor = TestPaymentProcessor(), catalog: Catalog = testCatalog,
    _ body: (Store, String) async throws -> R
) async throws -> R {
    let directory = temporaryDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let store = try Store(
        configuration: StoreConfiguration(dataDirectory: directory, catalog: catalog, paymentProcessor: processor)
            .onTestLedger())
    return try await body(store, directory)
}

private func account(_ store: Store) throws -> AccountRecord {
    let (id, _) = try store.createAccount()
    return try #require(try store.ledger.account(id: id))
}

/// Asserts, on every charge, that the payment's intent is already on disk.
private final class IntentCheckingProcessor: PaymentProcessor, @unchecked Sendable {
    let inner = TestPaymentProcessor()
    let ledger = NIOLockedValueBox<Ledger?>(nil)
    let chargesWithoutIntent = NIOLockedValueBox(0)
    var name: String { "intent-checking" }
    var isSimulated: Bool { true }

    private func check(_ request: PaymentRequest, kind: PaymentIntent.Kind) {
        let intent = try? ledger.withLockedValue { $0 }?.intent(id: "\(kind.rawValue):\(request.paymentID)")
        if intent?.state != .pending { chargesWithoutIntent.withLockedValue { $0 += 1 } }
    }
    func charge(_ request: PaymentRequest) async throws -> PaymentOutcome {
        check(request, kind: .purchase)
        return try await inner.charge(request)
    }
    func approve(_ request: PaymentRequest) async throws -> PaymentOutcome {
        check(request, kind: .approval)
        return try await inner.approve(request)
    }
    func lookup(_ request: PaymentRequest) async throws -> PaymentLookup { try await inner.lookup(request) }
    func refund(_ request: PaymentRequest, reason: String) async throws {
        try await inner.refund(request, reason: reason)
    }
}

@Suite struct DurabilityTests {
    @Test(.enabled(if: !TestLedger.isPostgres, "SQLite's pragmas"))
    func everyConnectionOfThePoolRunsWithSynchronousFull() async throws {
        try await withStore { store, _ in
            let modes = try store.ledger.synchronousModes()
            #expect(modes.writer == 2, "the writer must fsync the WAL at every commit (2 = FULL), got \(modes.writer)")
            #expect(modes.reader == 2, "readers: 2 = FULL, got \(modes.reader)")
            let journal = try #require(store.ledger.pool).read { db in
                try String.fetchOne(db, sql: "PRAGMA journal_mode")
            }
            #expect(journal == "wal")
        }
    }

    @Test(.enabled(if: TestLedger.isPostgres, "PostgreSQL's settings"))
    func postgresCommitsWaitForTheFlushedWAL() async throws {
        try await withStore { store, _ in
            let (synchronousCommit, fsync) = try store.ledger.backend.read { db in
                (try db.value(String.self, "SHOW synchronous_commit"), try db.value(String.self, "SHOW fsync"))
            }
            #expect(synchronousCommit == "on", "a commit must wait for its WAL to be flushed")
            #expect(fsync == "on")
        }
    }
}

@Suite struct GroupCommitTests {
    /// On PostgreSQL every write is its own transaction (PostgreSQL groups the WAL flushes itself): only the rollback part holds.
    @Test func concurrentWritesShareCommitsAndAFailingOneRollsBackAlone() async throws {
        try await withStore { store, _ in
            let (id, _) = try store.createAccount()
            let results = await withTaskGroup(of: Bool.self) { group -> [Bool] in
                for index in 0..<64 {
                    group.addTask {
                        do {
                            // Named by account, as every write about an account's credits is: on PostgreSQL they queue on
                            // its lock instead of colliding (64 unnamed writes on one row could exhaust the 20 retries).
                            try await store.ledger.write(account: id) { db in
                                try db.addCredits(1, account: id, transaction: nil, reason: "test \(index)", nowMs: 0)
                                // Every 8th write fails after changing the balance: its savepoint must take the change back.
                                if index % 8 == 7 { throw StoreError(.conflict, "write \(index) fails on purpose") }
                            }
                            return true
                        } catch {
                            return false
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.filter { $0 }.count == 56)
            #expect(try store.ledger.account(id: id)?.creditBalance == 56, "the 8 failed writes left nothing behind")
            #expect(try store.ledger.creditMovementsTotal(accountID: id) == 56)
            let (commits, writes) = store.ledger.commitStatistics
            if !TestLedger.isPostgres {
                #expect(writes == 64)
                #expect(
                    commits < writes, "writes that arrived during a commit were committed together (\(commits) commits)"
                )
            }
        }
    }
}

@Suite struct PaymentIntentTests {
    @Test func everyChargeAndApprovalHasAPendingIntentOnDiskFirst() async throws {
        let processor = IntentCheckingProcessor()
        try await withStore(processor: processor) { store, _ in
            processor.ledger.withLockedValue { $0 = store.ledger }
            let buyer = try account(store)
            for product in ["credits.5", "filter.sepia", "pro.monthly"] {
                let response = try await store.purchase(
                    account: buyer, productID: product, quantity: 1, paymentMethod: goodCard, idempotencyKey: product)
                #expect(response.isPurchased)
            }
            let asked = try await store.purchase(
                account: buyer, productID: "credits.10", quantity: 1, paymentMethod: "test-ask", idempotencyKey: "ask")
            _ = try await store.approve(transactionID: try #require(asked.record).id)
            #expect(processor.chargesWithoutIntent.withLockedValue { $0 } == 0)
            #expect(processor.inner.chargeCount == 4)
            let counts = try store.ledger.intentCounts()
            #expect(counts[.pending] == nil, "every intent settled: \(counts)")
            #expect(
                counts[.completed] == 5,
                "four purchases and one approval (the deferred purchase completed as deferred): \(counts)")
        }
    }

    @Test func aChargeWhoseAnswerWasLostIsRecordedByReconciliationAndTheRetryGetsIt() async throws {
        let processor = TestPaymentProcessor()
        try await withStore(processor: processor) { store, _ in
            let buyer = try account(store)
            processor.overrideNextPayment(.chargeThenLoseAnswer)
            let error = await #expect(throws: StoreError.self) {
                try await store.purchase(
                    account: buyer, productID: "credits.5", quantity: 2, paymentMethod: goodCard, idempotencyKey: "k1")
            }
            #expect(error?.code == .unavailable)
            #expect(processor.chargeCount == 1, "the money was taken")
            #expect(try store.ledger.transactions(accountID: buyer.id).isEmpty, "but nothing was recorded yet")
            #expect(try store.ledger.intentCounts()[.pending] == 1, "the intent says a charge was attempted")
            // The store's own recent intent is left alone (its charge may be in flight) …
            #expect(try await store.reconcile().left == 1)
            // … and settled once due.
            let report = try await store.reconcile(all: true)
            #expect(report.charged == 1)
            let recorded = try store.ledger.transactions(accountID: buyer.id)
            #expect(recorded.count == 1)
            #expect(recorded.first?.finished == false, "delivered as unfinished")
            #expect(try store.ledger.account(id: buyer.id)?.creditBalance == 10)
            let retry = try await store.purchase(
                account: buyer, productID: "credits.5", quantity: 2, paymentMethod: goodCard, idempotencyKey: "k1")
            #expect(retry.replayed)
            #expect(retry.transactionID == recorded.first?.id)
            #expect(processor.chargeCount == 1)
            #expect(try store.ledger.intentCounts()[.pending] == nil)
        }
    }

    @Test func anUnreachableProcessorLeavesAnIntentThatIsClosedUnchargedAndTheRetryPaysOnce() async throws {
        let processor = TestPaymentProcessor()
        try await withStore(processor: processor) { store, _ in
            let buyer = try account(store)
            processor.overrideNextPayment(.unreachable)
            await #expect(throws: StoreError.self) {
                try await store.purchase(
                    account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard,
                    idempotencyKey: "k2")
            }
            // While its intent is open, another purchase of the same owned-once product is refused by the database.
            let racing = await #expect(throws: StoreError.self) {
                try await store.purchase(
                    account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard,
                    idempotencyKey: "other")
            }
            #expect(racing?.code == .aborted)
            #expect(try await store.reconcile(all: true).closed == 1)
            #expect(processor.chargeCount == 0)
            let retry = try await store.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k2")
            #expect(retry.isPurchased)
            #expect(processor.chargeCount == 1)
            let again = try await store.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard, idempotencyKey: "other"
            )
            #expect(again.alreadyOwned)
            #expect(processor.chargeCount == 1)
        }
    }

    @Test func aDeadProcessesIntentIsReconciledAtOnceALiveOnesIsNot() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let processor = TestPaymentProcessor()
        let configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: testCatalog, paymentProcessor: processor
        ).onTestLedger()
        var first: Store? = try Store(configuration: configuration)
        let second = try Store(configuration: configuration)
        let buyer = try account(second)
        processor.overrideNextPayment(.chargeThenLoseAnswer)
        await #expect(throws: StoreError.self) {
            try await first!.purchase(
                account: buyer, productID: "credits.10", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k3")
        }
        #expect(try await second.reconcile().left == 1, "its writer is alive: its charge may still be in flight")
        let firstInstance = try #require(first?.instance.id)
        first = nil  // the instance's lock is released, as when its process dies
        #expect(first == nil)
        // The purchase's task may let go of the store's last reference a moment after the call returned, on
        // another thread: wait (bounded, no sleep) until its lock is free, as it is once a process has died.
        let deadline = ContinuousClock.now + .seconds(10)
        while second.instance.isAlive(firstInstance), ContinuousClock.now < deadline { await Task.yield() }
        let report = try await second.reconcile()
        #expect(report.charged == 1)
        #expect(try second.ledger.account(id: buyer.id)?.creditBalance == 10)
    }
}

/// A processor whose lookup can lag behind its charges, as Stripe's search index does.
private final class LaggingLookupProcessor: PaymentProcessor {
    let inner = TestPaymentProcessor()
    let lagging = NIOLockedValueBox(false)
    var name: String { "lagging" }
    var isSimulated: Bool { true }
    func charge(_ request: PaymentRequest) async throws -> PaymentOutcome { try await inner.charge(request) }
    func approve(_ request: PaymentRequest) async throws -> PaymentOutcome { try await inner.approve(request) }
    func lookup(_ request: PaymentRequest) async throws -> PaymentLookup {
        lagging.withLockedValue { $0 } ? .notCharged : try await inner.lookup(request)
    }
    func refund(_ request: PaymentRequest, reason: String) async throws {
        try await inner.refund(request, reason: reason)
    }
}

/// Holds the first charge until released.
private final class HeldChargeProcessor: PaymentProcessor {
    let inner = TestPaymentProcessor()
    private let held = NIOLockedValueBox<
        (
            started: Bool, waiting: CheckedContinuation<Void, Never>?, released: Bool,
            release: CheckedContinuation<Void, Never>?
        )
    >((false, nil, false, nil))
    var name: String { "held" }
    var isSimulated: Bool { true }

    func waitUntilHeld() async {
        await withCheckedContinuation { continuation in
            let started = held.withLockedValue { state -> Bool in
                if state.started { return true }
                state.waiting = continuation
                return false
            }
            if started { continuation.resume() }
        }
    }

    func release() {
        let waiter = held.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            state.released = true
            defer { state.release = nil }
            return state.release
        }
        waiter?.resume()
    }

    func charge(_ request: PaymentRequest) async throws -> PaymentOutcome {
        let first = held.withLockedValue { state -> Bool in
            defer { state.started = true }
            return !state.started
        }
        if first {
            await withCheckedContinuation { continuation in
                let (waiter, released) = held.withLockedValue { state -> (CheckedContinuation<Void, Never>?, Bool) in
                    state.release = state.released ? nil : continuation
                    defer { state.waiting = nil }
                    return (state.waiting, state.released)
                }
                waiter?.resume()
                if released { continuation.resume() }
            }
        }
        return try await inner.charge(request)
    }
    func approve(_ request: PaymentRequest) async throws -> PaymentOutcome { try await inner.approve(request) }
    func lookup(_ request: PaymentRequest) async throws -> PaymentLookup { try await inner.lookup(request) }
    func refund(_ request: PaymentRequest, reason: String) async throws {
        try await inner.refund(request, reason: reason)
    }
}

@Suite struct PaymentRetryTests {
    @Test func aKeyReusedForAnotherPurchaseWhilePendingIsRefusedAndSpendCannotTakeIt() async throws {
        let processor = TestPaymentProcessor()
        try await withStore(processor: processor) { store, _ in
            let buyer = try account(store)
            processor.overrideNextPayment(.unreachable)
            await #expect(throws: StoreError.self) {
                try await store.purchase(
                    account: buyer, productID: "credits.5", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k")
            }
            let other = await #expect(throws: StoreError.self) {
                try await store.purchase(
                    account: buyer, productID: "credits.10", quantity: 3, paymentMethod: goodCard, idempotencyKey: "k")
            }
            #expect(other?.kind == .keyReused)
            let spend = await #expect(throws: StoreError.self) {
                try await store.spendCredits(account: buyer, amount: 1, idempotencyKey: "k")
            }
            #expect(spend?.kind == .keyReused)
            #expect(processor.chargeCount == 0)
        }
    }

    @Test func aPendingPaymentIsNeverAnsweredFailedBecausePaymentsWereDisabledMeanwhile() async throws {
        let processor = TestPaymentProcessor()
        try await withStore(processor: processor) { store, _ in
            let buyer = try account(store)
            processor.overrideNextPayment(.chargeThenLoseAnswer)
            await #expect(throws: StoreError.self) {
                try await store.purchase(
                    account: buyer, productID: "credits.5", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k")
            }
            try store.setPaymentsAllowed(accountID: buyer.id, false)
            let retry = try await store.purchase(
                account: buyer, productID: "credits.5", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k")
            #expect(retry.isPurchased, "it was charged: the retry records it, whatever changed since")
            #expect(processor.chargeCount == 1)
        }
    }

    @Test func aChargeForSomethingOwnedMeanwhileIsRefundedNotDropped() async throws {
        // Two store processes on one data dir (two Store instances: separate locks and instance ids).
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let processor = HeldChargeProcessor()
        let configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: testCatalog, paymentProcessor: processor
        ).onTestLedger()
        let first = try Store(configuration: configuration)
        let second = try Store(configuration: configuration)
        let buyer = try account(first)
        // The first process's charge hangs at the processor …
        let hung = Task {
            try await first.purchase(
                account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard, idempotencyKey: "a")
        }
        await processor.waitUntilHeld()
        // … the second settles it as uncharged (an operator's `reconcile --all`; the processor has not charged yet),
        #expect(try await second.reconcile(all: true).closed == 1)
        // the buyer buys again, and is charged,
        let again = try await second.purchase(
            account: buyer, productID: "filter.sepia", quantity: 1, paymentMethod: goodCard, idempotencyKey: "b")
        #expect(again.isPurchased && !again.alreadyOwned)
        // then the hung charge goes through. It is refunded, never dropped, and the ledger says so.
        processor.release()
        let late = try await hung.value
        #expect(late.alreadyOwned)
        #expect(processor.inner.chargeCount == 2)
        #expect(processor.inner.refundCount == 1)
        let intent = try #require(try first.ledger.intent(id: "purchase:" + Store.hash("\(buyer.id)\u{0}a").hexString))
        #expect(intent.outcome == "refunded_duplicate")
        #expect(try first.ledger.transactions(accountID: buyer.id).filter { $0.productID == "filter.sepia" }.count == 1)
    }

    @Test func aChargeTheLookupMissedIsRecordedAtTheSecondLook() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let processor = LaggingLookupProcessor()
        let clock = TestClock()
        let store = try Store(
            configuration: StoreConfiguration(
                dataDirectory: directory, catalog: testCatalog, paymentProcessor: processor,
                clock: clock
            ).onTestLedger())
        let buyer = try account(store)
        processor.inner.overrideNextPayment(.chargeThenLoseAnswer)
        await #expect(throws: StoreError.self) {
            try await store.purchase(
                account: buyer, productID: "credits.5", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k")
        }
        // The processor's index lags: the charged payment is taken for uncharged and closed.
        processor.lagging.withLockedValue { $0 = true }
        #expect(try await store.reconcile(all: true).closed == 1)
        processor.lagging.withLockedValue { $0 = false }
        #expect(try await store.reconcile(all: true).charged == 0, "not looked at again before the second-look delay")
        clock.advance(byMs: Store.secondLookDelayMs + 1)
        #expect(try await store.reconcile(all: true).charged == 1)
        #expect(try store.ledger.account(id: buyer.id)?.creditBalance == 5)
        let retry = try await store.purchase(
            account: buyer, productID: "credits.5", quantity: 1, paymentMethod: goodCard, idempotencyKey: "k")
        #expect(retry.replayed && retry.isPurchased)
        #expect(processor.inner.chargeCount == 1)
    }

    @Test func anApprovedTransactionKeepsItsPlaceInTheHistory() async throws {
        try await withStore { store, _ in
            let buyer = try account(store)
            let first = try await store.purchase(
                account: buyer, productID: "credits.5", quantity: 1, paymentMethod: goodCard, idempotencyKey: "1")
            let asked = try await store.purchase(
                account: buyer, productID: "credits.10", quantity: 1, paymentMethod: "test-ask", idempotencyKey: "2")
            let third = try await store.purchase(
                account: buyer, productID: "credits.5", quantity: 1, paymentMethod: goodCard, idempotencyKey: "3")
            _ = try await store.approve(transactionID: asked.transactionID)
            let page = try await store.ledger.page(.history, accountID: buyer.id, pageSize: 10, pageToken: "")
            #expect(page.transactions.map(\.id) == [first.transactionID, asked.transactionID, third.transactionID])
            #expect(page.transactions[1].state == .purchased)
            #expect(try store.ledger.account(id: buyer.id)?.creditBalance == 20)
        }
    }
}

@Suite struct RefundShortfallTests {
    @Test func refundOfSpentCreditsTakesWhatIsLeftAndRecordsTheShortfall() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            // 10 credits.
            let bought = try #require(try await fixture.buy("credits.5", quantity: 2, token: token).transaction)
            _ = try await fixture.call(
                "SpendCredits", StoreV1.SpendCreditsRequest(amount: 7), as: StoreV1.SpendCreditsResponse.self,
                token: token)
            var metadata = Metadata()
            metadata.add(
                "authorization",
                "Bearer \(try fixture.store.createServiceCredential(role: .content, name: "feed").secret)")
            let feed = fixture.client.serverStreaming(
                "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(),
                response: StoreV1.Revocation.self,
                options: CallOptions(timeout: .seconds(20), metadata: metadata))
            var iterator = feed.makeAsyncIterator()
            let revocation = try await fixture.store.refund(transactionID: bought.transactionID, reason: "chargeback")
            #expect(revocation.creditShortfall == 7, "10 credits bought, 7 spent: 3 taken back, 7 short")
            #expect(try await fixture.balance(token) == 0)
            let record = try #require(try fixture.store.ledger.transaction(id: bought.transactionID))
            #expect(record.refundCreditShortfall == 7)
            #expect(
                try fixture.store.ledger.creditMovementsTotal(accountID: record.accountID) == 0, "movements: +10 −7 −3")
            let delivered = try #require(try await nextRevocation(&iterator))
            #expect(delivered.transactionID == bought.transactionID)
            #expect(delivered.creditShortfall == 7)
            #expect(delivered.accountID == record.accountID)
            let history = try await fixture.call(
                "History", StoreV1.HistoryRequest(), as: StoreV1.HistoryResponse.self, token: token)
            #expect(history.transactions.first?.refundCreditShortfall == 7)
            #expect(history.transactions.first?.revocationReason == "chargeback")
        }
    }
}

@Suite(.timeLimit(.minutes(3))) struct PagingTests {
    static let count = 20_000

    /// Writes `count` transactions straight into the ledger in one write (20,000 purchases would be 20,000 fsyncs).
    static func seed(_ store: Store, account: String, count: Int) async throws -> [String] {
        let product = try #require(testCatalog.product("credits.5"))
        let ids = (0..<count).map { String(format: "tx_seed_%06d", $0) }
        try await store.ledger.write { db in
            for (index, id) in ids.enumerated() {
                var record = TransactionRecord(
                    id: id, originalID: id, accountID: account, product: product, quantity: 1, state: .purchased,
                    purchaseMs: 1_800_000_000_000 + Int64(index),
                    expiresMs: 0, paymentMethod: goodCard, paymentID: "pay_" + id, environment: .sandbox)
                // Restorable every 4th (a product id of its own, so ownership stays one per product).
                if index % 4 == 0 {
                    record.productType = .nonConsumable
                    record.productID = "feature.\(index)"
                }
                record.receipt = Array(repeating: 0xA5, count: 180)  // the size of a real signed receipt
                try record.insert(db)
            }
        }
        return ids
    }

    @Test func twentyThousandTransactionsPageThroughUnfinishedHistoryAndRestore() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let account = try #require(try await fixture.store.ledger.account(tokenHash: Store.hash(token)))
            let ids = try await Self.seed(fixture.store, account: account.id, count: Self.count)

            // Unfinished: 500 a page, 40 pages, every id once, in the order recorded.
            var seen: [String] = []
            var pageToken = ""
            var pages = 0
            repeat {
                let page = try await fixture.call(
                    "Unfinished", StoreV1.UnfinishedRequest(pageSize: 500, pageToken: pageToken),
                    as: StoreV1.UnfinishedResponse.self, token: token)
                #expect(page.transactions.count <= 500)
                seen += page.transactions.map(\.transactionID)
                pageToken = page.hasMore ? page.nextPageToken : ""
                pages += 1
            } while !pageToken.isEmpty
            #expect(pages == 40)
            #expect(seen == ids)

            // The default page is 100; more than 500 is cut to 500.
            let first = try await fixture.call(
                "Unfinished", StoreV1.UnfinishedRequest(), as: StoreV1.UnfinishedResponse.self, token: token)
            #expect(first.transactions.count == 100 && first.hasMore)
            let big = try await fixture.call(
                "History", StoreV1.HistoryRequest(pageSize: 100_000), as: StoreV1.HistoryResponse.self, token: token)
            #expect(big.transactions.count == 500 && big.hasMore)
            let bad = await #expect(throws: RPCError.self) {
                try await fixture.call(
                    "History", StoreV1.HistoryRequest(pageToken: "garbage"), as: StoreV1.HistoryResponse.self,
                    token: token)
            }
            #expect(bad?.code == .invalidArgument)

            // Restore streams all 5,000 restorable ones, read a page at a time; a page size and token resume it.
            let restored = try await fixture.restore(token: token)
            #expect(restored.count == Self.count / 4)
            #expect(restored.map(\.transactionID) == stride(from: 0, to: Self.count, by: 4).map { ids[$0] })

            // Finishing shrinks Unfinished from the front; the next page starts where the last ended.
            for id in ids.prefix(250) {
                _ = try await fixture.call(
                    "Finish", StoreV1.FinishRequest(transactionID: id), as: StoreV1.FinishResponse.self, token: token)
            }
            let after = try await fixture.call(
                "Unfinished", StoreV1.UnfinishedRequest(pageSize: 10), as: StoreV1.UnfinishedResponse.self, token: token
            )
            #expect(after.transactions.first?.transactionID == ids[250])
        }
    }

    @Test(.enabled(if: !TestLedger.isPostgres, "SQLite's query plans"))
    func pageQueriesReadAnIndexNotTheAccountsHistory() async throws {
        try await withStore { store, _ in
            let plans = try await #require(store.ledger.pool).read { db -> [String] in
                ["state = 1 AND finished = 0", "state = 1 AND revoked_ms = 0 AND product_type != 1", "1 = 1"].map {
                    filter in
                    let rows =
                        (try? Row.fetchAll(
                            db,
                            sql:
                                "EXPLAIN QUERY PLAN SELECT rowid, * FROM transactions WHERE account_id = 'a' AND \(filter) AND rowid > 0 ORDER BY rowid LIMIT 10"
                        )) ?? []
                    return rows.map { $0["detail"] as String }.joined(separator: "; ")
                }
            }
            for plan in plans {
                #expect(plan.contains("USING INDEX"), "\(plan)")
                #expect(!plan.contains("TEMP B-TREE"), "no sort: \(plan)")
            }
        }
    }
}
