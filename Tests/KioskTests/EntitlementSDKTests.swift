import Foundation
import Kiosk
import KioskStore
import KioskTesting
import Testing

/// `kiosk.entitlements["pro"]` end to end: a store and a content service on 127.0.0.1 (TLS), the SDK as an app
/// uses it: a subscription, a lifetime purchase, a refund, an expiry, the copy kept for offline use, updates, and a
/// download gated by the entitlement.
@Suite(.timeLimit(.minutes(2))) struct EntitlementSDKTests {
    static let catalog = Catalog(
        bundleID: "com.example.monkeys",
        products: KioskTestSession.sampleCatalog.products + [
            CatalogProduct(
                id: "pro.lifetime", type: .nonConsumable, title: "Pro forever", price: "49", currency: "USD"),
            CatalogProduct(
                id: "pass.week", type: .nonRenewingSubscription, title: "Week pass", price: "0.99", currency: "USD",
                subscriptionPeriod: SubscriptionPeriod(iso8601: "P7D")),
        ],
        entitlements: [
            CatalogEntitlement(id: "pro", title: "Pro", productIDs: ["pro.monthly", "pro.lifetime", "pass.week"])
        ])

    static let templates = Array("pro templates\n".utf8)

    func withSession<R>(_ body: (KioskTestSession) async throws -> R) async throws -> R {
        let session = try await KioskTestSession.start(
            catalog: Self.catalog, content: ["pro.templates": Self.templates], chunkSize: 64 * 1024,
            contentEntitlements: ["pro.templates": "pro"])
        do {
            let result = try await body(session)
            await session.shutdown()
            return result
        } catch {
            await session.shutdown()
            throw error
        }
    }

    func buy(_ kiosk: KioskClient, _ id: String) async throws -> Transaction {
        let product = try #require(try await kiosk.products(for: [id]).products.first)
        guard case .success(let transaction) = try await kiosk.purchase(product, paymentMethod: card) else {
            throw KioskError(.unknown, "\(id) was not bought")
        }
        try await kiosk.finish(transaction)
        return transaction
    }

    @Test func eachSourceGrantsProWithItsExpiryAndARefundOrExpiryTakesItAway() async throws {
        try await withSession { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            #expect(try await !kiosk.entitlements["pro"].isActive, "nothing bought")
            #expect(try await kiosk.products(for: ["pro.lifetime"]).products.first?.entitlements == ["pro"])

            // A monthly subscription: active, from the subscription, until its period's end, renewing.
            let monthly = try await buy(kiosk, "pro.monthly")
            var pro = try await kiosk.entitlements["pro"]
            #expect(pro.isActive && pro.source == .subscription && pro.willRenew)
            #expect(pro.transactionID == monthly.id && pro.expirationDate == monthly.expirationDate)
            // The store's verification says the same to the app's server.
            let verdict = try await kiosk.verify(receipt: monthly.signedReceipt)
            #expect(verdict.status == 0)

            // Refunded: gone.
            try await session.refund(transactionID: monthly.id)
            #expect(try await !kiosk.entitlements["pro"].isActive)

            // A week pass: until its end; past it (the store's clock moved), gone.
            let pass = try await buy(kiosk, "pass.week")
            pro = try await kiosk.entitlements["pro"]
            #expect(pro.isActive && pro.source == .purchase && pro.expirationDate == pass.expirationDate)
            #expect(!pro.willRenew)
            _ = try await session.advance(by: .seconds(8 * 86_400))
            #expect(try await !kiosk.entitlements["pro"].isActive)

            // A lifetime purchase: no end.
            let lifetime = try await buy(kiosk, "pro.lifetime")
            pro = try await kiosk.entitlements["pro"]
            #expect(pro.isActive && pro.expirationDate == nil && pro.transactionID == lifetime.id)
            await kiosk.close()
        }
    }

    @Test func updatesFollowTheEventsAndTheCopyServesOffline() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let kiosk = try session.makeClient(account: account)
            let initial = try await kiosk.entitlements
            #expect(initial.active.isEmpty && !initial.isCached)
            var updates = kiosk.entitlementUpdates.makeAsyncIterator()
            #expect(await updates.next()?.active.isEmpty == true, "a new listener gets the last value first")

            // Bought on another device: the events bring the change here.
            let other = try session.makeClient(account: account, stateDirectory: nil)
            let lifetime = try await buy(other, "pro.lifetime")
            await other.close()
            let started = await updates.next()
            #expect(started?["pro"].isActive == true && started?["pro"].transactionID == lifetime.id)

            try await session.refund(transactionID: lifetime.id)
            #expect(await updates.next()?["pro"].isActive == false)

            // A week pass, then the store goes away: the copy answers, until the pass's end by the time elapsed.
            let pass = try await buy(kiosk, "pass.week")
            #expect(try await kiosk.entitlements["pro"].isActive)
            let stranger = try session.makeAccount()
            await session.stopStore()
            let cached = try await kiosk.entitlements
            #expect(cached.isCached && cached["pro"].isActive && cached["pro"].transactionID == pass.id)
            await kiosk.close()

            // Another token on the same state directory does not read this account's copy.
            let elsewhere = try session.makeClient(
                account: stranger, stateDirectory: kiosk.configuration.stateDirectory)
            await #expect(throws: KioskError.self) { _ = try await elsewhere.entitlements }
            await elsewhere.close()
        }
    }

    @Test func aGrantAndAnExtensionFromTheTestSessionReachTheApp() async throws {
        try await withSession { session in
            let account = try session.makeAccount()
            let kiosk = try session.makeClient(account: account)
            let grant = try await session.grant(account, entitlementID: "pro", days: 30)
            let pro = try await kiosk.entitlements["pro"]
            #expect(pro.isActive && pro.source == .grant && pro.transactionID == grant && pro.productID == "grant:pro")
            try await session.refund(transactionID: grant)
            #expect(try await !kiosk.entitlements["pro"].isActive)

            // An extension moves the subscription's end; the app gets the transaction again with it.
            let monthly = try await buy(kiosk, "pro.monthly")
            var updates = kiosk.transactionUpdates.makeAsyncIterator()
            try await session.extendSubscription(originalID: monthly.id, days: 10)
            let extended = try #require(try await kiosk.entitlements["pro"].expirationDate)
            #expect(extended.timeIntervalSince(try #require(monthly.expirationDate)) == 10 * 86_400)
            var seen: Transaction?
            while let next = await updates.next() {
                if next.id == monthly.id {
                    seen = next
                    break
                }
            }
            #expect(seen?.expirationDate == extended)
            #expect(try await session.extendSubscriptions(productID: "pro.monthly", days: 1) == 1)
            await kiosk.close()
        }
    }

    @Test func aRedeemedCodeGrantsProAndAWrongOneSaysWhy() async throws {
        try await withSession { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            let codes = try await session.makeOfferCodes(productID: "pro.lifetime", count: 2, batchID: "launch")
            guard case .success(let transaction) = try await kiosk.redeem(code: codes[0]) else {
                Issue.record("the code was not redeemed")
                return
            }
            #expect(transaction.productID == "pro.lifetime" && transaction.offerID == "code:launch")
            let pro = try await kiosk.entitlements["pro"]
            #expect(pro.isActive && pro.source == .offerCode && pro.expirationDate == nil)

            let other = try session.makeClient(account: try session.makeAccount())
            let used = await #expect(throws: KioskError.self) { _ = try await other.redeem(code: codes[0]) }
            #expect(used?.code == .invalidOfferIdentifier && used?.message.hasPrefix("offer_code_used") == true)
            let unknown = await #expect(throws: KioskError.self) { _ = try await other.redeem(code: "NOPE-NOPE") }
            #expect(unknown?.message.hasPrefix("offer_code_unknown") == true)
            try await session.revokeOfferCodes(batchID: "launch")
            let revoked = await #expect(throws: KioskError.self) { _ = try await other.redeem(code: codes[1]) }
            #expect(revoked?.message.hasPrefix("offer_code_revoked") == true)

            // A month of pro.monthly, free: a subscription's code takes the card renewals will charge.
            let month = try await session.makeOfferCodes(productID: "pro.monthly", period: "P1M")
            guard case .success(let subscribed) = try await other.redeem(code: month[0], paymentMethod: card) else {
                Issue.record("the subscription code was not redeemed")
                return
            }
            let proMonth = try await other.entitlements["pro"]
            #expect(proMonth.source == .offerCode && proMonth.expirationDate == subscribed.expirationDate)
            await kiosk.close()
            await other.close()
        }
    }

    @Test func theContentServiceOpensAnEntitlementsItemToAnyGrantingTransaction() async throws {
        try await withSession { session in
            let kiosk = try session.makeClient(account: try session.makeAccount())
            let hosted = try await kiosk.hostedProducts()
            #expect(hosted.first?.entitlementID == "pro")
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-entitlement-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: directory) }

            // Without pro: refused.
            await #expect(throws: KioskError.self) {
                _ = try await kiosk.download(productID: "pro.templates", entitlement: .inactive("pro"), to: directory)
            }
            let sepia = try await buy(kiosk, "filter.sepia")
            await #expect(throws: KioskError.self) {
                _ = try await kiosk.download(productID: "pro.templates", transaction: sepia, to: directory).result()
            }

            // The subscription opens it.
            let monthly = try await buy(kiosk, "pro.monthly")
            let pro = try await kiosk.entitlements["pro"]
            let file = try await kiosk.download(productID: "pro.templates", entitlement: pro, to: directory).result()
            #expect(try Array(Data(contentsOf: file)) == Self.templates)

            // Refunded: the content service refuses that receipt once its event feed brings the refund (each try a
            // fresh download; bounded).
            try await session.refund(transactionID: monthly.id)
            var refused = false
            for attempt in 0..<200 where !refused {
                let fresh = directory.appendingPathComponent("try-\(attempt)")
                do {
                    _ = try await kiosk.download(productID: "pro.templates", transaction: monthly, to: fresh).result()
                    try await Task.sleep(for: .milliseconds(25))
                } catch let error as KioskError {
                    refused = error.code == .downloadRefused
                }
            }
            #expect(refused)
            await kiosk.close()
        }
    }
}
