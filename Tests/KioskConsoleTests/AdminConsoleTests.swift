import Foundation
import KioskConsole
import KioskRPC
import KioskStore
import KioskStoreTestSupport
import Testing

/// The admin console over real HTTP on 127.0.0.1: sign-in and its cookie, sessions that end, CSRF and origin
/// checks, and actions that are the store's own calls, recorded with who did them.
@Suite(.timeLimit(.minutes(3))) struct AdminConsoleTests {
    @Test func pagesNeedASessionAndTheCookieIsHttpOnlyAndStrict() async throws {
        try await ConsoleFixture.with { fixture in
            var browser = Browser(fixture)
            for path in ["/", "/products", "/accounts", "/refunds", "/webhooks", "/keys", "/activity"] {
                let answer = try await browser.get(path)
                #expect(answer.status == 303 && answer.location == "/signin", "\(path) without a session")
            }
            #expect(try await browser.post("/keys/rotate", [("csrf", "x")]).status == 403)
            let signedIn = try await browser.signIn(fixture.admin.secret)
            #expect(signedIn.status == 303 && signedIn.location == "/")
            let session = try #require(browser.lastSetCookies.first { $0.hasPrefix(AdminConsole.cookieName + "=") })
            #expect(session.contains("HttpOnly") && session.contains("SameSite=Strict") && session.contains("Path=/"))
            #expect(!session.contains("Secure"), "plaintext on loopback: a Secure cookie would never be sent back")
            for path in ["/", "/products", "/refunds", "/webhooks", "/keys", "/activity"] {
                let answer = try await browser.get(path)
                #expect(answer.status == 200, "\(path)")
                #expect(answer.headers.first(name: "Content-Security-Policy")?.contains("default-src 'none'") == true)
                #expect(answer.headers.first(name: "Cache-Control") == "no-store")
                #expect(!answer.body.contains("<script"), "\(path) has no script")
            }
            // Signing out ends the session on the server, not only in the browser.
            let kept = browser.cookies
            let page = try await browser.get("/")
            #expect(try await browser.post("/signout", [("csrf", try #require(page.csrf))]).location == "/signin")
            browser.cookies = kept
            #expect(try await browser.get("/").location == "/signin")
        }
    }

    @Test func theCookieIsSecureOverTLS() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let certificates = try DevelopmentCertificates.create(in: directory)
        try await ConsoleFixture.with(tls: certificates) { fixture in
            var browser = Browser(fixture)
            #expect(try await browser.signIn(fixture.admin.secret).location == "/")
            let session = try #require(
                browser.lastSetCookies.first { $0.hasPrefix(AdminConsole.secureCookieName + "=") })
            #expect(session.contains("Secure") && session.contains("HttpOnly") && session.contains("SameSite=Strict"))
            #expect(session.contains("Path=/") && !session.contains("Domain"), "what the __Host- prefix requires")
            #expect(try await browser.get("/").status == 200)
        }
    }

    @Test func aBadSignInTakesAsLongAsAGoodOneAndRepeatedFailuresAreRefused() async throws {
        var configuration = AdminConsole.Configuration.fast
        configuration.failedSignInsPerMinute = 3
        try await ConsoleFixture.with(configuration: configuration) { fixture in
            let content = try fixture.store.createServiceCredential(role: .content, name: "cdn").secret
            let accountToken = try fixture.store.createAccount().token
            let floor = configuration.signInTime
            var browser = Browser(fixture)
            // Refused, each at the floor: nonsense, a content credential, a buyer's token.
            for credential in ["ksvc_" + String(repeating: "0", count: 64), content, accountToken] {
                let started = ContinuousClock.now
                let answer = try await browser.signIn(credential)
                #expect(ContinuousClock.now - started >= floor)
                #expect(answer.status == 401, "\(credential.prefix(5))")
                #expect(browser.cookies[AdminConsole.cookieName] == nil)
            }
            // Three failures within the minute: more guesses are answered 429 (at the floor too) until it passes;
            // the good credential still signs in, so a guesser cannot lock the operators out.
            let throttled = ContinuousClock.now
            #expect(try await browser.signIn("ksvc_guess").status == 429)
            #expect(ContinuousClock.now - throttled >= floor)
            let started = ContinuousClock.now
            #expect(try await browser.signIn(fixture.admin.secret).status == 303)
            #expect(ContinuousClock.now - started >= floor)
            fixture.clock.advance(byMs: 61_000)
            #expect(try await browser.signIn("ksvc_guess").status == 401)
            // The sign-in form's own CSRF token: a POST without its cookie is refused.
            var stranger = Browser(fixture)
            let form = try await stranger.get("/signin")
            stranger.cookies = [:]
            let forged = try await stranger.post(
                "/signin", [("csrf", try #require(form.csrf)), ("credential", fixture.admin.secret)])
            #expect(forged.status == 403 && stranger.cookies[AdminConsole.cookieName] == nil)
        }
    }

    @Test func sessionsExpireWhenIdleAtTheirLifetimeAndWithTheirCredential() async throws {
        try await ConsoleFixture.with { fixture in
            var browser = Browser(fixture)
            try await browser.signIn(fixture.admin.secret)
            fixture.clock.advance(byMs: 29 * 60_000)
            #expect(try await browser.get("/").status == 200)
            fixture.clock.advance(byMs: 30 * 60_000)
            #expect(try await browser.get("/").location == "/signin", "idle for 30 minutes")

            try await browser.signIn(fixture.admin.secret)
            for _ in 0..<17 {
                fixture.clock.advance(byMs: 29 * 60_000)
                _ = try await browser.get("/")
            }
            #expect(try await browser.get("/").location == "/signin", "8 hours after sign-in, used or not")

            try await browser.signIn(fixture.admin.secret)
            #expect(try await browser.get("/").status == 200)
            try fixture.store.revokeServiceCredential(id: fixture.admin.id)
            #expect(try await browser.get("/").location == "/signin", "its credential revoked")
            #expect(try await browser.signIn(fixture.admin.secret).status == 401)
        }
    }

    @Test func sessionsAreCappedAndTheOldestGoesFirst() async throws {
        var configuration = AdminConsole.Configuration.fast
        configuration.maxSessions = 2
        try await ConsoleFixture.with(configuration: configuration) { fixture in
            var first = Browser(fixture)
            var second = Browser(fixture)
            var third = Browser(fixture)
            try await first.signIn(fixture.admin.secret)
            fixture.clock.advance(byMs: 1)
            try await second.signIn(fixture.admin.secret)
            fixture.clock.advance(byMs: 1)
            try await third.signIn(fixture.admin.secret)
            #expect(try await first.get("/").location == "/signin", "the oldest of three, over a cap of two")
            #expect(try await second.get("/").status == 200)
            #expect(try await third.get("/").status == 200)
        }
    }

    @Test func aPostWithoutTheTokenOrFromAnotherOriginDoesNothing() async throws {
        try await ConsoleFixture.with { fixture in
            var browser = Browser(fixture)
            try await browser.signIn(fixture.admin.secret)
            let keys = try fixture.store.publicKeys().count
            let token = try #require(try await browser.get("/keys").csrf)
            #expect(try await browser.post("/keys/rotate", []).status == 403)
            #expect(try await browser.post("/keys/rotate", [("csrf", String(token.reversed()))]).status == 403)
            #expect(
                try await browser.post("/keys/rotate", [("csrf", token)], origin: "https://evil.example").status == 403)
            #expect(try fixture.store.publicKeys().count == keys)
            let done = try await browser.post("/keys/rotate", [("csrf", token)])
            #expect(done.status == 303 && done.location == "/keys")
            #expect(try fixture.store.publicKeys().count == keys + 1)
            #expect(try await browser.get("/keys").body.contains("id=\"flash\">Rotated: "))
        }
    }

    @Test func actionsAreTheStoresCallsRecordedWithTheOperator() async throws {
        try await ConsoleFixture.with { fixture in
            let store = fixture.store
            var browser = Browser(fixture)
            try await browser.signIn(fixture.admin.secret)
            let actor = "console \(fixture.admin.id) (alice)"

            // A refund request, granted: the store's refund, its REFUNDED event naming the operator.
            let (buyer, bought) = try await fixture.purchase("filter.sepia")
            _ = try await store.requestRefund(accountID: buyer.id, transactionID: bought, reason: "<b>broken</b>")
            let refunds = try await browser.get("/refunds")
            #expect(refunds.body.contains("&lt;b&gt;broken&lt;/b&gt;") && !refunds.body.contains("<b>broken"))
            let token = try #require(refunds.csrf)
            #expect(
                try await browser.post(
                    "/refunds/grant", [("csrf", token), ("transaction_id", bought), ("reason", "sorry")]
                ).location == "/refunds")
            #expect(try store.ledger.transaction(id: bought)?.revokedMs != 0)
            let refunded = try await store.ledger.events(after: 0, accountID: buyer.id, types: [.refunded])
            #expect(refunded.map(\.actor) == [actor])

            // A second refund of it is refused, with the store's words, and records nothing.
            let before = try store.ledger.latestEventID()
            #expect(
                try await browser.post(
                    "/accounts/refund",
                    [("csrf", token), ("transaction_id", bought), ("reason", "again"), ("account", buyer.id)]
                ).status == 303)
            #expect(try await browser.get("/accounts?q=\(buyer.id)").body.contains("Not done: "))
            #expect(try store.ledger.latestEventID() == before)

            // Denied: REFUND_DENIED names the operator.
            let (other, second) = try await fixture.purchase("credits.5")
            _ = try await store.requestRefund(accountID: other.id, transactionID: second, reason: "")
            _ = try await browser.post(
                "/refunds/deny", [("csrf", token), ("transaction_id", second), ("reason", "used")])
            let denied = try await store.ledger.events(after: 0, accountID: other.id, types: [.refundDenied])
            #expect(denied.map(\.actor) == [actor])

            // Keys and credentials: each an OPERATOR_ACTION event in the same write.
            _ = try await browser.post("/keys/rotate", [("csrf", token)])
            let keys = try store.publicKeys()
            _ = try await browser.post("/keys/retire", [("csrf", token), ("key_id", keys[keys.count - 2].id)])
            #expect(try store.publicKeys()[keys.count - 2].isRetired)
            let created = try await browser.post(
                "/credentials/create", [("csrf", token), ("role", "content"), ("name", "cdn-eu")])
            #expect(created.status == 303 && created.location == "/keys")
            // The secret is shown once, on the page the action redirects to.
            #expect(try await browser.get("/keys").body.contains("id=\"secret\">ksvc_"))
            #expect(!(try await browser.get("/keys").body.contains("ksvc_")))
            let cdn = try #require(try store.ledger.serviceCredentials().first { $0.name == "cdn-eu" })
            _ = try await browser.post("/credentials/revoke", [("csrf", token), ("credential_id", cdn.id)])
            #expect(try store.ledger.serviceCredentials().first { $0.id == cdn.id }?.revokedMs != 0)
            // Nothing to redrive: nothing done, nothing recorded.
            _ = try await browser.post("/webhooks/redrive", [("csrf", token)])
            let actions = try await store.ledger.events(after: 0, types: [.operatorAction]).filter { $0.actor == actor }
            #expect(actions.count == 4)
            #expect(actions.map(\.reason).contains { $0.hasPrefix("rotated signing keys: ") })
            #expect(actions.map(\.reason).contains("revoked service credential \(cdn.id)"))
            #expect(!actions.map(\.reason).contains { $0.hasPrefix("redrove") })

            // Bad input: refused with a reason, nothing done.
            let count = try store.publicKeys().count
            _ = try await browser.post(
                "/keys/retire", [("csrf", token), ("key_id", String(repeating: "k", count: 500))])
            _ = try await browser.post("/credentials/create", [("csrf", token), ("role", "admin"), ("name", "x")])
            #expect(
                try store.ledger.serviceCredentials().allSatisfy { $0.name != "x" },
                "no admin credential from a session")
            _ = try await browser.post(
                "/refunds/grant", [("csrf", token), ("transaction_id", "tx_none"), ("reason", "r")])
            #expect(try await browser.get("/refunds").body.contains("Not done: "))
            #expect(try store.publicKeys().count == count)

            // The activity page lists them, newest first; the account search finds a buyer by transaction id.
            let activity = try await browser.get("/activity")
            #expect(activity.body.contains(HTMLText.escape(actor)) && activity.body.contains("REFUND_DENIED"))
            let account = try await browser.get("/accounts?q=\(bought)")
            #expect(account.status == 200 && account.body.contains("Account \(buyer.id)"))
            #expect(try await browser.get("/accounts?q=tx_nobody").status == 404)
        }
    }

    /// An operator's write can start the group commit that carries buyers' writes: their events must not take the
    /// operator's name.
    @Test func theOperatorsNameStaysOnTheirOwnEvents() async throws {
        try await ConsoleFixture.with { fixture in
            let store = fixture.store
            var bought: [String] = []
            for _ in 0..<6 { bought.append(try await fixture.purchase("filter.sepia").transactionID) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, transaction) in bought.enumerated() {
                    group.addTask {
                        _ = try await store.acting(as: "console svc_x (x)") {
                            try await store.refund(transactionID: transaction, reason: "r\(index)")
                        }
                    }
                    group.addTask { _ = try await fixture.purchase("credits.5") }
                    group.addTask { _ = try await fixture.purchase("credits.5") }
                }
                try await group.waitForAll()
            }
            let events = try await store.ledger.events(after: 0, limit: 1000)
            #expect(events.filter { $0.type == .purchased }.count == 18)
            #expect(events.filter { $0.type == .purchased }.allSatisfy { $0.actor.isEmpty })
            #expect(
                events.filter { $0.type == .refunded }.map(\.actor) == Array(repeating: "console svc_x (x)", count: 6))
            // After the operator's work, the store's own writes name no one either.
            _ = try await fixture.purchase("credits.5")
            #expect(try await store.ledger.events(after: 0, limit: 1000).last?.actor == "")
        }
    }

    @Test func theOverviewChartsRevenuePerCurrencyAndDay() async throws {
        try await ConsoleFixture.with { fixture in
            _ = try await fixture.purchase("credits.5")
            _ = try await fixture.purchase("credits.5")
            let (_, sepia) = try await fixture.purchase("filter.sepia")
            _ = try await fixture.store.refund(transactionID: sepia, reason: "test")
            _ = try await fixture.purchase("pro.monthly")
            var browser = Browser(fixture)
            try await browser.signIn(fixture.admin.secret)
            let overview = try await browser.get("/")
            #expect(overview.status == 200)
            #expect(overview.body.components(separatedBy: "<svg class=\"chart\"").count - 1 == 4)
            #expect(overview.body.contains("USD: 6.97 USD in 30 days"))
            #expect(overview.body.contains("EUR: 2.99 EUR in 30 days"))
            #expect(overview.body.contains("<title>purchases"))
            #expect(overview.body.contains("<title>refunds"))
            #expect(overview.body.contains(">ACTIVE</text>"))
        }
    }

    @Test func offerCodesAreListedRevokedAndRedeemedForABuyer() async throws {
        try await ConsoleFixture.with { fixture in
            let store = fixture.store
            var browser = Browser(fixture)
            try await browser.signIn(fixture.admin.secret)
            let made = try await store.createOfferCodes(batchID: "spring", productID: "filter.sepia", count: 2)
            let listed = try await browser.get("/codes")
            #expect(listed.body.contains("spring") && listed.body.contains("0 of 2"))
            let token = try #require(listed.csrf)

            // Redeemed for a buyer from their account's page, as the operator.
            let (buyer, _) = try await fixture.purchase("credits.5")
            let done = try await browser.post(
                "/accounts/redeem", [("csrf", token), ("account", buyer.id), ("code", made.codes[0].lowercased())])
            #expect(done.location == "/accounts?q=\(buyer.id)")
            let page = try await browser.get("/accounts?q=\(buyer.id)")
            #expect(page.body.contains("Redeemed: filter.sepia"), "\(page.body)")
            let purchased = try await store.ledger.events(after: 0, accountID: buyer.id, types: [.purchased])
            #expect(purchased.last?.productID == "filter.sepia")
            #expect(purchased.last?.actor == "console \(fixture.admin.id) (alice)")
            // The buyer owns it now: a second code is not used up.
            _ = try await browser.post(
                "/accounts/redeem", [("csrf", token), ("account", buyer.id), ("code", made.codes[1])])
            #expect(try await browser.get("/accounts?q=\(buyer.id)").body.contains("the code was not used"))
            // The same code for another buyer: the store's reason, nothing recorded.
            let (other, _) = try await fixture.purchase("credits.5")
            let before = try store.ledger.latestEventID()
            _ = try await browser.post(
                "/accounts/redeem", [("csrf", token), ("account", other.id), ("code", made.codes[0])])
            #expect(try await browser.get("/accounts?q=\(other.id)").body.contains("offer_code_used"))
            #expect(try store.ledger.latestEventID() == before)

            // Revoked: listed so, and the other code refused.
            #expect(try await browser.post("/codes/revoke", [("csrf", token), ("batch_id", "spring")]).status == 303)
            #expect(try await store.ledger.offerCodeBatch(id: "spring")?.revokedMs ?? 0 > 0)
            _ = try await browser.post(
                "/accounts/redeem", [("csrf", token), ("account", other.id), ("code", made.codes[1])])
            #expect(try await browser.get("/accounts?q=\(other.id)").body.contains("offer_code_revoked"))
            // Without the session's token: refused, nothing changes.
            #expect(try await browser.post("/codes/revoke", [("batch_id", "spring")]).status == 403)
        }
    }
}

/// The console's escaping, as a test reads it.
enum HTMLText {
    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "'", with: "&#39;")
    }
}
