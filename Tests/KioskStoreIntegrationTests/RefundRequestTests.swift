import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

/// Refund requests: a buyer asks (RequestRefund), an operator grants (Admin.Refund) or denies (Admin.DenyRefund);
/// each step an event; asking again answers the same request; bad requests refused, nothing recorded.
@Suite(.timeLimit(.minutes(3))) struct RefundRequestTests {
    static func admin<Request: WireMessage, Response: WireMessage>(
        _ fixture: StoreFixture, _ method: String, _ request: Request, as response: Response.Type, token: String
    ) async throws -> Response {
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        return try await fixture.client.unary(
            "/kiosk.store.v1.Admin/\(method)", request: request, response: response,
            options: CallOptions(timeout: .seconds(20), metadata: metadata))
    }

    static func ask(
        _ fixture: StoreFixture, _ transactionID: String, reason: String = "", token: String
    ) async throws -> StoreV1.RefundRequestStatus {
        try await fixture.call(
            "RequestRefund", StoreV1.RequestRefundRequest(transactionID: transactionID, reason: reason),
            as: StoreV1.RefundRequestStatus.self, token: token)
    }

    static func code(_ body: () async throws -> some Any) async -> StatusCode? {
        do {
            _ = try await body()
            return .ok
        } catch let error as RPCError {
            return error.code
        } catch {
            return nil
        }
    }

    static func list(
        _ fixture: StoreFixture, _ state: StoreV1.RefundRequestState, token: String
    ) async throws -> [String] {
        try await admin(
            fixture, "ListRefundRequests", StoreV1.ListRefundRequestsRequest(state: state),
            as: StoreV1.ListRefundRequestsResponse.self,
            token: token
        ).requests.map(\.transactionID)
    }

    @Test func aBuyerAsksAndAnOperatorGrantsOrDenies() async throws {
        try await StoreFixture.with { fixture in
            let buyer = try fixture.newAccount()
            let (adminID, admin) = try fixture.store.createServiceCredential(role: .admin, name: "ops")
            let credits = try #require(try await fixture.buy("credits.5", token: buyer).transaction)
            let filter = try #require(try await fixture.buy("filter.sepia", token: buyer).transaction)

            let asked = try await Self.ask(fixture, credits.transactionID, reason: "it did not work", token: buyer)
            #expect(
                asked.state == .pending && asked.reason == "it did not work" && asked.productID == "credits.5"
                    && asked.accountID == credits.accountID && asked.requestedMs > 0 && asked.decidedMs == 0)
            // Asking again (a retry, or other words) answers the request already made, and records nothing.
            #expect(try await Self.ask(fixture, credits.transactionID, reason: "please", token: buyer) == asked)
            fixture.clock.advance(byMs: 1)  // oldest first
            _ = try await Self.ask(fixture, filter.transactionID, reason: "bought by mistake", token: buyer)
            #expect(
                try await Self.list(fixture, .pending, token: admin) == [credits.transactionID, filter.transactionID])
            #expect(
                try await Self.list(fixture, .unspecified, token: admin) == [
                    credits.transactionID, filter.transactionID,
                ])

            // Granted: the refund grants it (the money back, the transaction revoked, REFUNDED).
            _ = try await Self.admin(
                fixture, "Refund", StoreV1.RefundRequest(transactionID: credits.transactionID, reason: "goodwill"),
                as: StoreV1.Revocation.self, token: admin)
            let granted = try #require(try fixture.store.ledger.refundRequest(transactionID: credits.transactionID))
            #expect(granted.state == .granted && granted.decisionReason == "goodwill" && granted.decidedMs > 0)
            #expect(try fixture.store.ledger.transaction(id: credits.transactionID)?.revokedMs ?? 0 > 0)
            // Denied: the transaction stays as it was.
            let denied = try await Self.admin(
                fixture, "DenyRefund",
                StoreV1.DenyRefundRequest(transactionID: filter.transactionID, reason: "used for a month"),
                as: StoreV1.RefundRequestStatus.self, token: admin)
            #expect(denied.state == .denied && denied.decisionReason == "used for a month" && denied.decidedMs > 0)
            #expect(try fixture.store.ledger.transaction(id: filter.transactionID)?.revokedMs == 0)
            #expect(try await Self.ask(fixture, filter.transactionID, token: buyer).state == .denied)
            #expect(try await Self.ask(fixture, credits.transactionID, token: buyer).state == .granted)
            #expect(try await Self.list(fixture, .pending, token: admin).isEmpty)
            #expect(try await Self.list(fixture, .granted, token: admin) == [credits.transactionID])
            #expect(try await Self.list(fixture, .denied, token: admin) == [filter.transactionID])

            // Each step an event, with the buyer's and the operator's words.
            let page = try await fixture.call(
                "ListEvents", StoreV1.ListEventsRequest(types: [.refundRequested, .refunded, .refundDenied]),
                as: StoreV1.ListEventsResponse.self, token: admin)
            let events = try page.events.map { try $0.verified(with: try fixture.store.publicKeys()) }
            #expect(events.map(\.type) == [.refundRequested, .refundRequested, .refunded, .refundDenied])
            #expect(
                events.map(\.transactionID) == [
                    credits.transactionID, filter.transactionID, credits.transactionID, filter.transactionID,
                ])
            #expect(events.map(\.reason) == ["it did not work", "bought by mistake", "goodwill", "used for a month"])
            // The operator's decisions name them, signed on the wire; the buyer's requests name no one.
            let operatorName = "admin-rpc \(adminID) (ops)"
            #expect(events.map(\.actor) == ["", "", operatorName, operatorName])
            // The buyer reads the same events without the operator's name.
            let own = try await fixture.call(
                "ListEvents", StoreV1.ListEventsRequest(types: [.refunded, .refundDenied]),
                as: StoreV1.ListEventsResponse.self, token: buyer)
            let ownEvents = try own.events.map { try $0.verified(with: try fixture.store.publicKeys()) }
            #expect(ownEvents.count == 2 && ownEvents.allSatisfy { $0.actor.isEmpty })

            // Refused, nothing recorded: a decided request decided again; another account's transaction; an unknown one;
            // a reason too long; one deferred; one refunded without a request; an account at the Admin service.
            #expect(
                await Self.code {
                    try await Self.admin(
                        fixture, "DenyRefund",
                        StoreV1.DenyRefundRequest(transactionID: filter.transactionID, reason: "again"),
                        as: StoreV1.RefundRequestStatus.self, token: admin)
                } == .failedPrecondition)
            #expect(
                await Self.code {
                    try await Self.admin(
                        fixture, "DenyRefund", StoreV1.DenyRefundRequest(transactionID: "tx_none", reason: "no"),
                        as: StoreV1.RefundRequestStatus.self, token: admin)
                } == .notFound)
            #expect(
                await Self.code {
                    try await Self.admin(
                        fixture, "DenyRefund", StoreV1.DenyRefundRequest(transactionID: filter.transactionID),
                        as: StoreV1.RefundRequestStatus.self, token: admin)
                } == .invalidArgument)
            let other = try fixture.newAccount()
            #expect(await Self.code { try await Self.ask(fixture, filter.transactionID, token: other) } == .notFound)
            #expect(await Self.code { try await Self.ask(fixture, "tx_none", token: buyer) } == .notFound)
            #expect(await Self.code { try await Self.ask(fixture, "", token: buyer) } == .invalidArgument)
            let more = try #require(try await fixture.buy("credits.10", token: buyer).transaction)
            #expect(
                await Self.code {
                    try await Self.ask(
                        fixture, more.transactionID, reason: String(repeating: "é", count: 501), token: buyer)
                } == .invalidArgument)
            let deferred = try #require(
                try await fixture.buy("pro.monthly", method: "test-ask", token: buyer).transaction)
            #expect(
                await Self.code { try await Self.ask(fixture, deferred.transactionID, token: buyer) }
                    == .failedPrecondition)
            _ = try await fixture.store.refund(transactionID: more.transactionID, reason: "chargeback")
            #expect(
                await Self.code { try await Self.ask(fixture, more.transactionID, token: buyer) } == .failedPrecondition
            )
            #expect(await Self.code { try await Self.list(fixture, .pending, token: buyer) } == .permissionDenied)
            #expect(try fixture.store.ledger.refundRequest(transactionID: more.transactionID) == nil)
            #expect(try fixture.store.ledger.refundRequest(transactionID: deferred.transactionID) == nil)
            let after = try await fixture.call(
                "ListEvents", StoreV1.ListEventsRequest(since: page.cursor, types: [.refundRequested, .refundDenied]),
                as: StoreV1.ListEventsResponse.self, token: admin)
            #expect(after.events.isEmpty)
        }
    }

    /// A refund after a denial grants the request (the money went back); a reason with a control character is refused.
    @Test func aRefundAfterADenialGrantsTheRequestAndReasonsAreOneLine() async throws {
        try await StoreFixture.with { fixture in
            let buyer = try fixture.newAccount()
            let bought = try #require(try await fixture.buy("filter.sepia", token: buyer).transaction)
            for reason in ["two\nlines", "a\u{1B}[2Jclear", "tab\there"] {
                #expect(
                    await Self.code { try await Self.ask(fixture, bought.transactionID, reason: reason, token: buyer) }
                        == .invalidArgument, "\(reason.debugDescription)")
            }
            // NUL cannot cross the wire (protobuf-c strings end at it); the store refuses it from any caller.
            await #expect(throws: StoreError.self) {
                try await fixture.store.requestRefund(
                    accountID: bought.accountID, transactionID: bought.transactionID, reason: "nul\u{0}")
            }
            #expect(try fixture.store.ledger.refundRequest(transactionID: bought.transactionID) == nil)
            _ = try await Self.ask(fixture, bought.transactionID, reason: "née — 返金してください", token: buyer)
            await #expect(throws: StoreError.self) {
                try await fixture.store.denyRefund(transactionID: bought.transactionID, reason: "no\r\nREFUND GRANTED")
            }
            try await fixture.store.denyRefund(transactionID: bought.transactionID, reason: "used")
            _ = try await fixture.store.refund(transactionID: bought.transactionID, reason: "changed our mind")
            let request = try #require(try fixture.store.ledger.refundRequest(transactionID: bought.transactionID))
            #expect(
                request.state == .granted && request.decisionReason == "changed our mind"
                    && request.reason == "née — 返金してください")
        }
    }

    @Test func pendingRequestsPageOldestFirst() async throws {
        try await StoreFixture.with { fixture in
            let buyer = try fixture.newAccount()
            var asked: [String] = []
            for product in ["credits.5", "credits.10", "filter.sepia", "pro.monthly", "credits.5"] {
                let bought = try #require(try await fixture.buy(product, token: buyer).transaction)
                fixture.clock.advance(byMs: 1)
                _ = try await Self.ask(fixture, bought.transactionID, token: buyer)
                asked.append(bought.transactionID)
            }
            var paged: [String] = []
            var token = ""
            repeat {
                let page = try fixture.store.ledger.refundRequests(state: .pending, limit: 2, pageToken: token)
                #expect(page.requests.count <= 2)
                paged += page.requests.map(\.transactionID)
                token = page.nextPageToken
                #expect(page.hasMore == !token.isEmpty)
            } while !token.isEmpty
            #expect(paged == asked)
            #expect(throws: StoreError.self) { try fixture.store.ledger.refundRequests(pageToken: "r12") }
            #expect(throws: StoreError.self) { try fixture.store.ledger.refundRequests(pageToken: "q-5.tx") }
        }
    }

    /// A ledger from before the event log (v7) has revocations with no REFUNDED event: the v9 migration adds
    /// them, once, so the content service (following WatchEvents) still refuses those receipts; a webhook that
    /// had queued every event is moved past them (old refunds are not news to its receiver). SQLite only: on
    /// PostgreSQL the backfill numbered its events with the sequence that v10-event-order removed, so it cannot
    /// run again on a ledger of today (it runs, in order, before v10 on every PostgreSQL test database).
    @Test(.enabled(if: !TestLedger.isPostgres)) func revocationsFromBeforeTheEventLogGetTheirEvent() async throws {
        try await StoreFixture.with { fixture in
            let buyer = try fixture.newAccount()
            let bought = try #require(try await fixture.buy("filter.sepia", token: buyer).transaction)
            _ = try await fixture.store.refund(transactionID: bought.transactionID, reason: "old refund")
            // As a ledger written before v7 would hold it: the revocation, no event.
            try await fixture.store.ledger.write { db in
                _ = try db.execute("DELETE FROM events WHERE transaction_id = ?", [bought.transactionID])
            }
            let hook = try await fixture.store.addWebhook(
                url: "http://127.0.0.1:9/kiosk", secret: Array(repeating: 1, count: 16))
            for _ in 0..<2 {
                try await fixture.store.ledger.write { db in
                    _ = try db.execute(LedgerMigration.v009RefundRequests.sqlite[1])
                }
            }
            let events = try await fixture.store.ledger.events(after: 0, limit: 100, types: [.refunded])
            #expect(
                try fixture.store.webhooks().first { $0.id == hook.id }?.enqueuedThrough ?? 0 >= events.last?.id ?? .max
            )
            #expect(
                try fixture.store.webhookDeliveries(webhookID: hook.id, state: nil, limit: 100).allSatisfy {
                    $0.eventID != events.last?.id
                },
                "the backfilled refund is not sent to the webhook")
            #expect(events.count == 1)
            let event = try #require(events.first)
            #expect(
                event.transactionID == bought.transactionID && event.reason == "old refund"
                    && event.productID == "filter.sepia"
                    && event.accountID == bought.accountID && event.createdMs > 0)
        }
    }
}
