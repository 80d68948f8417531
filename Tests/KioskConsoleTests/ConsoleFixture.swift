import AsyncHTTPClient
import Foundation
import KioskConsole
import KioskRPC
import KioskStore
import KioskStoreTestSupport
import NIOCore
import NIOHTTP1
import NIOSSL
import Testing

let consoleCatalog = Catalog(
    bundleID: "com.example.console",
    products: [
        CatalogProduct(
            id: "credits.5", type: .consumable, title: "5 Credits", description: "", price: "0.99", currency: "USD",
            credits: 5, maxQuantity: 10, hostedContent: false, subscriptionPeriod: nil),
        CatalogProduct(
            id: "filter.sepia", type: .nonConsumable, title: "Sepia", description: "A filter", price: "2.99",
            currency: "EUR", credits: 0, maxQuantity: 1, hostedContent: false, subscriptionPeriod: nil),
        CatalogProduct(
            id: "pro.monthly", type: .autoRenewableSubscription, title: "Pro", description: "", price: "4.99",
            currency: "USD", credits: 0, maxQuantity: 1, hostedContent: false,
            subscriptionPeriod: SubscriptionPeriod(iso8601: "P1M")),
    ])

/// A store on a scratch ledger with its console on 127.0.0.1 (an ephemeral port), an admin credential, and an
/// HTTP client that follows no redirect.
struct ConsoleFixture {
    let store: Store
    let console: AdminConsole
    let clock: ManualClock
    let admin: (id: String, secret: String)
    let http: HTTPClient
    let base: String

    static func with<R>(
        configuration: AdminConsole.Configuration = .fast, tls: DevelopmentCertificates? = nil,
        _ body: (ConsoleFixture) async throws -> R
    ) async throws -> R {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let clock = ManualClock(startMs: 1_800_000_000_000)
        let storeConfiguration = try StoreConfiguration(
            dataDirectory: directory, catalog: consoleCatalog, environment: .sandbox,
            paymentProcessor: SimulatedPaymentProcessor(), clock: clock
        ).onTestLedger()
        let store = try Store(configuration: storeConfiguration)
        try store.prepareToServe()
        let admin = try store.createServiceCredential(role: .admin, name: "alice")
        let console = AdminConsole(store: store, configuration: configuration)
        var identity: ServerTLSIdentity?
        var clientConfiguration = HTTPClient.Configuration(redirectConfiguration: .disallow)
        if let tls {
            identity = try ServerTLSIdentity(
                certificateChainPath: tls.serverCertificatePath, privateKeyPath: tls.serverKeyPath)
            var client = TLSConfiguration.makeClientConfiguration()
            client.trustRoots = .file(tls.caCertificatePath)
            clientConfiguration.tlsConfiguration = client
        }
        try await console.start(host: "127.0.0.1", port: 0, tls: identity)
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
        let fixture = ConsoleFixture(
            store: store, console: console, clock: clock, admin: admin, http: http,
            base: "\(tls == nil ? "http://127.0.0.1" : "https://localhost"):\(console.port)")
        do {
            let result = try await body(fixture)
            try await http.shutdown()
            await console.shutdown()
            return result
        } catch {
            try? await http.shutdown()
            await console.shutdown()
            throw error
        }
    }

    /// A new account with a purchase of `product`; returns the account and the transaction id.
    func purchase(_ product: String) async throws -> (account: AccountRecord, transactionID: String) {
        let (id, _) = try store.createAccount()
        let account = try #require(try store.ledger.account(id: id))
        let outcome = try await store.purchase(
            account: account, productID: product, quantity: 1, paymentMethod: "test-card:4242424242424242",
            idempotencyKey: UUID().uuidString)
        return (account, try #require(outcome.record?.id))
    }
}

extension AdminConsole.Configuration {
    /// The defaults with a short sign-in time, so that tests sign in quickly.
    static var fast: Self {
        var configuration = Self()
        configuration.signInTime = .milliseconds(150)
        return configuration
    }
}

/// What a browser keeps between requests: the cookies (by name), and the page's CSRF token once signed in.
struct Browser {
    struct Answer {
        var status: Int
        var headers: HTTPHeaders
        var body: String
        var location: String? { headers.first(name: "Location") }
        /// The CSRF token of the page's forms.
        var csrf: String? {
            guard let range = body.range(of: "name=\"csrf\" value=\"") else { return nil }
            return String(body[range.upperBound...].prefix { $0 != "\"" })
        }
    }

    let fixture: ConsoleFixture
    var cookies: [String: String] = [:]
    /// The `Set-Cookie` headers of the last answer, as sent.
    var lastSetCookies: [String] = []

    init(_ fixture: ConsoleFixture) { self.fixture = fixture }

    mutating func get(_ path: String) async throws -> Answer {
        try await send(.GET, path)
    }

    mutating func post(
        _ path: String, _ fields: [(String, String)], origin: String? = nil
    ) async throws -> Answer {
        let body = fields.map { "\(Self.escape($0.0))=\(Self.escape($0.1))" }.joined(separator: "&")
        return try await send(.POST, path, body: body, origin: origin ?? fixture.base)
    }

    static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    }

    mutating func send(
        _ method: HTTPMethod, _ path: String, body: String? = nil, origin: String? = nil
    )
        async throws -> Answer
    {
        var request = HTTPClientRequest(url: fixture.base + path)
        request.method = method
        if !cookies.isEmpty {
            request.headers.add(name: "Cookie", value: cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; "))
        }
        if let origin { request.headers.add(name: "Origin", value: origin) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await fixture.http.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 4 << 20)
        lastSetCookies = response.headers["Set-Cookie"]
        for header in lastSetCookies {
            let pair = header.split(separator: ";")[0].split(separator: "=", maxSplits: 1)
            let name = String(pair[0])
            let value = pair.count > 1 ? String(pair[1]) : ""
            if value.isEmpty || header.contains("Max-Age=0") {
                cookies.removeValue(forKey: name)
            } else {
                cookies[name] = value
            }
        }
        return Answer(status: Int(response.status.code), headers: response.headers, body: String(buffer: bytes))
    }

    /// Signs in with `credential`: the sign-in form, then its POST. Returns the POST's answer.
    @discardableResult
    mutating func signIn(_ credential: String) async throws -> Answer {
        let form = try await get("/signin")
        let token = try #require(form.csrf)
        return try await post("/signin", [("csrf", token), ("credential", credential)])
    }
}
