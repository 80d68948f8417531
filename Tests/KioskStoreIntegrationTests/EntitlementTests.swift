import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskTesting
import KioskWire
import Testing

@testable import KioskStore

/// Entitlements: computed from what the account bought, served (Entitlements, VerifyReceipt), signed into receipts,
/// and recorded as ENTITLEMENT_STARTED / ENTITLEMENT_ENDED events in the write that changed them or by the sweep
/// after the renewal pass. The clock is driven; the RPC tests serve the store on 127.0.0.1.
@Suite struct EntitlementTests {
    static let day: Int64 = 86_400_000

    static let catalog = Catalog(
        bundleID: "com.example.monkeys",
        products: [
            CatalogProduct(
                id: "pro.monthly", type: .autoRenewableSubscription, title: "Pro monthly", price: "4.99",
                currency: "USD", subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"), subscriptionGroup: "pro",
                gracePeriod: SubscriptionPeriod(iso8601: "P6D")),
            CatalogProduct(
                id: "basic.monthly", type: .autoRenewableSubscription, title: "Basic monthly", price: "1.99",
                currency: "USD", subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M"), subscriptionGroup: "pro",
                groupLevel: 2),
            CatalogProduct(
                id: "pro.lifetime", type: .nonConsumable, title: "Pro forever", price: "99", currency: "USD"),
            CatalogProduct(
                id: "pass.week", type: .nonRenewingSubscription, title: "Week pass", price: "0.99", currency: "USD",
                subscriptionPeriod: SubscriptionPeriod(iso8601: "P7D")),
            CatalogProduct(id: "filter.sepia", type: .nonConsumable, title: "Sepia", price: "1.99", currency: "USD"),
            CatalogProduct(
                id: "credits.5", type: .consumable, title: "5 credits", price: "0.99", currency: "USD", credits: 5,
                maxQuantity: 10),
        ],
        entitlements: [
            CatalogEntitlement(id: "pro", title: "Pro", productIDs: ["pro.monthly", "pro.lifetime", "pass.week"]),
            CatalogEntitlement(id: "filters", title: "Filters", productIDs: ["filter.sepia", "pro.lifetime"]),
            CatalogEntitlement(id: "basic", title: "Basic", productIDs: ["basic.monthly"]),
        ])

    struct Fixture {
        let store: Store
        let clock: TestClock
        let payments: TestPaymentProcessor

        func account() throws -> AccountRecord {
            let (id, _) = try store.createAccount()
            return try #require(try store.ledger.account(id: id))
        }

        func buy(_ account: AccountRecord, _ productID: String) async throws -> TransactionRecord {
            let outcome = try await store.purchase(
                account: account, productID: productID, quantity: 1, paymentMethod: goodCard, idempotencyKey: nil)
            guard case .purchased(let record) = outcome.result else {
                throw StoreError.invalid("not purchased: \(outcome.result)")
            }
            return record
        }

        func held(_ account: AccountRecord) async throws -> [String: ActiveEntitlement] {
            Dictionary(uniqueKeysWithValues: try await store.entitlements(accountID: account.id).map { ($0.id, $0) })
        }

        /// The account's entitlement events, oldest first: (type, entitlement, reason).
        func events(_ account: AccountRecord) async throws -> [(EventKind, String, String)] {
            try await store.ledger.events(
                after: 0, accountID: account.id, types: [.entitlementStarted, .entitlementEnded]
            ).map { ($0.type, $0.entitlementID, $0.reason) }
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
        return try await body(Fixture(store: store, clock: clock, payments: payments))
    }

    @Test func aSubscriptionGrantsProUntilItLapsesWithEventsEachWay() async throws {
        try await Self.withFixture { f in
            let account = try f.account()
            #expect(try await f.held(account).isEmpty)
            let first = try await f.buy(account, "pro.monthly")
            let pro = try #require(try await f.held(account)["pro"])
            #expect(pro.source == .subscription && pro.transactionID == first.id && pro.expiresMs == first.expiresMs)
            #expect(pro.willRenew)
            #expect(try await f.held(account)["filters"] == nil, "the subscription grants pro only")
            #expect(try await f.events(account).map(\.0) == [.entitlementStarted])
            // The receipt says what its product granted.
            let receipt = try #require(first.receipt)
            let payload = try #require(try await f.store.verifyReceipt(receipt).check.payload)
            #expect(payload.entitlements == ["pro"])

            // Renewed on time: still held, a later end, no event.
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            let renewed = try #require(try await f.held(account)["pro"])
            #expect(renewed.expiresMs > first.expiresMs && renewed.transactionID != first.id)
            #expect(try await f.events(account).count == 1)

            // Auto-renew off, the period runs out: the renewal pass expires the subscription, and that write records
            // the end.
            let row = try #require(try f.store.ledger.subscription(originalID: first.id))
            _ = try await f.store.setAutoRenew(account: account, originalID: first.id, false)
            f.clock.advance(byMs: row.expiresMs - f.clock.now + 1)
            #expect(try await f.held(account).isEmpty)
            #expect(try await f.store.renewDueSubscriptions().expired == 1)
            let events = try await f.events(account)
            #expect(events.map(\.0) == [.entitlementStarted, .entitlementEnded])
            #expect(events.last?.1 == "pro" && events.last?.2 == "expired")
            // Nothing more on a second pass.
            #expect(try await f.store.renewDueSubscriptions().entitlementsEnded == 0)
        }
    }

    @Test func aLifetimePurchaseOutranksTheSubscriptionAndARefundEndsOnlyWhatItGranted() async throws {
        try await Self.withFixture { f in
            let account = try f.account()
            let monthly = try await f.buy(account, "pro.monthly")
            let lifetime = try await f.buy(account, "pro.lifetime")
            let held = try await f.held(account)
            #expect(held["pro"]?.transactionID == lifetime.id && held["pro"]?.expiresMs == 0)
            #expect(held["pro"]?.source == .purchase)
            #expect(held["filters"]?.transactionID == lifetime.id)
            // pro kept (the subscription took over): no event for it; filters started with the lifetime purchase.
            var events = try await f.events(account)
            #expect(
                events.map { "\($0.0.shortName) \($0.1)" } == [
                    "ENTITLEMENT_STARTED pro", "ENTITLEMENT_STARTED filters",
                ])

            _ = try await f.store.refund(transactionID: lifetime.id, reason: "asked")
            let after = try await f.held(account)
            #expect(after["pro"]?.transactionID == monthly.id, "the subscription still grants pro")
            #expect(after["filters"] == nil)
            events = try await f.events(account)
            #expect(events.count == 3)
            #expect(events.last.map { "\($0.0.shortName) \($0.1) \($0.2)" } == "ENTITLEMENT_ENDED filters revoked")

            _ = try await f.store.refund(transactionID: monthly.id, reason: "asked")
            #expect(try await f.held(account).isEmpty)
            #expect(
                try await f.events(account).last.map { "\($0.0.shortName) \($0.1) \($0.2)" }
                    == "ENTITLEMENT_ENDED pro revoked")
        }
    }

    @Test func aSandboxClockMovedPastSeveralPeriodsRenewsEachWithoutEndingIt() async throws {
        try await Self.withFixture(catchUp: true) { f in
            let account = try f.account()
            _ = try await f.buy(account, "pro.monthly")
            f.clock.advance(byMs: 95 * Self.day)
            #expect(try await f.store.renewDueSubscriptions().renewed == 3)
            #expect(try await f.held(account)["pro"].map { $0.expiresMs > f.clock.now } == true)
            #expect(try await f.events(account).map(\.0) == [.entitlementStarted], "held through the catch-up")
        }
    }

    @Test func anUpgradeToAProductWithoutItEndsItAsUpgraded() async throws {
        try await Self.withFixture { f in
            let account = try f.account()
            _ = try await f.buy(account, "basic.monthly")
            #expect(try await f.held(account)["pro"] == nil)
            #expect(try await f.held(account)["basic"]?.source == .subscription)
            _ = try await f.buy(account, "pro.monthly")
            let held = try await f.held(account)
            #expect(held["pro"] != nil && held["basic"] == nil)
            #expect(
                try await f.events(account).map { "\($0.0.shortName) \($0.1) \($0.2)" } == [
                    "ENTITLEMENT_STARTED basic subscription", "ENTITLEMENT_ENDED basic upgraded",
                    "ENTITLEMENT_STARTED pro subscription",
                ])
        }
    }

    @Test func aGracePeriodKeepsItAndBillingRetryEndsIt() async throws {
        try await Self.withFixture { f in
            let account = try f.account()
            let first = try await f.buy(account, "pro.monthly")
            f.payments.failNextRenewals(Int.max)
            f.clock.advance(byMs: first.expiresMs - f.clock.now)
            _ = try await f.store.renewDueSubscriptions()
            let grace = try #require(try await f.held(account)["pro"])
            let row = try #require(try f.store.ledger.subscription(originalID: first.id))
            #expect(row.state == .inGracePeriod && grace.expiresMs == row.graceEndMs, "held to the grace period's end")
            f.clock.advance(byMs: 7 * Self.day)
            _ = try await f.store.renewDueSubscriptions()
            #expect(try await f.held(account).isEmpty)
            #expect(try await f.events(account).map(\.0) == [.entitlementStarted, .entitlementEnded])
        }
    }

    @Test func aWeekPassEndsByTheSweepAndConsumablesGrantNothing() async throws {
        try await Self.withFixture { f in
            let account = try f.account()
            _ = try await f.buy(account, "credits.5")
            #expect(try await f.held(account).isEmpty)
            let pass = try await f.buy(account, "pass.week")
            #expect(try await f.held(account)["pro"]?.expiresMs == pass.expiresMs)
            f.clock.advance(byMs: 8 * Self.day)
            #expect(try await f.held(account).isEmpty, "answers follow the clock at once")
            #expect(try await f.store.settleEndingEntitlements() == 1)
            #expect(try await f.events(account).last.map { "\($0.0.shortName) \($0.2)" } == "ENTITLEMENT_ENDED expired")
        }
    }

    @Test func theCatalogRefusesAConsumableEntitlementAndUnknownProducts() throws {
        func parse(_ entitlements: String) throws -> Catalog {
            try Catalog.parse(
                Data(
                    """
                    {"products": [
                      {"id": "c", "type": "consumable", "title": "C", "price": "1", "currency": "USD", "credits": 1},
                      {"id": "n", "type": "non-consumable", "title": "N", "price": "1", "currency": "USD"}],
                     "entitlements": \(entitlements)}
                    """.utf8), file: "catalog.json")
        }
        let good = try parse(#"[{"id": "pro", "title": "Pro", "products": ["n"]}]"#)
        #expect(good.product("n")?.entitlements == ["pro"] && good.grantingProductIDs == ["n"])
        #expect(good.product("n")?.message.entitlements == ["pro"])
        #expect(throws: CatalogError.self) { try parse(#"[{"id": "pro", "products": ["c"]}]"#) }
        #expect(throws: CatalogError.self) { try parse(#"[{"id": "pro", "products": ["missing"]}]"#) }
        #expect(throws: CatalogError.self) { try parse(#"[{"id": "pro", "products": []}]"#) }
        #expect(throws: CatalogError.self) { try parse(#"[{"id": "a b", "products": ["n"]}]"#) }
        #expect(throws: CatalogError.self) {
            try parse(#"[{"id": "pro", "products": ["n"]}, {"id": "pro", "products": ["n"]}]"#)
        }
        do {
            _ = try parse(#"[{"id": "pro", "products": ["c"]}]"#)
        } catch let error as CatalogError {
            #expect(error.description.contains("consumable"), "\(error)")
        }
    }

    @Test func theRPCsServeEntitlementsToTheirAccountOnly() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = TestClock()
        let configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: Self.catalog, paymentProcessor: SimulatedPaymentProcessor(),
            clock: clock
        ).onTestLedger()
        let server = try StoreServer(store: configuration)
        try await server.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(server.port))
        func call<Request: WireMessage, Response: WireMessage>(
            _ method: String, _ request: Request, _ response: Response.Type, token: String
        ) async throws -> Response {
            var metadata = Metadata()
            metadata.add("authorization", "Bearer \(token)")
            if method == "Purchase" { metadata.add("idempotency-key", UUID().uuidString) }
            return try await client.unary(
                "/kiosk.store.v1.Store/\(method)", request: request, response: response,
                options: CallOptions(timeout: .seconds(20), metadata: metadata))
        }
        do {
            let buyer = try server.store.createAccount().token
            let other = try server.store.createAccount().token
            let bought = try await call(
                "Purchase", StoreV1.PurchaseRequest(productID: "pro.lifetime", quantity: 1, paymentMethod: goodCard),
                StoreV1.PurchaseResponse.self, token: buyer)
            let transaction = try #require(bought.transaction)
            let answer = try await call(
                "Entitlements", StoreV1.EntitlementsRequest(), StoreV1.EntitlementsResponse.self, token: buyer)
            #expect(answer.entitlements.map(\.entitlementID) == ["filters", "pro"])
            #expect(
                answer.entitlements.allSatisfy { $0.transactionID == transaction.transactionID && $0.expiresMs == 0 })
            #expect(answer.entitlements.first?.source == "purchase")
            #expect(answer.asOfMs == clock.now)
            #expect(
                try await call(
                    "Entitlements", StoreV1.EntitlementsRequest(), StoreV1.EntitlementsResponse.self, token: other
                )
                .entitlements.isEmpty)

            // VerifyReceipt answers them on request, to the receipt's own account.
            let asked = StoreV1.VerifyReceiptRequest(
                signedReceipt: transaction.signedReceipt, includeEntitlements: true)
            let own = try await call("VerifyReceipt", asked, StoreV1.VerifyReceiptResponse.self, token: buyer)
            #expect(own.status == 0 && own.entitlements.map(\.entitlementID) == ["filters", "pro"])
            #expect(own.receipt?.entitlements == ["pro", "filters"], "in catalog order")
            let plain = try await call(
                "VerifyReceipt", StoreV1.VerifyReceiptRequest(signedReceipt: transaction.signedReceipt),
                StoreV1.VerifyReceiptResponse.self, token: buyer)
            #expect(plain.entitlements.isEmpty, "not asked for")
            let foreign = try await call("VerifyReceipt", asked, StoreV1.VerifyReceiptResponse.self, token: other)
            #expect(foreign.status == 0 && foreign.entitlements.isEmpty, "another account's entitlements stay private")
            let content = try server.store.createServiceCredential(role: .content, name: "cdn").secret
            let service = try await call("VerifyReceipt", asked, StoreV1.VerifyReceiptResponse.self, token: content)
            #expect(service.status == 0 && service.entitlements.isEmpty, "a content service needs none")
            let admin = try server.store.createServiceCredential(role: .admin, name: "ops").secret
            let asAdmin = try await call("VerifyReceipt", asked, StoreV1.VerifyReceiptResponse.self, token: admin)
            #expect(asAdmin.entitlements.map(\.entitlementID) == ["filters", "pro"])

            // No token: refused, as every account call.
            await #expect(throws: RPCError.self) {
                _ = try await client.unary(
                    "/kiosk.store.v1.Store/Entitlements", request: StoreV1.EntitlementsRequest(),
                    response: StoreV1.EntitlementsResponse.self, options: CallOptions(timeout: .seconds(5)))
            }
        } catch {
            await client.close()
            await server.shutdown()
            throw error
        }
        await client.close()
        await server.shutdown()
    }
}
