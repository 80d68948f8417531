import AsyncHTTPClient
import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStoreCore
import KioskStoreIntegrations
import KioskStoreTestSupport
import NIOCore
import NIOFoundationCompat
import NIOSSL
import StripeDouble
import Testing

@testable import KioskStore

/// Stripe-Signature as Stripe documents it: HMAC-SHA256 of `"<t>.<body>"`, hex, within a tolerance, any of the
/// endpoint's secrets.
@Suite struct StripeWebhookSignatureTests {
    let body = Array(#"{"id":"evt_1","type":"charge.refunded","data":{"object":{}}}"#.utf8)
    let now: Int64 = 1_800_000_000

    @Test func aGoodSignatureIsTakenWithAnyOfTheSecrets() throws {
        let header = StripeWebhookVerifier.header(
            payload: body, timestamp: now - 10, secret: "whsec_new_0123456789abcdef")
        let verifier = StripeWebhookVerifier(secrets: ["whsec_old_0123456789abcdef", "whsec_new_0123456789abcdef"])
        #expect(try verifier.verify(payload: body, header: header, nowSeconds: now) == now - 10)
        // Several v1 signatures (Stripe sends one per active secret during a rotation): one that matches is enough.
        let two = header + ",v1=" + String(repeating: "0", count: 64)
        #expect(try verifier.verify(payload: body, header: two, nowSeconds: now) == now - 10)
    }

    @Test func aSecretTooShortToBeSecretIsNotUsed() {
        #expect(StripeWebhookVerifier(secrets: ["whsec_", "", "whsec_short"]).secrets.isEmpty)
    }

    @Test func forgedLateOrMalformedDeliveriesAreRefused() {
        let verifier = StripeWebhookVerifier(secrets: ["whsec_right_0123456789abcdef"])
        let good = StripeWebhookVerifier.header(payload: body, timestamp: now, secret: "whsec_right_0123456789abcdef")
        let cases: [(String?, [UInt8], Int64, StripeWebhookVerifier.Refusal)] = [
            (nil, body, now, .missingHeader),
            ("v1=abc", body, now, .malformedHeader),
            ("t=\(now)", body, now, .noSignature),
            ("t=\(now),v0=" + String(repeating: "a", count: 64), body, now, .noSignature),
            (
                StripeWebhookVerifier.header(payload: body, timestamp: now, secret: "whsec_wrong_0123456789abcdef"),
                body, now,
                .noMatchingSignature
            ),
            (good, body + Array(" ".utf8), now, .noMatchingSignature),
            (good, body, now + 301, .outsideTolerance(ageSeconds: 301)),
            // Timestamps at the ends of Int64 are refused, never an overflow trap.
            (
                "t=-9223372036854775808,v1=" + String(repeating: "0", count: 64), body, now,
                .outsideTolerance(ageSeconds: Int64.max)
            ),
            (
                "t=9223372036854775807,v1=" + String(repeating: "0", count: 64), body, -now,
                .outsideTolerance(ageSeconds: Int64.min)
            ),
        ]
        for (header, payload, at, refusal) in cases {
            #expect(throws: refusal) { try verifier.verify(payload: payload, header: header, nowSeconds: at) }
        }
    }
}

/// Money that moves at Stripe reaches Kiosk by signed webhook: a refund made at the double's "dashboard" (its API,
/// not Kiosk's) revokes the transaction, a dispute revokes it, a payment whose answer was lost is recorded from
/// its event; a replayed or badly signed delivery changes nothing.
@Suite(.timeLimit(.minutes(2))) struct StripeWebhookTests {
    static let secret = "whsec_kiosk_test_endpoint"

    struct Setup {
        let double: StripeDouble
        let store: Store
        let endpoint: StripeWebhookServer
        let directory: String
        let clock: TestClock
        var url: String { "http://127.0.0.1:\(endpoint.port)\(StripeWebhookServer.path)" }
    }

    static func withSetup(_ body: (Setup) async throws -> Void) async throws {
        let double = StripeDouble()
        try await double.start()
        let directory = temporaryDirectory()
        let clock = TestClock()
        var configuration = try StripeCustomerTests.configuration(
            directory, clock: clock, processor: StripeCustomerTests.stripe(double))
        configuration.stripeWebhookSecrets = [secret]
        let store = try Store(configuration: configuration)
        try store.prepareToServe()
        let endpoint = StripeWebhookServer(store: store)
        try await endpoint.start()
        let setup = Setup(double: double, store: store, endpoint: endpoint, directory: directory, clock: clock)
        double.sendWebhooks(to: setup.url, secret: secret)
        do {
            try await body(setup)
        } catch {
            await endpoint.shutdown()
            try? await double.shutdown()
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        await endpoint.shutdown()
        try await double.shutdown()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Waits (at most `seconds`) until `condition` holds; false if it never did.
    static func eventually(within seconds: Double = 5, _ condition: () throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if try condition() { return true }
            try await Task.sleep(for: .milliseconds(5))
        }
        return try condition()
    }

    static func post(_ url: String, body: [UInt8], signature: String?) async throws -> (Int, String) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        if let signature { request.headers.add(name: "Stripe-Signature", value: signature) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(5))
        let text = try await response.body.collect(upTo: 1 << 16)
        return (Int(response.status.code), String(buffer: text))
    }

    static func buyBook(_ setup: Setup) async throws -> TransactionRecord {
        let buyer = try LifecycleDefectTests.account(setup.store)
        let bought = try await setup.store.purchase(
            account: buyer, productID: "book", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
        guard case .purchased(let record) = bought.result else { throw StoreError.invalid("not bought") }
        return record
    }

    @Test func aRefundMadeAtStripeRevokesOnceAndAReplayChangesNothing() async throws {
        try await Self.withSetup { setup in
            let record = try await Self.buyBook(setup)
            let intent = try #require(setup.double.paymentIntents(forPaymentID: record.paymentID ?? "").first)
            let start = ContinuousClock.now
            _ = try await RenewalActionTests.post(setup.double, "/v1/refunds", "payment_intent=\(intent.id)")
            #expect(
                try await Self.eventually { try setup.store.ledger.transaction(id: record.id)?.revokedMs != 0 },
                "the refund made at Stripe never reached Kiosk")
            let elapsed = ContinuousClock.now - start
            #expect(elapsed < .seconds(1), "revoked after \(elapsed)")
            #expect(try setup.store.ledger.transaction(id: record.id)?.revocationReason == "refunded at Stripe")
            #expect(setup.double.refundCount == 1, "Kiosk refunded a second time")

            // The same delivery again (a replay, or Stripe's retry): acknowledged, nothing more.
            #expect(
                try await Self.eventually { setup.double.webhookDeliveries.contains { $0.type == "charge.refunded" } })
            let delivery = try #require(setup.double.webhookDeliveries.first { $0.type == "charge.refunded" })
            #expect(delivery.status == 200)
            let (status, message) = try await Self.post(setup.url, body: delivery.body, signature: delivery.signature)
            #expect(status == 200 && message.contains("handled already"), "\(status) \(message)")
            let refunds = try await setup.store.ledger.events(after: 0, limit: 100).filter {
                $0.type == .refunded && $0.transactionID == record.id
            }
            #expect(refunds.count == 1)
        }
    }

    @Test func badlySignedDeliveriesAreRefusedAndChangeNothing() async throws {
        try await Self.withSetup { setup in
            let record = try await Self.buyBook(setup)
            let intent = try #require(setup.double.paymentIntents(forPaymentID: record.paymentID ?? "").first)
            let forged = Array(
                #"{"id":"evt_forged","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_x","object":"charge","payment_intent":"\#(intent.id)","refunded":true,"amount":299,"amount_refunded":299}}}"#
                    .utf8)
            let now = Int64(Date().timeIntervalSince1970)
            for signature in [
                nil,
                StripeWebhookVerifier.header(payload: forged, timestamp: now, secret: "whsec_someone_else_0123456789"),
                StripeWebhookVerifier.header(payload: forged, timestamp: now - 3600, secret: Self.secret),
            ] {
                let (status, _) = try await Self.post(setup.url, body: forged, signature: signature)
                #expect(status == 400)
            }
            #expect(try setup.store.ledger.transaction(id: record.id)?.revokedMs == 0)
            // Signed right, an unknown type is acknowledged and ignored.
            let other = Array(
                #"{"id":"evt_other","object":"event","type":"customer.created","data":{"object":{}}}"#.utf8)
            let (status, message) = try await Self.post(
                setup.url, body: other,
                signature: StripeWebhookVerifier.header(payload: other, timestamp: now, secret: Self.secret))
            #expect(status == 200 && message.contains("ignored"), "\(status) \(message)")
        }
    }

    @Test func aDisputeRevokesWithoutARefund() async throws {
        try await Self.withSetup { setup in
            let record = try await Self.buyBook(setup)
            let intent = try #require(setup.double.paymentIntents(forPaymentID: record.paymentID ?? "").first)
            let dispute = try #require(setup.double.openDispute(paymentIntent: intent.id, reason: "fraudulent"))
            #expect(try await Self.eventually { try setup.store.ledger.transaction(id: record.id)?.revokedMs != 0 })
            let events = try await setup.store.ledger.events(after: 0, limit: 100).filter {
                $0.transactionID == record.id
            }
            #expect(events.contains { $0.type == .disputed && $0.reason == "fraudulent" })
            #expect(events.contains { $0.type == .refunded })
            #expect(setup.double.refundCount == 0, "a disputed charge was refunded as well")
            setup.double.closeDispute(dispute, won: false)
            #expect(
                try await Self.eventually {
                    setup.double.webhookDeliveries.contains { $0.type == "charge.dispute.closed" && $0.status == 200 }
                })
            #expect(try setup.store.ledger.transaction(id: record.id)?.revokedMs != 0)
        }
    }

    /// A won dispute gives the buyer back what the dispute revoked (REFUND_REVERSED): a non-consumable counts
    /// again; a subscription is entitled to its period's end without auto-renew. Bought again since: it stays
    /// revoked.
    @Test func aWonDisputeRestoresUnlessBoughtAgainSince() async throws {
        try await Self.withSetup { setup in
            let record = try await Self.buyBook(setup)
            let intent = try #require(setup.double.paymentIntents(forPaymentID: record.paymentID ?? "").first)
            let dispute = try #require(setup.double.openDispute(paymentIntent: intent.id))
            #expect(try await Self.eventually { try setup.store.ledger.transaction(id: record.id)?.revokedMs != 0 })
            #expect(setup.double.closeDispute(dispute, won: true))
            #expect(
                try await Self.eventually { try setup.store.ledger.transaction(id: record.id)?.revokedMs == 0 },
                "a won dispute did not restore the purchase")
            let reversed = try await setup.store.ledger.events(after: 0, limit: 100).filter {
                $0.type == .refundReversed && $0.transactionID == record.id
            }
            #expect(reversed.count == 1)
            #expect(try await setup.store.ledger.revocations(after: 0, limit: 10).isEmpty)

            // A subscription: revoked by the dispute, ACTIVE again to its period's end, auto-renew off.
            let buyer = try LifecycleDefectTests.account(setup.store)
            let bought = try await setup.store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased(let plus) = bought.result else { throw StoreError.invalid("not subscribed") }
            let plusIntent = try #require(setup.double.paymentIntents(forPaymentID: plus.paymentID ?? "").first)
            let plusDispute = try #require(setup.double.openDispute(paymentIntent: plusIntent.id))
            #expect(
                try await Self.eventually {
                    try setup.store.ledger.subscription(originalID: plus.id)?.state == .revoked
                })
            #expect(setup.double.closeDispute(plusDispute, won: true))
            #expect(
                try await Self.eventually { try setup.store.ledger.subscription(originalID: plus.id)?.state == .active }
            )
            let restored = try #require(try setup.store.ledger.subscription(originalID: plus.id))
            #expect(!restored.willAutoRenew && restored.dueMs == restored.expiresMs)

            // Bought again while the dispute was open: the won dispute leaves the first purchase revoked.
            let again = try await Self.buyBook(setup)
            let againIntent = try #require(setup.double.paymentIntents(forPaymentID: again.paymentID ?? "").first)
            let againDispute = try #require(setup.double.openDispute(paymentIntent: againIntent.id))
            #expect(try await Self.eventually { try setup.store.ledger.transaction(id: again.id)?.revokedMs != 0 })
            let rebought = try await setup.store.purchase(
                account: try #require(try setup.store.ledger.account(id: again.accountID)), productID: "book",
                quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased = rebought.result else { throw StoreError.invalid("not bought again") }
            #expect(setup.double.closeDispute(againDispute, won: true))
            #expect(
                try await Self.eventually {
                    setup.double.webhookDeliveries.filter { $0.type == "charge.dispute.closed" && $0.status == 200 }
                        .count == 3
                })
            #expect(try setup.store.ledger.transaction(id: again.id)?.revokedMs != 0, "two live copies of one book")
        }
    }

    /// Stripe does not promise order: each dispute's state is kept by its id. A won closing that arrives before its
    /// opening leaves the purchase alone and the opening then revokes nothing; a lost closing that arrives first
    /// revokes, and its opening then changes nothing more.
    @Test func aClosingBeforeItsOpeningActsAsTheDisputeEnded() async throws {
        try await Self.withSetup { setup in
            let now = Int64(Date().timeIntervalSince1970)
            func deliver(
                _ id: String, _ type: String, dispute: String, intent: String, status: String
            ) async throws
                -> String
            {
                let body = Array(
                    #"{"id":"\#(id)","object":"event","type":"\#(type)","data":{"object":{"id":"\#(dispute)","object":"dispute","payment_intent":"\#(intent)","status":"\#(status)","reason":"fraudulent","amount":299}}}"#
                        .utf8)
                let (code, message) = try await Self.post(
                    setup.url, body: body,
                    signature: StripeWebhookVerifier.header(payload: body, timestamp: now, secret: Self.secret))
                #expect(code == 200, "\(code) \(message)")
                return message
            }
            let won = try await Self.buyBook(setup)
            let wonIntent = try #require(setup.double.paymentIntents(forPaymentID: won.paymentID ?? "").first).id
            var message = try await deliver(
                "evt_w1", "charge.dispute.closed", dispute: "du_won", intent: wonIntent, status: "won")
            #expect(message.contains("nothing to restore"), "\(message)")
            message = try await deliver(
                "evt_w2", "charge.dispute.created", dispute: "du_won", intent: wonIntent, status: "needs_response")
            #expect(message.contains("won already"), "\(message)")
            #expect(try setup.store.ledger.transaction(id: won.id)?.revokedMs == 0)

            let lost = try await Self.buyBook(setup)
            let lostIntent = try #require(setup.double.paymentIntents(forPaymentID: lost.paymentID ?? "").first).id
            message = try await deliver(
                "evt_l1", "charge.dispute.closed", dispute: "du_lost", intent: lostIntent, status: "lost")
            #expect(message.contains("revoked"), "\(message)")
            #expect(try setup.store.ledger.transaction(id: lost.id)?.revokedMs != 0, "a lost chargeback left it owned")
            message = try await deliver(
                "evt_l2", "charge.dispute.created", dispute: "du_lost", intent: lostIntent, status: "needs_response")
            #expect(message.contains("lost already"), "\(message)")
            let disputed = try await setup.store.ledger.events(after: 0, limit: 100).filter {
                $0.type == .disputed && $0.transactionID == lost.id
            }
            #expect(disputed.count == 1)
        }
    }

    /// A won dispute restores only what the dispute revoked: a purchase refunded before the dispute (whatever the
    /// refund's reason says) stays revoked; and a subscription bought again while the dispute was open is not
    /// given a second, overlapping period.
    @Test func aWonDisputeRestoresOnlyWhatItRevoked() async throws {
        try await Self.withSetup { setup in
            let record = try await Self.buyBook(setup)
            let intent = try #require(setup.double.paymentIntents(forPaymentID: record.paymentID ?? "").first)
            _ = try await setup.store.refund(transactionID: record.id, reason: "disputed by the customer")
            let dispute = try #require(setup.double.openDispute(paymentIntent: intent.id))
            #expect(setup.double.closeDispute(dispute, won: true))
            #expect(
                try await Self.eventually {
                    setup.double.webhookDeliveries.contains { $0.type == "charge.dispute.closed" && $0.status == 200 }
                })
            #expect(try setup.store.ledger.transaction(id: record.id)?.revokedMs != 0, "a refund was undone")
            #expect(
                try await setup.store.ledger.events(after: 0, limit: 100).filter { $0.type == .refundReversed }.isEmpty)

            // A subscription: disputed (REVOKED), subscribed again (the same original id, a new period), then won.
            let buyer = try LifecycleDefectTests.account(setup.store)
            let bought = try await setup.store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased(let plus) = bought.result else { throw StoreError.invalid("not subscribed") }
            let plusIntent = try #require(setup.double.paymentIntents(forPaymentID: plus.paymentID ?? "").first)
            let plusDispute = try #require(setup.double.openDispute(paymentIntent: plusIntent.id))
            #expect(
                try await Self.eventually {
                    try setup.store.ledger.subscription(originalID: plus.id)?.state == .revoked
                })
            let again = try await setup.store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased(let second) = again.result else { throw StoreError.invalid("not subscribed again") }
            #expect(setup.double.closeDispute(plusDispute, won: true))
            #expect(
                try await Self.eventually {
                    setup.double.webhookDeliveries.filter { $0.type == "charge.dispute.closed" && $0.status == 200 }
                        .count == 2
                })
            #expect(try setup.store.ledger.transaction(id: plus.id)?.revokedMs != 0, "two paid periods for one time")
            let subscription = try #require(try setup.store.ledger.subscription(originalID: second.originalID))
            #expect(subscription.latestTransactionID == second.id && subscription.state == .active)
        }
    }

    /// A payment disputed twice: the transaction counts again only when every dispute of it was won (and comes
    /// back once for it), a lost one revokes it whatever came before, in any order of events; a refund after a won
    /// dispute is not undone by a later one; a dispute id known for another transaction changes nothing.
    @Test func aPaymentDisputedTwiceCountsAgainOnlyWhenEveryDisputeIsWon() async throws {
        try await Self.withSetup { setup in
            let store = setup.store
            // The steps (dispute, open/won/lost), whether the book counts at the end, and how often it came back.
            let orders: [([(String, String)], Bool, Int)] = [
                ([("a", "open"), ("b", "open"), ("a", "won"), ("b", "won")], true, 1),
                ([("a", "open"), ("b", "open"), ("b", "won"), ("a", "won")], true, 1),
                ([("a", "open"), ("b", "open"), ("a", "won"), ("b", "lost")], false, 0),
                ([("a", "open"), ("b", "open"), ("b", "lost"), ("a", "won")], false, 0),
                ([("a", "open"), ("b", "open"), ("a", "lost"), ("b", "won")], false, 0),
                ([("a", "open"), ("a", "won"), ("b", "lost")], false, 1),
                ([("a", "open"), ("a", "won"), ("b", "open"), ("b", "won")], true, 2),
                ([("b", "won"), ("a", "open"), ("a", "won")], true, 1),
                ([("a", "lost"), ("b", "open"), ("b", "won")], false, 0),
            ]
            for (index, (steps, counts, comebacks)) in orders.enumerated() {
                let book = try await Self.buyBook(setup)
                for (dispute, action) in steps {
                    let id = "du_\(index)_\(dispute)"
                    if action == "open" {
                        _ = try await store.disputeOpened(id, transactionID: book.id, reason: "fraudulent")
                    } else {
                        _ = try await store.disputeClosed(id, transactionID: book.id, won: action == "won")
                    }
                }
                #expect(try store.ledger.transaction(id: book.id)?.revokedMs == 0 ? counts : !counts, "\(steps)")
                let reversed = try await store.ledger.events(after: 0, limit: 1000).filter {
                    $0.type == .refundReversed && $0.transactionID == book.id
                }
                #expect(reversed.count == comebacks, "\(steps)")
            }

            let refunded = try await Self.buyBook(setup)
            _ = try await store.disputeOpened("du_r_a", transactionID: refunded.id, reason: "fraudulent")
            _ = try await store.disputeClosed("du_r_a", transactionID: refunded.id, won: true)
            _ = try await store.refund(transactionID: refunded.id, reason: "the buyer asked")
            _ = try await store.disputeOpened("du_r_b", transactionID: refunded.id, reason: "fraudulent")
            let message = try await store.disputeClosed("du_r_b", transactionID: refunded.id, won: true)
            #expect(message.contains("nothing to restore"), "\(message)")
            #expect(try store.ledger.transaction(id: refunded.id)?.revokedMs != 0, "a refund was undone")

            let other = try await Self.buyBook(setup)
            let mismatch = await #expect(throws: StoreError.self, "a dispute id of another transaction") {
                _ = try await store.disputeClosed("du_r_a", transactionID: other.id, won: false)
            }
            #expect(mismatch?.kind == .conflict)
            #expect(try store.ledger.transaction(id: other.id)?.revokedMs == 0)
        }
    }

    /// Refunded at Stripe while a dispute holds it revoked (Stripe does not promise order): the refund wins, and
    /// the dispute won later restores nothing; the buyer does not keep both the money and the purchase.
    @Test func aRefundWhileDisputedIsNotUndoneByTheDisputeWon() async throws {
        try await Self.withSetup { setup in
            let now = Int64(Date().timeIntervalSince1970)
            let book = try await Self.buyBook(setup)
            let intent = try #require(setup.double.paymentIntents(forPaymentID: book.paymentID ?? "").first).id
            func deliver(_ id: String, _ type: String, _ object: String) async throws -> String {
                let body = Array(
                    #"{"id":"\#(id)","object":"event","type":"\#(type)","data":{"object":\#(object)}}"#.utf8)
                let (code, message) = try await Self.post(
                    setup.url, body: body,
                    signature: StripeWebhookVerifier.header(payload: body, timestamp: now, secret: Self.secret))
                #expect(code == 200, "\(code) \(message)")
                return message
            }
            let dispute =
                #"{"id":"du_r","object":"dispute","payment_intent":"\#(intent)","reason":"fraudulent","amount":299"#
            _ = try await deliver("evt_r1", "charge.dispute.created", dispute + #","status":"needs_response"}"#)
            let refunded = try await deliver(
                "evt_r2", "charge.refunded",
                #"{"id":"ch_r","object":"charge","payment_intent":"\#(intent)","amount":299,"amount_refunded":299,"refunded":true}"#
            )
            #expect(refunded.contains("stays revoked"), "\(refunded)")
            let won = try await deliver("evt_r3", "charge.dispute.closed", dispute + #","status":"won"}"#)
            #expect(won.contains("nothing to restore"), "\(won)")
            #expect(try setup.store.ledger.transaction(id: book.id)?.revokedMs != 0, "refunded and restored")
        }
    }

    /// A subscription period the dispute revoked that is over by the time the dispute is won comes back as history
    /// (REFUND_REVERSED), though the buyer subscribed again since: restoring it gives nothing twice.
    @Test func aWonDisputeOfAPeriodOverRestoresItsHistory() async throws {
        try await Self.withSetup { setup in
            let store = setup.store
            let buyer = try LifecycleDefectTests.account(store)
            let bought = try await store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased(let plus) = bought.result else { throw StoreError.invalid("not subscribed") }
            _ = try await store.disputeOpened("du_old", transactionID: plus.id, reason: "fraudulent")
            setup.clock.advance(byMs: plus.expiresMs - setup.clock.now + 1)
            let again = try await store.purchase(
                account: buyer, productID: "plus", quantity: 1, paymentMethod: "pm_card_visa", idempotencyKey: nil)
            guard case .purchased(let second) = again.result else { throw StoreError.invalid("not subscribed again") }
            let message = try await store.disputeClosed("du_old", transactionID: plus.id, won: true)
            #expect(message.contains("restored"), "\(message)")
            #expect(try store.ledger.transaction(id: plus.id)?.revokedMs == 0)
            let subscription = try #require(try store.ledger.subscription(originalID: second.originalID))
            #expect(subscription.latestTransactionID == second.id && subscription.state == .active)
        }
    }

    /// Stripe posts only to HTTPS: with the store's TLS identity the endpoint serves HTTPS (on any address);
    /// without one it serves plaintext on loopback only.
    @Test func theEndpointServesHTTPSWithTheStoresIdentity() async throws {
        try await Self.withSetup { setup in
            let directory = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let certificates = try DevelopmentCertificates.create(in: directory)
            let identity = try ServerTLSIdentity(
                certificateChainPath: certificates.serverCertificatePath, privateKeyPath: certificates.serverKeyPath)
            let secure = StripeWebhookServer(store: setup.store)
            try await secure.start(host: "127.0.0.1", port: 0, tls: identity)
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .file(certificates.caCertificatePath)
            let client = HTTPClient(
                eventLoopGroupProvider: .singleton, configuration: HTTPClient.Configuration(tlsConfiguration: tls))
            let body = Array(#"{"id":"evt_tls","object":"event","type":"customer.created","data":{"object":{}}}"#.utf8)
            var request = HTTPClientRequest(url: "https://localhost:\(secure.port)\(StripeWebhookServer.path)")
            request.method = .POST
            request.headers.add(
                name: "Stripe-Signature",
                value: StripeWebhookVerifier.header(
                    payload: body, timestamp: Int64(Date().timeIntervalSince1970), secret: Self.secret))
            request.body = .bytes(ByteBuffer(bytes: body))
            let answer = try await client.execute(request, timeout: .seconds(5))
            _ = try await answer.body.collect(upTo: 1 << 16)
            #expect(answer.status == .ok)
            // Plaintext to the HTTPS port gets no answer.
            await #expect(throws: (any Error).self) {
                _ = try await Self.post(
                    "http://127.0.0.1:\(secure.port)\(StripeWebhookServer.path)", body: body, signature: nil)
            }
            try await client.shutdown()
            await secure.shutdown()
            // Plaintext off loopback: refused before listening.
            await #expect(throws: StoreError.self) {
                try await StripeWebhookServer(store: setup.store).start(host: "0.0.0.0", port: 0)
            }
        }
    }

    /// A purchase whose answer from Stripe was lost is pending; Stripe's payment_intent.succeeded records it
    /// before any reconciliation runs.
    @Test func aSucceededPaymentWhoseAnswerWasLostIsRecordedFromItsEvent() async throws {
        try await Self.withSetup { setup in
            let buyer = try LifecycleDefectTests.account(setup.store)
            setup.double.loseNextAnswers(count: 2)
            await #expect(throws: StoreError.self) {
                try await setup.store.purchase(
                    account: buyer, productID: "book", quantity: 1, paymentMethod: "pm_card_visa",
                    idempotencyKey: "k")
            }
            #expect(
                try await Self.eventually { try !setup.store.ledger.transactions(accountID: buyer.id).isEmpty },
                "the succeeded payment's event did not record it")
            #expect(setup.double.chargeCount == 1)
        }
    }
}
