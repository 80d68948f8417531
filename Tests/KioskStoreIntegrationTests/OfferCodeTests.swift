import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskTesting
import KioskWire
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// Offer codes: one-time and custom codes buying a non-consumable, credits or a subscription's first period; every
/// refusal named; guessing throttled; 10,000 codes redeemed across two `kiosk-store serve` processes, each once.
@Suite(.timeLimit(.minutes(10))) struct OfferCodeTests {
    typealias Fixture = EntitlementTests.Fixture

    func redeem(
        _ f: Fixture, _ account: AccountRecord, _ code: String, method: String = "", source: String? = nil
    ) async throws -> PurchaseOutcome {
        try await f.store.redeemOfferCode(
            account: account, code: code, paymentMethod: method, idempotencyKey: UUID().uuidString, source: source)
    }

    func reason(_ outcome: PurchaseOutcome) -> String? {
        if case .failed(let failed) = outcome.result { return failed.reason }
        return nil
    }

    func bought(_ outcome: PurchaseOutcome) -> TransactionRecord? {
        if case .purchased(let record) = outcome.result, !outcome.alreadyOwned { return record }
        return nil
    }

    @Test func oneTimeCodesBuyTheirProductOnceEach() async throws {
        try await SupportToolTests.withStore { f in
            let made = try await f.store.createOfferCodes(batchID: "sepia-free", productID: "filter.sepia", count: 3)
            #expect(made.codes.count == 3 && Set(made.codes).count == 3)
            #expect(made.codes.allSatisfy { $0.count == 19 && $0.split(separator: "-").count == 4 })
            let alice = try f.account()
            // Typed in lower case, with spaces: the same code.
            let typed = made.codes[0].lowercased().replacingOccurrences(of: "-", with: " ")
            let record = try #require(bought(try await redeem(f, alice, typed)))
            #expect(record.productID == "filter.sepia" && record.price == "0.00" && record.offerID == "code:sepia-free")
            #expect(try await f.held(alice)["filters"]?.source == .offerCode)
            let receipt = try #require(record.receipt)
            #expect(try await f.store.verifyReceipt(receipt).check.status == .valid)
            #expect(try await f.store.ledger.events(after: 0, accountID: alice.id, types: [.purchased]).count == 1)

            // Used: refused, named; a second code for what alice owns is not used up.
            let bob = try f.account()
            #expect(reason(try await redeem(f, bob, made.codes[0])) == "offer_code_used")
            let owned = try await redeem(f, alice, made.codes[1])
            #expect(owned.alreadyOwned)
            #expect(bought(try await redeem(f, bob, made.codes[1])) != nil, "the code alice did not need was kept")
            #expect(try await f.store.ledger.offerCodeBatch(id: "sepia-free")?.redeemed == 2)

            // Revoked and expired batches, and unknown codes, each with its reason.
            try await f.store.revokeOfferCodes(batchID: "sepia-free")
            #expect(reason(try await redeem(f, try f.account(), made.codes[2])) == "offer_code_revoked")
            let soon = try await f.store.createOfferCodes(
                batchID: "soon", productID: "filter.sepia", count: 1, expiresMs: f.clock.now + 1_000)
            f.clock.advance(byMs: 1_000)
            #expect(reason(try await redeem(f, try f.account(), soon.codes[0])) == "offer_code_expired")
            #expect(reason(try await redeem(f, try f.account(), "ABCD-EFGH-JKLM-NPQR")) == "offer_code_unknown")
            #expect(reason(try await redeem(f, try f.account(), "no!")) == "offer_code_unknown")

            // The export: every code, its state and who redeemed it.
            var lines: [String] = []
            try await f.store.exportOfferCodes(batchID: "sepia-free") { lines.append($0) }
            #expect(lines.first == "code,state,redeemed_ms,account_id,transaction_id" && lines.count == 4)
            #expect(lines.filter { $0.contains(",redeemed,") }.count == 2)
            #expect(lines.contains { $0.hasPrefix(made.codes[0] + ",redeemed,") && $0.contains(alice.id) })
        }
    }

    @Test func creditsAndASubscriptionsFreeFirstPeriodThenItsPrice() async throws {
        try await SupportToolTests.withStore { f in
            let credits = try await f.store.createOfferCodes(
                batchID: "credits", productID: "credits.5", count: 2, quantity: 3)
            let buyer = try f.account()
            for code in credits.codes { #expect(bought(try await redeem(f, buyer, code))?.quantity == 3) }
            #expect(try f.store.ledger.account(id: buyer.id)?.creditBalance == 30)

            let free = try await f.store.createOfferCodes(
                batchID: "pro-free-month", productID: "pro.monthly", count: 2, period: "P1M")
            // A subscription renews with the buyer's method: the code needs one.
            await #expect(throws: StoreError.self) { _ = try await redeem(f, buyer, free.codes[0]) }
            let record = try #require(bought(try await redeem(f, buyer, free.codes[0], method: goodCard)))
            #expect(record.offerID == "code:pro-free-month" && record.price == "0.00")
            #expect(f.payments.chargeCount == 0, "nothing was charged")
            let pro = try #require(try await f.held(buyer)["pro"])
            #expect(pro.source == .offerCode && pro.expiresMs == record.expiresMs && pro.willRenew)
            // Subscribed already: answered as owned, and the code is not used up.
            #expect(try await redeem(f, buyer, free.codes[1], method: goodCard).alreadyOwned)
            // Subscribed in the group (another level): not eligible.
            let basic = try f.account()
            _ = try await f.buy(basic, "basic.monthly")
            #expect(reason(try await redeem(f, basic, free.codes[1], method: goodCard)) == "ineligible_for_offer")
            // The first renewal is at the product's price.
            f.clock.advance(byMs: record.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 2, "this one and basic's")
            let row = try #require(try f.store.ledger.subscription(originalID: record.id))
            #expect(row.periodsPaid == 2)
            #expect(try f.store.ledger.transaction(id: row.latestTransactionID)?.price == "4.99")
            #expect(try await f.held(buyer)["pro"]?.source == .subscription)
            // Once per subscription group and account: after the subscription ends, no second code.
            _ = try await f.store.expireSubscription(originalID: record.id)
            #expect(reason(try await redeem(f, buyer, free.codes[1], method: goodCard)) == "ineligible_for_offer")
            #expect(bought(try await redeem(f, try f.account(), free.codes[1], method: goodCard)) != nil)
        }
    }

    @Test func aDiscountedCodeWhosePaymentFailsIsGivenBack() async throws {
        try await SupportToolTests.withStore { f in
            let made = try await f.store.createOfferCodes(
                batchID: "half-year", productID: "pro.monthly", count: 1, price: "1.99", period: "P1M")
            let buyer = try f.account()
            f.payments.overrideNextPayment(.declined(reason: "card_declined", message: "declined by the test"))
            let declined = try await redeem(f, buyer, made.codes[0], method: goodCard)
            #expect(reason(declined) == "card_declined")
            // Asked to buy, then declined: given back too.
            f.payments.overrideNextPayment(.deferred)
            let asked = try await redeem(f, buyer, made.codes[0], method: goodCard)
            guard case .deferred(let waiting) = asked.result else {
                Issue.record("not deferred: \(asked.result)")
                return
            }
            _ = try await f.store.decline(transactionID: waiting.id)
            let record = try #require(bought(try await redeem(f, buyer, made.codes[0], method: goodCard)))
            #expect(record.price == "1.99" && record.offerID == "code:half-year")
            await #expect(throws: StoreError.self) {
                _ = try await f.store.createOfferCodes(batchID: "dear", productID: "pro.monthly", count: 1, price: "9")
            }
        }
    }

    @Test func aCustomCodeServesItsLimitOfAccountsOnceEach() async throws {
        try await SupportToolTests.withStore { f in
            let made = try await f.store.createOfferCodes(
                batchID: "launch", productID: "credits.5", customCode: "Launch2027", limit: 2)
            #expect(made.codes == ["LAUNCH2027"])
            let first = try f.account()
            #expect(bought(try await redeem(f, first, "launch2027")) != nil)
            #expect(reason(try await redeem(f, first, "LAUNCH2027")) == "ineligible_for_offer")
            #expect(bought(try await redeem(f, try f.account(), "launch-2027")) != nil)
            #expect(reason(try await redeem(f, try f.account(), "launch2027")) == "offer_code_limit_reached")
            await #expect(throws: StoreError.self) {
                _ = try await f.store.createOfferCodes(
                    batchID: "again", productID: "credits.5", customCode: "launch2027", limit: 5)
            }
        }
    }

    /// 100,000 guesses from one account: ten are looked up, the rest refused unlooked (a real code among them finds
    /// nothing); one address trying codes for many accounts is limited as well.
    @Test func bruteForceIsThrottledAndFindsNothing() async throws {
        try await SupportToolTests.withStore { f in
            let made = try await f.store.createOfferCodes(batchID: "target", productID: "credits.5", count: 5)
            let attacker = try f.account()
            var looked = 0
            var throttled = 0
            for attempt in 0..<100_000 {
                let guess = attempt == 50_000 ? made.codes[0] : OfferCodes.newCode()
                do {
                    let outcome = try await redeem(f, attacker, guess)
                    #expect(bought(outcome) == nil, "a guess found a code")
                    looked += 1
                } catch let error as StoreError where error.kind == .rateLimited {
                    throttled += 1
                }
            }
            #expect(looked == OfferCodeGuesses.perAccount && throttled == 100_000 - looked)
            #expect(try f.store.ledger.account(id: attacker.id)?.creditBalance == 0)
            #expect(try await f.store.ledger.offerCodeBatch(id: "target")?.redeemed == 0)

            // One address, many accounts.
            var refused = false
            for _ in 0..<20 where !refused {
                let account = try f.account()
                for _ in 0..<5 {
                    do {
                        _ = try await redeem(f, account, OfferCodes.newCode(), source: "203.0.113.7")
                    } catch let error as StoreError where error.kind == .rateLimited {
                        refused = true
                    }
                }
            }
            #expect(refused, "the address was limited after \(OfferCodeGuesses.perSource) wrong codes")
            // The real code still works for a buyer who did not guess.
            #expect(bought(try await redeem(f, try f.account(), made.codes[0])) != nil)
        }
    }

    /// 10,000 one-time codes (2,000 on PostgreSQL, where the test pass runs every test again) made, exported by
    /// `kiosk-store codes export`, and each tried at once by two buyers, one on each of two `kiosk-store serve`
    /// processes of one ledger, many codes at a time: each code is redeemed exactly once, and the credits match.
    @Test func tenThousandCodesAreRedeemedOnceEachAcrossTwoStoreProcesses() async throws {
        let count = TestLedger.kind == "postgres" ? 2_000 : 10_000
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let catalog = try Catalog.load(path: StoreProcess.exampleCatalog)
        let store = try Store(
            configuration: try StoreConfiguration(dataDirectory: directory, catalog: catalog).onTestLedger())
        try store.prepareToServe()
        let accounts = try (0..<100).map { _ in try store.createAccount() }
        _ = try await store.createOfferCodes(batchID: "bulk", productID: "credits.5", count: count)
        let exported = try await StoreProcess.run(["codes", "export", "bulk", "--data-dir", directory])
        let codes = exported.split(separator: "\n").dropFirst().map { String($0.split(separator: ",")[0]) }
        #expect(codes.count == count && Set(codes).count == count)

        let one = try await StoreProcess(dataDirectory: directory)
        let two = try await StoreProcess(dataDirectory: directory)
        let clients = [one, two].map { RPCClient(host: "127.0.0.1", port: $0.port) }
        @Sendable func redeem(_ code: String, token: String, on client: RPCClient) async throws -> String {
            var metadata = Metadata()
            metadata.add("authorization", "Bearer \(token)")
            metadata.add("idempotency-key", UUID().uuidString)
            let answer = try await client.unary(
                "/kiosk.store.v1.Store/RedeemOfferCode", request: StoreV1.RedeemOfferCodeRequest(code: code),
                response: StoreV1.PurchaseResponse.self, options: CallOptions(timeout: .seconds(30), metadata: metadata)
            )
            let transaction = try #require(answer.transaction)
            return transaction.state == .purchased ? "redeemed" : transaction.errorReason
        }
        var tally: [String: Int] = [:]
        do {
            try await withThrowingTaskGroup(of: [String].self) { group in
                var next = 0
                func add() {
                    // Two buyers race for each code, one on each store.
                    let code = codes[next]
                    let token = accounts[next % accounts.count].token
                    let rival = accounts[(next + 1) % accounts.count].token
                    next += 1
                    group.addTask {
                        async let first = redeem(code, token: token, on: clients[0])
                        async let second = redeem(code, token: rival, on: clients[1])
                        return try await [first, second]
                    }
                }
                for _ in 0..<min(32, count) { add() }
                while let answers = try await group.next() {
                    #expect(answers.sorted() == ["offer_code_used", "redeemed"], "\(answers)")
                    for answer in answers { tally[answer, default: 0] += 1 }
                    if next < count { add() }
                }
            }
        } catch {
            for client in clients { await client.close() }
            await one.signal(SIGTERM)
            await two.signal(SIGTERM)
            throw error
        }
        for client in clients { await client.close() }
        await one.signal(SIGTERM)
        await two.signal(SIGTERM)
        #expect(tally == ["redeemed": count, "offer_code_used": count])

        let after = try await StoreProcess.run(["codes", "export", "bulk", "--data-dir", directory])
        let rows = after.split(separator: "\n").dropFirst().map {
            $0.split(separator: ",", omittingEmptySubsequences: false)
        }
        #expect(rows.count == count && rows.allSatisfy { $0[1] == "redeemed" })
        #expect(Set(rows.map { $0[4] }).count == count, "one transaction per code")
        var credits: UInt64 = 0
        for account in accounts { credits += try store.ledger.account(id: account.id)?.creditBalance ?? 0 }
        #expect(credits == UInt64(count) * 5)
    }
}
