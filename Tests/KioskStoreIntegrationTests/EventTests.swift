import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskWire
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// The event log: one signed event per change, in the same write; WatchEvents and ListEvents;
/// GetTransaction, ListTransactions with filters and revisions; declines and expiring ask-to-buy requests.
@Suite(.timeLimit(.minutes(3))) struct EventTests {
    static func serviceToken(_ fixture: StoreFixture, role: CallerRole = .admin) throws -> String {
        try fixture.store.createServiceCredential(role: role, name: "events").secret
    }

    static func listEvents(
        _ fixture: StoreFixture, token: String, since: UInt64 = 0, limit: UInt32 = 0,
        types: [StoreV1.EventType] = []
    ) async throws -> StoreV1.ListEventsResponse {
        try await fixture.call(
            "ListEvents", StoreV1.ListEventsRequest(since: since, limit: limit, types: types),
            as: StoreV1.ListEventsResponse.self, token: token)
    }

    static func decoded(_ page: StoreV1.ListEventsResponse, keys: [ReceiptPublicKey]) throws -> [StoreV1.Event] {
        try page.events.map { try $0.verified(with: keys) }
    }

    @Test func everyKindOfChangeRecordsOneSignedEventInOrder() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let bought = try #require(try await fixture.buy("credits.5", quantity: 2, token: token).transaction)
            let asked = try #require(
                try await fixture.buy("filter.sepia", method: "test-ask", token: token).transaction)
            _ = try await fixture.store.approve(transactionID: asked.transactionID)
            let refused = try #require(
                try await fixture.buy("credits.10", method: "test-ask", token: token).transaction)
            try await fixture.store.decline(transactionID: refused.transactionID)
            _ = try await fixture.call(
                "SpendCredits", StoreV1.SpendCreditsRequest(amount: 7), as: StoreV1.SpendCreditsResponse.self,
                token: token)
            _ = try await fixture.store.refund(transactionID: bought.transactionID, reason: "chargeback")
            try await fixture.store.recordTestEvent()

            let keys = try fixture.store.publicKeys()
            let page = try await Self.listEvents(fixture, token: try Self.serviceToken(fixture))
            let events = try Self.decoded(page, keys: keys)
            #expect(events.map(\.type) == [.purchased, .deferred, .approved, .deferred, .declined, .refunded, .test])
            #expect(
                events.map(\.eventID) == events.map(\.eventID).sorted()
                    && Set(events.map(\.eventID)).count == events.count)
            #expect(
                events.map(\.transactionID).prefix(6) == [
                    bought.transactionID, asked.transactionID, asked.transactionID,
                    refused.transactionID, refused.transactionID, bought.transactionID,
                ])
            let refund = events[5]
            #expect(
                refund.reason == "chargeback" && refund.creditShortfall == 7 && refund.accountID == bought.accountID)
            #expect(events[4].reason == "declined")
            #expect(events.allSatisfy { $0.environment == .sandbox })
            #expect(page.cursor == events.last?.eventID && !page.hasMore)

            // The declined request is FAILED (payment cancelled), not deferred; nothing was charged.
            let declined = try #require(try fixture.store.ledger.transaction(id: refused.transactionID))
            #expect(declined.state == .failed && declined.errorCode == 2 && declined.errorReason == "declined")
            await #expect(throws: StoreError.self) {
                try await fixture.store.decline(transactionID: refused.transactionID)
            }

            // A byte changed, or another key: refused.
            var tampered = page.events[0]
            tampered.event[tampered.event.count - 1] ^= 1
            #expect(throws: StoreV1.SignedEvent.VerificationError.self) { try tampered.verified(with: keys) }
            #expect(throws: StoreV1.SignedEvent.VerificationError.self) { try page.events[0].verified(with: []) }

            // An account lists only its own events; another account sees none of them.
            let own = try Self.decoded(try await Self.listEvents(fixture, token: token), keys: keys)
            #expect(own.map(\.type) == [.purchased, .deferred, .approved, .deferred, .declined, .refunded])
            let other = try fixture.newAccount()
            #expect(try await Self.listEvents(fixture, token: other).events.isEmpty)

            // Paging and filters: two at a time from any cursor gives the rest, once each.
            var cursor: UInt64 = 0
            var paged: [UInt64] = []
            var more = true
            while more {
                let next = try await Self.listEvents(
                    fixture, token: try Self.serviceToken(fixture), since: cursor, limit: 2)
                paged += try Self.decoded(next, keys: keys).map(\.eventID)
                cursor = next.cursor
                more = next.hasMore
            }
            #expect(paged == events.map(\.eventID))
            let refunds = try Self.decoded(
                try await Self.listEvents(fixture, token: token, types: [.refunded, .declined, .refunded]), keys: keys)
            #expect(refunds.map(\.type) == [.declined, .refunded])
            // A types list longer than there are types is refused before any query is built.
            let tooMany = await #expect(throws: RPCError.self) {
                try await Self.listEvents(fixture, token: token, types: Array(repeating: .refunded, count: 10_000))
            }
            #expect(tooMany?.code == .invalidArgument)
        }
    }

    @Test func watchEventsResumedFromAnyCursorYieldsTheRestExactlyOnce() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            for _ in 0..<6 { _ = try await fixture.buy("credits.5", token: token) }
            let service = try Self.serviceToken(fixture, role: .content)
            let all = try Self.decoded(
                try await Self.listEvents(fixture, token: service), keys: try fixture.store.publicKeys()
            ).map(\.eventID)
            #expect(all.count == 6)
            var metadata = Metadata()
            metadata.add("authorization", "Bearer \(service)")
            for since in [0] + all {
                let before = try Self.decoded(
                    try await Self.listEvents(fixture, token: service, since: since, limit: 500),
                    keys: try fixture.store.publicKeys()
                ).map(\.eventID)
                // Events recorded while the stream runs arrive after the backlog, in order, once.
                let stream = fixture.client.serverStreaming(
                    "/kiosk.store.v1.Store/WatchEvents", request: StoreV1.WatchEventsRequest(since: since),
                    response: StoreV1.WatchEventsResponse.self,
                    options: CallOptions(timeout: .seconds(20), metadata: metadata))
                var iterator = stream.makeAsyncIterator()
                var received: [UInt64] = []
                var live: UInt64?
                while let message = try await iterator.next() {
                    if let signed = message.event {
                        let event = try signed.verified(with: try fixture.store.publicKeys())
                        #expect(event.eventID == message.cursor)
                        received.append(event.eventID)
                        if event.eventID == live { break }
                    } else if live == nil {
                        // Caught up (a heartbeat): record one more change; it must arrive next.
                        #expect(message.cursor == (received.last ?? since))
                        _ = try await fixture.buy("credits.10", token: token)
                        live = try fixture.store.ledger.latestEventID()
                    }
                }
                #expect(Array(received.dropLast()) == before, "since \(since)")
                #expect(received.last == live)
            }
            // A type filter: only refunds, and the cursor still moves past what it leaves out.
            let target = try #require(try await fixture.buy("filter.sepia", token: token).transaction)
            let stream = fixture.client.serverStreaming(
                "/kiosk.store.v1.Store/WatchEvents", request: StoreV1.WatchEventsRequest(since: 0, types: [.refunded]),
                response: StoreV1.WatchEventsResponse.self,
                options: CallOptions(timeout: .seconds(20), metadata: metadata))
            var iterator = stream.makeAsyncIterator()
            _ = try await fixture.store.refund(transactionID: target.transactionID, reason: "test")
            while let message = try await iterator.next() {
                guard let signed = message.event else { continue }
                let event = try signed.verified(with: try fixture.store.publicKeys())
                #expect(event.type == .refunded && event.transactionID == target.transactionID)
                break
            }
            // An account may not watch the log.
            let refused = await #expect(throws: RPCError.self) {
                var denied = Metadata()
                denied.add("authorization", "Bearer \(token)")
                for try await _ in fixture.client.serverStreaming(
                    "/kiosk.store.v1.Store/WatchEvents", request: StoreV1.WatchEventsRequest(),
                    response: StoreV1.WatchEventsResponse.self,
                    options: CallOptions(timeout: .seconds(5), metadata: denied))
                {}
            }
            #expect(refused?.code == .permissionDenied)
        }
    }

    @Test func getTransactionAnswersTheOwnerAndAdminsOnly() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let bought = try #require(try await fixture.buy("credits.5", token: token).transaction)
            let found = try await fixture.call(
                "GetTransaction", StoreV1.GetTransactionRequest(transactionID: bought.transactionID),
                as: StoreV1.Transaction.self, token: token)
            #expect(found.transactionID == bought.transactionID && found.productID == "credits.5")
            let admin = try await fixture.call(
                "GetTransaction", StoreV1.GetTransactionRequest(transactionID: bought.transactionID),
                as: StoreV1.Transaction.self, token: try Self.serviceToken(fixture))
            #expect(admin.accountID == bought.accountID)
            for (id, caller) in [(bought.transactionID, try fixture.newAccount()), ("tx_nope", token)] {
                let error = await #expect(throws: RPCError.self) {
                    try await fixture.call(
                        "GetTransaction", StoreV1.GetTransactionRequest(transactionID: id),
                        as: StoreV1.Transaction.self, token: caller)
                }
                #expect(error?.code == .notFound)
            }
        }
    }

    @Test func listTransactionsFiltersAndARevisionGivesOnlyWhatChanged() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let credits = try #require(try await fixture.buy("credits.5", token: token).transaction)
            let sepia = try #require(try await fixture.buy("filter.sepia", token: token).transaction)
            let monthly = try #require(try await fixture.buy("pro.monthly", token: token).transaction)
            func list(_ request: StoreV1.ListTransactionsRequest) async throws -> StoreV1.ListTransactionsResponse {
                try await fixture.call(
                    "ListTransactions", request, as: StoreV1.ListTransactionsResponse.self, token: token)
            }
            let all = try await list(StoreV1.ListTransactionsRequest())
            #expect(
                all.transactions.map(\.transactionID) == [
                    credits.transactionID, sepia.transactionID, monthly.transactionID,
                ])
            #expect(
                try await list(StoreV1.ListTransactionsRequest(productTypes: [.consumable])).transactions.map(
                    \.transactionID) == [credits.transactionID])
            #expect(
                try await list(StoreV1.ListTransactionsRequest(productIDs: ["filter.sepia", "pro.monthly"]))
                    .transactions.count == 2)
            // Only what changed after the revision: a refund and a new purchase.
            _ = try await fixture.store.refund(transactionID: sepia.transactionID, reason: "test")
            let later = try #require(try await fixture.buy("credits.10", token: token).transaction)
            let changed = try await list(StoreV1.ListTransactionsRequest(revision: all.revision))
            #expect(changed.transactions.map(\.transactionID) == [sepia.transactionID, later.transactionID])
            #expect(changed.transactions.first?.revocationReason == "test")
            #expect(
                try await list(StoreV1.ListTransactionsRequest(revoked: 1)).transactions.map(\.transactionID) == [
                    sepia.transactionID
                ])
            #expect(try await list(StoreV1.ListTransactionsRequest(revision: changed.revision)).transactions.isEmpty)
            for bad in [
                StoreV1.ListTransactionsRequest(pageToken: "garbage"), StoreV1.ListTransactionsRequest(revision: "x1"),
                StoreV1.ListTransactionsRequest(revoked: 3),
            ] {
                let error = await #expect(throws: RPCError.self) { try await list(bad) }
                #expect(error?.code == .invalidArgument)
            }
        }
    }

    @Test func pagingTwentyThousandTransactionsWhilePurchasesContinueSkipsAndRepeatsNothing() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let account = try #require(try await fixture.store.ledger.account(tokenHash: Store.hash(token)))
            let ids = try await PagingTests.seed(fixture.store, account: account.id, count: PagingTests.count)
            let buying = Task {
                var bought: [String] = []
                while !Task.isCancelled {
                    guard let id = try? await fixture.buy("credits.5", token: token).transaction?.transactionID else {
                        break
                    }
                    bought.append(id)
                }
                return bought
            }
            var seen: [String] = []
            var pageToken = ""
            var revision = ""
            repeat {
                let page = try await fixture.call(
                    "ListTransactions", StoreV1.ListTransactionsRequest(limit: 500, pageToken: pageToken),
                    as: StoreV1.ListTransactionsResponse.self, token: token)
                seen += page.transactions.map(\.transactionID)
                if revision.isEmpty { revision = page.revision }
                #expect(page.revision == revision, "every page of a listing answers its first page's revision")
                pageToken = page.hasMore ? page.nextPageToken : ""
            } while !pageToken.isEmpty
            buying.cancel()
            let bought = await buying.value
            #expect(Set(seen).count == seen.count, "no row repeated")
            #expect(Array(seen.prefix(ids.count)) == ids, "every seeded row, in order")
            #expect(seen.dropFirst(ids.count).allSatisfy { $0.hasPrefix("tx_") })
            // What the listing's revision did not hold comes with the next one: together, every purchase.
            let changed = try await fixture.call(
                "ListTransactions", StoreV1.ListTransactionsRequest(limit: 500, revision: revision),
                as: StoreV1.ListTransactionsResponse.self, token: token)
            #expect(Set(bought).isSubset(of: Set(seen).union(changed.transactions.map(\.transactionID))))
        }
    }

    @Test func askToBuyRequestsExpireAsDeclines() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let asked = try #require(
                try await fixture.buy("filter.sepia", method: "test-ask", token: token).transaction)
            #expect(try await fixture.store.expireAskToBuyRequests() == 0)
            fixture.clock.advance(byMs: 24 * 3_600_000 + 1)
            #expect(try await fixture.store.expireAskToBuyRequests() == 1)
            let record = try #require(try fixture.store.ledger.transaction(id: asked.transactionID))
            #expect(record.state == .failed && record.errorReason == "expired")
            await #expect(throws: StoreError.self) {
                try await fixture.store.approve(transactionID: asked.transactionID)
            }
            let events = try await fixture.store.ledger.events(after: 0, accountID: record.accountID)
            #expect(events.map(\.type) == [.deferred, .declined] && events.last?.reason == "expired")
            // The buyer can ask again.
            #expect(
                try await fixture.buy("filter.sepia", method: "test-ask", token: token).transaction?.state == .deferred)
        }
    }

    /// Events the feed cannot sign (no usable key) fail the stream (UNAVAILABLE) instead of being passed over by
    /// heartbeats: a content service would otherwise look current while it missed refunds. Signing again, they flow.
    @Test func eventsTheFeedCannotSignFailTheStreamUntilItCan() async throws {
        try await StoreFixture.with { fixture in
            let store = fixture.store
            let failing = NIOLockedValueBox(false)
            let feed = RevocationFeed(ledger: store.ledger, pollInterval: .milliseconds(20)) { record in
                if failing.withLockedValue({ $0 }) { throw StoreError(.internalFailure, "no usable signing key") }
                return try store.signed(record)
            }
            feed.start()
            defer { feed.stop() }
            let token = try fixture.newAccount()
            let first = try #require(try await fixture.buy("credits.5", token: token).transaction)
            let deadline = ContinuousClock.now + .seconds(20)
            func poll(_ done: () async -> Bool) async throws {
                while !(await done()) {
                    try #require(ContinuousClock.now < deadline, "the feed never got there")
                    try await Task.sleep(for: .milliseconds(10))
                }
            }
            try await poll {
                (try? await feed.events(after: 0).events.contains { $0.record.transactionID == first.transactionID })
                    ?? false
            }

            failing.withLockedValue { $0 = true }
            let second = try #require(try await fixture.buy("credits.10", token: token).transaction)
            try await poll {
                do {
                    _ = try await feed.events(after: 0)
                    return false
                } catch let error as RPCError { return error.code == .unavailable } catch { return false }
            }
            failing.withLockedValue { $0 = false }
            try await poll {
                (try? await feed.events(after: 0).events.contains { $0.record.transactionID == second.transactionID })
                    ?? false
            }
        }
    }
}
