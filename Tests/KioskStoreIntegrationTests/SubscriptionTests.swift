import Crypto
import Foundation
import KioskAPI
import KioskSigning
import KioskStoreTestSupport
import KioskTesting
import Testing

@testable import KioskStore

/// Auto-renewable subscriptions on a driven clock: renewals, grace, billing retry, expiry, auto-renew.
/// No server and no timer: each test moves the clock and runs the renewal engine itself.
@Suite struct SubscriptionTests {
    static let day: Int64 = 86_400_000

    static let offerKey = Curve25519.Signing.PrivateKey()

    static let catalog = Catalog(
        bundleID: "com.example.monkeys",
        products: [
            CatalogProduct(
                id: "pro.monthly", type: .autoRenewableSubscription, title: "Pro", price: "4.99", currency: "USD",
                subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"), subscriptionGroup: "pro", groupLevel: 1,
                gracePeriod: SubscriptionPeriod(iso8601: "P6D"),
                billingRetryPeriod: SubscriptionPeriod(iso8601: "P30D")!),
            CatalogProduct(
                id: "basic.monthly", type: .autoRenewableSubscription, title: "Basic", price: "1.99", currency: "USD",
                subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"), subscriptionGroup: "pro", groupLevel: 2),
            CatalogProduct(
                id: "lite.monthly", type: .autoRenewableSubscription, title: "Lite", price: "1.99", currency: "USD",
                subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"),
                billingRetryPeriod: SubscriptionPeriod(iso8601: "P10D")!),
            CatalogProduct(
                id: "pass.week", type: .nonRenewingSubscription, title: "Week pass", price: "0.99", currency: "USD",
                subscriptionPeriod: SubscriptionPeriod(iso8601: "P7D")),
            {
                var product = CatalogProduct(
                    id: "plus.monthly", type: .autoRenewableSubscription, title: "Plus", price: "2.99", currency: "USD",
                    subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"))
                product.introductoryOffer = OfferTerms(
                    id: "introductory", price: "0", period: SubscriptionPeriod(iso8601: "P1W")!, periods: 1)
                product.promotionalOffers = [
                    OfferTerms(id: "winback", price: "0.99", period: SubscriptionPeriod(iso8601: "P1M")!, periods: 2)
                ]
                return product
            }(),
        ], offerKeys: ["app-key-1": Array(offerKey.publicKey.rawRepresentation)])

    struct Fixture {
        let store: Store
        let directory: String
        let clock: TestClock
        let payments: TestPaymentProcessor

        /// A second store process on the same data dir (or database), same clock and processor.
        func secondStore() throws -> Store {
            try Store(configuration: store.configuration)
        }

        func subscribe(_ productID: String = "pro.monthly") async throws -> (AccountRecord, TransactionRecord) {
            let (id, _) = try store.createAccount()
            let account = try #require(try store.ledger.account(id: id))
            let outcome = try await store.purchase(
                account: account, productID: productID, quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            guard case .purchased(let record) = outcome.result else {
                throw StoreError.invalid("not purchased: \(outcome.result)")
            }
            return (account, record)
        }

        func owns(_ account: AccountRecord, _ productID: String) throws -> Bool {
            let now = clock.now
            return try store.ledger.backend.read { db in
                try db.owned(accountID: account.id, productID: productID, kind: .autoRenewableSubscription, nowMs: now)
            } != nil
        }

        func row(_ originalID: String) throws -> SubscriptionRecord {
            try #require(try store.ledger.subscription(originalID: originalID))
        }
    }

    static func withFixture<R>(catchUp: Bool = false, _ body: (Fixture) async throws -> R) async throws -> R {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let payments = TestPaymentProcessor()
        var configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: catalog, paymentProcessor: payments, clock: clock
        ).onTestLedger()
        configuration.catchUpRenewals = catchUp
        let store = try Store(configuration: configuration)
        try store.prepareToServe()
        return try await body(Fixture(store: store, directory: directory, clock: clock, payments: payments))
    }

    @Test func onePeriodAdvancedGivesOneRenewalAndOneCharge() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            #expect(try f.row(first.id).state == .active)
            #expect(try f.row(first.id).periodsPaid == 1)
            #expect(first.periodStartMs == first.purchaseMs)

            // Nothing is due before the period ends.
            f.clock.advance(byMs: first.expiresMs - f.clock.now - 1)
            #expect(try await f.store.renewDueSubscriptions() == Store.RenewalReport())

            f.clock.advance(byMs: 1)
            let report = try await f.store.renewDueSubscriptions()
            #expect(report.renewed == 1)
            #expect(f.payments.renewalChargeCount == 1)
            let row = try f.row(first.id)
            #expect(row.state == .active && row.periodsPaid == 2)
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.id != first.id && renewal.originalID == first.id)
            #expect(renewal.periodStartMs == first.expiresMs, "the new period follows the old one")
            #expect(renewal.expiresMs == SubscriptionPeriod(iso8601: "P1M")!.end(fromMs: first.expiresMs))
            #expect(!renewal.finished, "a renewal is delivered as an unfinished transaction")
            // Its receipt is signed and carries the same original id and the period's start.
            let verdict = try await f.store.verifyReceipt(try #require(renewal.receipt))
            #expect(verdict.check.status == .valid)
            #expect(verdict.check.payload?.originalTransactionID == first.id)
            #expect(verdict.check.payload?.periodStartMs == first.expiresMs)
            let unfinished = try await f.store.ledger.page(
                .unfinished, accountID: account.id, pageSize: 10, pageToken: "")
            #expect(unfinished.transactions.map(\.id).contains(renewal.id))

            // Running again at the same instant charges nothing more.
            #expect(try await f.store.renewDueSubscriptions().renewed == 0)
            #expect(f.payments.renewalChargeCount == 1)
            // The old period's receipt: the subscription renewed, so it is good, and names the renewal as the latest.
            let old = try await f.store.verifyReceipt(try #require(first.receipt))
            #expect(old.check.status == .valid)
            #expect(old.latestTransaction?.transactionID == renewal.id)
        }
    }

    @Test func twoStoreProcessesOnOneLedgerRenewAPeriodOnce() async throws {
        try await Self.withFixture { f in
            let second = try f.secondStore()
            var originals: [String] = []
            for _ in 0..<6 { originals.append(try await f.subscribe().1.id) }
            f.clock.advance(byMs: 32 * Self.day)
            async let a = f.store.renewDueSubscriptions()
            async let b = second.renewDueSubscriptions()
            let (reportA, reportB) = try await (a, b)
            #expect(reportA.renewed + reportB.renewed == 6)
            #expect(f.payments.renewalChargeCount == 6, "one charge per subscription and period")
            #expect(f.payments.charges.values.allSatisfy { $0 == 1 })
            for original in originals {
                let row = try f.row(original)
                #expect(row.periodsPaid == 2 && row.state == .active)
                let transactions = try f.store.ledger.transactions(accountID: row.accountID)
                #expect(transactions.count == 2)
            }
        }
    }

    @Test func aLateRenewalStartsNowAndNeverBillsPastPeriods() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            f.clock.advance(byMs: 95 * Self.day)  // the store was down for three period ends
            #expect(!(try f.owns(account, "pro.monthly")), "not entitled while nothing renewed it")
            let report = try await f.store.renewDueSubscriptions()
            #expect(report.renewed == 1)
            #expect(f.payments.renewalChargeCount == 1, "one charge, not one per missed period")
            let row = try f.row(first.id)
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.periodStartMs == f.clock.now && row.periodsPaid == 2)
            #expect(try f.owns(account, "pro.monthly"))
        }
    }

    @Test func aClockFarAheadRenewsEachPeriodInTurnWhenCatchingUp() async throws {
        try await Self.withFixture(catchUp: true) { f in
            let (_, first) = try await f.subscribe()
            f.clock.advance(byMs: 95 * Self.day)  // three period ends (about 31, 61, 92 days)
            let report = try await f.store.renewDueSubscriptions()
            #expect(report.renewed == 3)
            let row = try f.row(first.id)
            #expect(row.periodsPaid == 4 && row.expiresMs > f.clock.now)
        }
    }

    @Test func aFailedRenewalGoesThroughGraceAndBillingRetryAndRecovers() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            f.payments.failNextRenewals(Int.max)
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().failed == 1)
            var row = try f.row(first.id)
            #expect(row.state == .inGracePeriod)
            #expect(row.graceEndMs == SubscriptionPeriod(iso8601: "P6D")!.end(fromMs: first.expiresMs))
            // In grace the buyer keeps the product: owned, and the receipt verifies.
            #expect(try f.owns(account, "pro.monthly"))
            #expect(try await f.store.verifyReceipt(try #require(first.receipt)).check.status == .valid)

            // Retries keep failing; past the grace period it is billing retry: no entitlement.
            f.clock.advance(byMs: 7 * Self.day)
            _ = try await f.store.renewDueSubscriptions()
            row = try f.row(first.id)
            #expect(row.state == .inBillingRetry)
            #expect(row.attempts == 2, "one attempt at the period end, one when the grace period was over")
            #expect(!(try f.owns(account, "pro.monthly")))
            let verdict = try await f.store.verifyReceipt(try #require(first.receipt))
            #expect(verdict.check.status == .subscriptionExpired)
            #expect(verdict.subscription?.state == .inBillingRetry)

            // The card works again: the next retry recovers the same subscription, its period starting now.
            f.payments.stopFailingRenewals()
            f.clock.advance(byMs: row.dueMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            row = try f.row(first.id)
            #expect(row.state == .active && row.periodsPaid == 2 && row.expirationReason == .unspecified)
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.originalID == first.id)
            #expect(
                renewal.periodStartMs == f.clock.now,
                "recovered from billing retry, the new period starts at the recovery")
            #expect(f.payments.renewalChargeCount == 1, "declined attempts charge nothing")
        }
    }

    @Test func aRenewalThatNeverSucceedsExpiresWithBillingErrorAnd21006() async throws {
        try await Self.withFixture { f in
            let (_, first) = try await f.subscribe()
            f.payments.failNextRenewals(Int.max)
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            _ = try await f.store.renewDueSubscriptions()
            #expect(try f.row(first.id).state == .inGracePeriod)
            f.clock.advance(byMs: 7 * Self.day)
            _ = try await f.store.renewDueSubscriptions()
            #expect(try f.row(first.id).state == .inBillingRetry)
            f.clock.advance(byMs: 30 * Self.day)
            let report = try await f.store.renewDueSubscriptions()
            #expect(report.expired + report.failed >= 1)
            let row = try f.row(first.id)
            #expect(row.state == .expired)
            #expect(row.expirationReason == .billingError)
            #expect(row.dueMs == 0)
            let verdict = try await f.store.verifyReceipt(try #require(first.receipt))
            #expect(verdict.check.status == .subscriptionExpired)
            #expect(verdict.check.status.rawValue == 21006)
            #expect(verdict.subscription?.expirationReason == .billingError)
            #expect(f.payments.renewalChargeCount == 0)
            // Nothing is due any more.
            f.clock.advance(byMs: 90 * Self.day)
            #expect(try await f.store.renewDueSubscriptions() == Store.RenewalReport())
        }
    }

    @Test func withoutAGracePeriodAFailedRenewalLosesTheEntitlementAtOnce() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe("lite.monthly")
            f.payments.failNextRenewals(1)
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            _ = try await f.store.renewDueSubscriptions()
            #expect(try f.row(first.id).state == .inBillingRetry)
            #expect(!(try f.owns(account, "lite.monthly")))
            // The next attempt (a day later) succeeds.
            f.clock.advance(byMs: Self.day)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            #expect(try f.row(first.id).state == .active)
        }
    }

    @Test func autoRenewOffEndsTheSubscriptionAtPeriodEndWithReasonCancelled() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            let status = try await f.store.setAutoRenew(account: account, originalID: first.id, false)
            #expect(status.willAutoRenew == false && status.state == .active)
            // Still entitled until the period ends; nothing is charged.
            f.clock.advance(byMs: first.expiresMs - f.clock.now - 1)
            #expect(try f.owns(account, "pro.monthly"))
            f.clock.advance(byMs: 1)
            #expect(try await f.store.renewDueSubscriptions().expired == 1)
            let row = try f.row(first.id)
            #expect(row.state == .expired && row.expirationReason == .cancelled)
            #expect(f.payments.renewalChargeCount == 0)
            #expect(try await f.store.verifyReceipt(try #require(first.receipt)).check.status == .subscriptionExpired)
            // An ended subscription cannot be switched back on; buying again resubscribes, same original id.
            await #expect(throws: StoreError.self) {
                try await f.store.setAutoRenew(account: account, originalID: first.id, true)
            }
            let again = try await f.store.purchase(
                account: account, productID: "pro.monthly", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            guard case .purchased(let record) = again.result else {
                Issue.record("not purchased")
                return
            }
            #expect(record.originalID == first.id)
            #expect(try f.row(first.id).state == .active && f.row(first.id).willAutoRenew)
        }
    }

    @Test func anUpgradeMidPeriodCreditsTheUnusedPartAndSwitchesAtOnce() async throws {
        try await Self.withFixture { f in
            let (account, basic) = try await f.subscribe("basic.monthly")
            // Half way through the period (the month's length, whatever month it is).
            let half = (basic.expiresMs - basic.periodStartMs) / 2
            f.clock.advance(byMs: half)
            let outcome = try await f.store.purchase(
                account: account, productID: "pro.monthly", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            guard case .purchased(let pro) = outcome.result else {
                Issue.record("not purchased: \(outcome.result)")
                return
            }
            #expect(!outcome.alreadyOwned)
            #expect(pro.originalID == basic.id, "the same subscription, on a higher level")
            #expect(pro.price == "3.99", "4.99 less half of 1.99 (1.00 rounded)")
            #expect(pro.periodStartMs == f.clock.now, "an upgrade takes effect at once")
            let row = try f.row(basic.id)
            #expect(row.productID == "pro.monthly" && row.state == .active && row.latestTransactionID == pro.id)
            #expect(try f.owns(account, "pro.monthly"))
            #expect(!(try f.owns(account, "basic.monthly")))
            let old = try #require(try f.store.ledger.transaction(id: basic.id))
            #expect(old.revokedMs == f.clock.now && old.revocationReason == "upgraded to pro.monthly")
        }
    }

    @Test func oneSubscriptionPaymentPerGroupAtATime() async throws {
        try await Self.withFixture { f in
            let (account, basic) = try await f.subscribe("basic.monthly")
            // The renewal's charge goes unanswered: its intent stays pending.
            f.payments.overrideNextPayment(.unreachable)
            f.clock.advance(byMs: basic.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().left == 1)
            // An upgrade now would race that payment: refused until it is settled.
            await #expect(throws: StoreError.self) {
                try await f.store.purchase(
                    account: account, productID: "pro.monthly", quantity: 1, paymentMethod: goodCard,
                    idempotencyKey: nil)
            }
            // The next pass asks again under the same payment id and records it; then the upgrade goes through.
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            let outcome = try await f.store.purchase(
                account: account, productID: "pro.monthly", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            guard case .purchased(let pro) = outcome.result else {
                Issue.record("not purchased: \(outcome.result)")
                return
            }
            #expect(pro.originalID == basic.id && f.payments.renewalChargeCount == 1)
        }
    }

    @Test func aRenewalReconciliationClosedIsAskedAgainUnderTheSamePaymentID() async throws {
        try await Self.withFixture { f in
            let (_, first) = try await f.subscribe()
            // Charged at the processor, the answer lost: the intent stays pending.
            f.payments.overrideNextPayment(.chargeThenLoseAnswer)
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().left == 1)
            let paymentID = try f.row(first.id).renewalPaymentID
            // Reconciliation settles it (the test processor's lookup is exact): recorded once.
            let report = try await f.store.reconcile(all: true)
            #expect(report.charged == 1)
            #expect(try f.row(first.id).periodsPaid == 2)
            #expect(f.payments.charges[paymentID] == 1)
            #expect(try await f.store.renewDueSubscriptions().renewed == 0)
            #expect(f.payments.chargeCount == 2, "the first purchase and one renewal")
        }
    }

    @Test func aRenewalUnansweredForADayIsLookedUpNotChargedAgain() async throws {
        try await Self.withFixture { f in
            let (_, first) = try await f.subscribe()
            f.payments.overrideNextPayment(.chargeThenLoseAnswer)
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().left == 1)
            let paymentID = try f.row(first.id).renewalPaymentID
            // A day later the processor no longer deduplicates that id (Stripe keeps keys 24 h): the store asks first.
            f.payments.overrideNextPayment(.outcome(.succeeded(reference: "must-not-be-charged")))
            f.clock.advance(byMs: Self.day)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            #expect(f.payments.charges[paymentID] == 1)
            #expect(f.payments.renewalChargeCount == 1)
            let intent = try #require(try f.store.ledger.intent(id: "renewal:\(paymentID)"))
            #expect(intent.outcome.hasPrefix("lookup:charged:"))
        }
    }

    @Test func setAsideRowsDoNotHideTheRestOfTheDueList() async throws {
        try await Self.withFixture { f in
            // More due subscriptions than one page (200) whose payments go unanswered, then one that is fine.
            var stuck: [String] = []
            for _ in 0..<205 { stuck.append(try await f.subscribe().1.id) }
            f.clock.advance(byMs: 1)
            let (_, last) = try await f.subscribe()
            for _ in 0..<205 { f.payments.overrideNextPayment(.unreachable) }
            f.clock.advance(byMs: last.expiresMs - f.clock.now)
            let report = try await f.store.renewDueSubscriptions()
            #expect(report.left == 205)
            #expect(report.renewed == 1, "the row after the first page is reached")
            #expect(try f.row(last.id).periodsPaid == 2)
        }
    }

    @Test func anOldPeriodsReceiptOfAnotherProductIsNotGoodAfterADowngrade() async throws {
        try await Self.withFixture { f in
            let (account, pro) = try await f.subscribe("pro.monthly")
            _ = try await f.store.purchase(
                account: account, productID: "basic.monthly", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            f.clock.advance(byMs: pro.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            let verdict = try await f.store.verifyReceipt(try #require(pro.receipt))
            #expect(
                verdict.check.status == .subscriptionExpired,
                "the pro receipt's period ended and the subscription is basic now")
            #expect(verdict.latestTransaction?.productID == "basic.monthly")
        }
    }

    @Test func aDowngradeSwitchesAtTheNextRenewal() async throws {
        try await Self.withFixture { f in
            let (account, pro) = try await f.subscribe("pro.monthly")
            let outcome = try await f.store.purchase(
                account: account, productID: "basic.monthly", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            guard case .purchased(let answered) = outcome.result else {
                Issue.record("not purchased: \(outcome.result)")
                return
            }
            #expect(
                outcome.alreadyOwned && answered.id == pro.id, "nothing is charged now: the current period stays pro")
            #expect(f.payments.chargeCount == 1)
            var row = try f.row(pro.id)
            #expect(row.productID == "pro.monthly" && row.pendingProductID == "basic.monthly")
            let status = try f.store.subscriptionStatuses(account: account)
            #expect(
                status.count == 1 && status[0].pendingProductID == "basic.monthly" && status[0].renewalPrice == "1.99")
            #expect(status[0].subscriptionGroup == "pro")

            f.clock.advance(byMs: pro.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            row = try f.row(pro.id)
            #expect(row.productID == "basic.monthly" && row.pendingProductID == "" && row.periodsPaid == 2)
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.productID == "basic.monthly" && renewal.price == "1.99" && renewal.originalID == pro.id)
            #expect(try f.owns(account, "basic.monthly"))
            #expect(!(try f.owns(account, "pro.monthly")))
        }
    }

    func buy(
        _ f: Fixture, _ account: AccountRecord, _ productID: String, offer: StoreV1.SubscriptionOffer?
    ) async throws -> PurchaseOutcome {
        try await f.store.purchase(
            account: account, productID: productID, quantity: 1, paymentMethod: goodCard, idempotencyKey: nil,
            offer: offer)
    }

    @Test func aFreeTrialThenThePriceAndTheIntroductoryOfferOnlyOnce() async throws {
        try await Self.withFixture { f in
            let (id, _) = try f.store.createAccount()
            let account = try #require(try f.store.ledger.account(id: id))
            let outcome = try await buy(
                f, account, "plus.monthly", offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
            guard case .purchased(let trial) = outcome.result else {
                Issue.record("not purchased: \(outcome.result)")
                return
            }
            #expect(trial.price == "0" && trial.offerID == "introductory")
            #expect(trial.expiresMs == trial.periodStartMs + 7 * Self.day, "the trial lasts its own period")
            #expect(f.payments.chargeCount == 0, "a free trial charges nothing")
            let trialReceipt = try #require(trial.receipt)
            let payload = try #require(try await f.store.verifyReceipt(trialReceipt).check.payload)
            #expect(payload.offerID == "introductory")
            #expect(try f.store.subscriptionStatuses(account: account).first?.renewalPrice == "2.99")

            f.clock.advance(byMs: trial.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            let row = try f.row(trial.id)
            let renewal = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(renewal.price == "2.99" && renewal.offerID == "")
            #expect(renewal.expiresMs == SubscriptionPeriod(iso8601: "P1M")!.end(fromMs: trial.expiresMs))
            #expect(f.payments.renewalChargeCount == 1)

            // Ended and bought again: the introductory offer is refused, named.
            _ = try await f.store.expireSubscription(originalID: trial.id)
            let again = try await buy(
                f, account, "plus.monthly", offer: StoreV1.SubscriptionOffer(offerID: "introductory"))
            guard case .failed(let refused) = again.result else {
                Issue.record("the second introductory offer was not refused")
                return
            }
            #expect(refused.code == .ineligibleForOffer && refused.reason == "ineligible_for_offer")
            #expect(refused.message.contains("once per subscription group"))
        }
    }

    @Test func aPromotionalOfferSignedByTheAppsServerAndEveryWayItIsRefused() async throws {
        try await Self.withFixture { f in
            let (id, _) = try f.store.createAccount()
            let account = try #require(try f.store.ledger.account(id: id))
            func signed(
                for accountID: String = id, offer: String = "winback", product: String = "plus.monthly",
                nonce: String = UUID().uuidString,
                at timestampMs: Int64? = nil
            ) throws -> StoreV1.SubscriptionOffer {
                let signature = try PromotionalOfferSignature.sign(
                    privateKey: Self.offerKey, keyID: "app-key-1", bundleID: Self.catalog.bundleID, productID: product,
                    offerID: offer,
                    accountID: accountID, nonce: nonce, timestampMs: timestampMs ?? f.clock.now)
                return StoreV1.SubscriptionOffer(
                    offerID: signature.offerID, keyID: signature.keyID, nonce: signature.nonce,
                    timestampMs: signature.timestampMs, signature: signature.signature)
            }
            func refusal(
                _ offer: StoreV1.SubscriptionOffer, product: String = "plus.monthly"
            ) async throws -> FailedPurchase? {
                if case .failed(let failed) = try await buy(f, account, product, offer: offer).result { return failed }
                return nil
            }
            var tampered = try signed()
            tampered.signature[10] ^= 0x01
            #expect(try await refusal(tampered)?.reason == "invalid_offer_signature")
            #expect(try await refusal(tampered)?.code == .invalidSignature)
            #expect(try await refusal(try signed(for: "acct_someone_else"))?.reason == "invalid_offer_signature")
            var otherKey = try signed()
            otherKey.keyID = "app-key-2"
            #expect(try await refusal(otherKey)?.reason == "unknown_offer_key")
            #expect(
                try await refusal(try signed(at: f.clock.now - 25 * 3600 * 1000))?.reason == "offer_signature_expired")
            #expect(
                try await refusal(try signed(at: f.clock.now + 3600 * 1000))?.reason == "offer_signature_in_the_future")
            #expect(try await refusal(StoreV1.SubscriptionOffer(offerID: "winback"))?.code == .missingOfferParams)
            #expect(try await refusal(StoreV1.SubscriptionOffer(offerID: "summer"))?.code == .invalidOfferIdentifier)
            #expect(
                try await refusal(try signed(product: "credits.5"), product: "pass.week")?.code
                    == .invalidOfferIdentifier)
            #expect(f.payments.chargeCount == 0)

            // A good one: the offer price for its periods, then the product's.
            let good = try signed(nonce: "nonce-0001-winback")
            guard case .purchased(let first) = try await buy(f, account, "plus.monthly", offer: good).result else {
                Issue.record("a valid promotional offer was refused")
                return
            }
            #expect(first.price == "0.99" && first.offerID == "winback")
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            _ = try await f.store.renewDueSubscriptions()
            var row = try f.row(first.id)
            let second = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(second.price == "0.99" && second.offerID == "winback", "the offer's second period")
            f.clock.advance(byMs: second.expiresMs - f.clock.now)
            _ = try await f.store.renewDueSubscriptions()
            row = try f.row(first.id)
            let third = try #require(try f.store.ledger.transaction(id: row.latestTransactionID))
            #expect(third.price == "2.99" && third.offerID == "", "after the offer's periods, the product's price")

            // A signed offer is good for one purchase: its nonce is used up.
            _ = try await f.store.expireSubscription(originalID: first.id)
            let winback = try signed(nonce: "nonce-0002-winback")
            guard case .purchased = try await buy(f, account, "plus.monthly", offer: winback).result else {
                Issue.record("a valid promotional offer was refused after the subscription ended")
                return
            }
            _ = try await f.store.expireSubscription(originalID: first.id)
            #expect(try await refusal(winback)?.reason == "offer_nonce_used")
        }
    }

    /// The same data dir served with `pro.monthly` at another price.
    func repriced(_ f: Fixture, to price: String) throws -> Store {
        var configuration = f.store.configuration
        configuration.catalog = Catalog(
            bundleID: Self.catalog.bundleID,
            products: Self.catalog.products.map { product in
                var changed = product
                if product.id == "pro.monthly" { changed.price = price }
                return changed
            }, offerKeys: Self.catalog.offerKeys)
        return try Store(configuration: configuration)
    }

    @Test func aPriceIncreaseWithoutConsentEndsTheSubscriptionAtPeriodEnd() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            let store = try repriced(f, to: "5.99")
            let status = try #require(try store.subscriptionStatuses(account: account).first)
            #expect(status.priceIncreasePending && status.renewalPrice == "5.99")
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            #expect(try await store.renewDueSubscriptions().expired == 1)
            let row = try f.row(first.id)
            #expect(row.state == .expired && row.expirationReason == .priceIncreaseNotAccepted)
            #expect(f.payments.renewalChargeCount == 0)
        }
    }

    @Test func aPriceIncreaseConsentedToRenewsAtTheNewPrice() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            let store = try repriced(f, to: "5.99")
            let consented = try await store.consentToPriceIncrease(account: account, originalID: first.id)
            #expect(!consented.priceIncreasePending)
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            #expect(try await store.renewDueSubscriptions().renewed == 1)
            let renewal = try #require(try store.ledger.transaction(id: try f.row(first.id).latestTransactionID))
            #expect(renewal.price == "5.99")
            // A lower price needs no consent.
            let cheaper = try repriced(f, to: "3.99")
            #expect(try cheaper.subscriptionStatuses(account: account).first?.priceIncreasePending == false)
        }
    }

    @Test func subscriptionChangesRecordEvents() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            let store = try repriced(f, to: "5.99")
            _ = try await store.consentToPriceIncrease(account: account, originalID: first.id)
            _ = try await store.setAutoRenew(account: account, originalID: first.id, false)
            f.clock.advance(byMs: try f.row(first.id).expiresMs - f.clock.now)
            #expect(try await store.renewDueSubscriptions().expired == 1)
            let events = try await store.ledger.events(after: 0, accountID: account.id)
            #expect(events.map(\.type) == [.purchased, .renewed, .priceChanged, .autoRenewChanged, .expired])
            #expect(events.allSatisfy { $0.originalTransactionID == first.id })
            #expect(events[1].transactionID != first.id && events[2].price == "5.99" && !events[3].autoRenew)
            #expect(events[4].expirationReason == .cancelled)
        }
    }

    @Test func anotherAccountCannotTouchASubscription() async throws {
        try await Self.withFixture { f in
            let (_, first) = try await f.subscribe()
            let (otherID, _) = try f.store.createAccount()
            let other = try #require(try f.store.ledger.account(id: otherID))
            await #expect(throws: StoreError.self) {
                try await f.store.setAutoRenew(account: other, originalID: first.id, false)
            }
            #expect(throws: StoreError.self) { try f.store.subscriptionStatuses(account: other, originalID: first.id) }
            #expect(try f.store.subscriptionStatuses(account: other).isEmpty)
            #expect(try f.row(first.id).willAutoRenew)
        }
    }

    @Test func refundingTheLatestTransactionRevokesTheSubscription() async throws {
        try await Self.withFixture { f in
            let (_, first) = try await f.subscribe()
            _ = try await f.store.refund(transactionID: first.id, reason: "customer request")
            #expect(try f.row(first.id).state == .revoked)
            f.clock.advance(byMs: 40 * Self.day)
            #expect(try await f.store.renewDueSubscriptions().renewed == 0)
            #expect(f.payments.renewalChargeCount == 0)
        }
    }

    @Test func expireNowEndsTheEntitlementAtOnce() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe()
            _ = try await f.store.expireSubscription(originalID: first.id)
            #expect(!(try f.owns(account, "pro.monthly")))
            #expect(try await f.store.verifyReceipt(try #require(first.receipt)).check.status == .subscriptionExpired)
            f.clock.advance(byMs: 40 * Self.day)
            #expect(try await f.store.renewDueSubscriptions() == Store.RenewalReport())
        }
    }

    @Test func stackedNonRenewingPeriodsCarryTheirStart() async throws {
        try await Self.withFixture { f in
            let (account, first) = try await f.subscribe("pass.week")
            let again = try await f.store.purchase(
                account: account, productID: "pass.week", quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            guard case .purchased(let second) = again.result else {
                Issue.record("not purchased")
                return
            }
            #expect(first.periodStartMs == first.purchaseMs)
            #expect(
                second.periodStartMs == first.expiresMs,
                "a second week bought during the first starts when the first ends")
            #expect(second.expiresMs == first.expiresMs + 7 * Self.day)
            #expect(
                try f.store.ledger.subscription(originalID: first.id) == nil,
                "non-renewing periods have no renewal state")
        }
    }

    @Test func aTimeScaleShortensPeriodsInSandboxOnly() async throws {
        try await Self.withFixture { f in
            f.store.setTimeScale(720)
            let (_, first) = try await f.subscribe()
            let month = SubscriptionPeriod(iso8601: "P1M")!.end(fromMs: first.periodStartMs) - first.periodStartMs
            #expect(first.expiresMs - first.periodStartMs == Int64((Double(month) / 720).rounded()))
        }
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var production = try StoreConfiguration(
            dataDirectory: directory, catalog: Self.catalog, environment: .production
        ).onTestLedger()
        production.timeScale = 720
        let store = try Store(configuration: production)
        #expect(store.timeScale == 1)
        store.setTimeScale(720)
        #expect(store.timeScale == 1)
    }

    @Test func catalogSubscriptionFieldsReachTheWire() throws {
        let catalog = try Catalog.parse(
            Data(
                #"{"products": [{"id": "pro", "type": "auto-renewable-subscription", "title": "Pro", "price": "4.99", "currency": "USD", "subscription_period": "P1M", "grace_period": "P3D", "promotional_offers": [{"id": "winback", "price": "1.99", "periods": 3}]}]}"#
                    .utf8), file: "catalog.json")
        let message = try #require(catalog.product("pro")).message
        #expect(message.gracePeriod == "P3D" && message.billingRetryPeriod == "P60D")
        #expect(message.promotionalOffers.map(\.id) == ["winback"] && message.promotionalOffers.first?.periods == 3)
    }
}
