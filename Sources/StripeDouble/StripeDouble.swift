import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A local stand-in for the part of Stripe's API that
/// `StripePaymentProcessor` uses: an HTTP/1.1 server on 127.0.0.1 (ephemeral
/// port) that answers as Stripe's API reference documents.
///
/// What it implements:
///
/// | request | answer |
/// |---|---|
/// | `POST /v1/payment_intents` | creates a PaymentIntent; with `confirm=true` and a test payment method, confirms it |
/// | `GET /v1/payment_intents/{id}` | the PaymentIntent |
/// | `POST /v1/payment_intents/{id}/cancel` | cancels it, if its status allows |
/// | `POST /v1/payment_intents/{id}/confirm` | confirms one that needs a method or a confirmation (what the buyer's app does with the client secret) |
/// | `GET /v1/payment_intents/search?query=…` | Search API; `metadata['key']:'value'`, `status:'…'`, `currency:'…'` and `amount:N` clauses joined by `AND` |
/// | `POST /v1/refunds` | refunds a succeeded PaymentIntent (`payment_intent` or `charge`), in full or `amount` |
/// | `POST /v1/customers`, `GET /v1/customers/{id}` | Customers |
/// | `POST /v1/payment_methods`, `GET /v1/payment_methods/{id}` | card PaymentMethods from test tokens (`card[token]=tok_visa`) |
/// | `POST /v1/setup_intents` | saves a PaymentMethod to a Customer (see `StripeDouble+Customers.swift` for the rules kept) |
/// | `GET /_double/stats` | `{"charges":N,"refunds":N,"payment_intents":N}`, no key needed (not Stripe's) |
///
/// As Stripe does, it takes form-encoded bodies, requires
/// `Authorization: Bearer <secretKey>` (`401` otherwise), rejects unknown
/// parameters, answers JSON objects and errors (`{"error":{"type":…,"code":…,
/// "decline_code":…,"message":…,"payment_intent":{…}}}`, `402` for card
/// errors), and honours `Idempotency-Key` on `POST`s: once a request began
/// executing, the same key with the same endpoint and parameters answers the
/// stored response with `Idempotent-Replayed: true` (and executes nothing);
/// with other parameters it answers `400 idempotency_error`. Requests refused
/// by validation (missing or invalid parameters) are not stored, as on Stripe.
///
/// Test payment methods as Stripe's test mode names them: `pm_card_visa`,
/// `pm_card_mastercard`, `pm_card_amex`, … succeed; `pm_card_chargeDeclined`
/// (`card_declined`/`generic_decline`), `pm_card_chargeDeclinedInsufficientFunds`
/// (`insufficient_funds`), `…ExpiredCard`, `…IncorrectCvc`, `…ProcessingError`,
/// `…LostCard`, `…StolenCard`, `…Fraudulent` decline;
/// `pm_card_authenticationRequired` and `pm_card_threeDSecure2Required` need
/// 3-D Secure (`requires_action`). Any other method is `resource_missing`.
///
/// Knobs: ``failNext(count:status:)`` (a `5xx` or `429` before the request is
/// executed), ``loseNextAnswers(count:hang:)`` (executed, then no answer),
/// ``searchLag`` (Stripe's search index delay) and ``forgetIdempotencyKeys()``
/// (Stripe prunes keys after 24 hours). Counters: ``chargeCount``,
/// ``chargesByPaymentID``, ``refundCount``, ``paymentIntentCount``, and
/// ``requests`` for the requests themselves.
public final class StripeDouble: Sendable {
    /// The secret key the double accepts unless told another.
    public static let defaultSecretKey = "sk_test_kiosk_stripe_double"

    /// The only API key the double accepts, as `Authorization: Bearer <key>`.
    public let secretKey: String

    private let group: any EventLoopGroup
    let api: StripeDoubleAPI
    private let server = NIOLockedValueBox<(channel: (any Channel)?, port: Int)>((nil, 0))
    private let connections = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    /// Creates a stopped double; call ``start()``.
    /// - Parameters:
    ///   - secretKey: The key requests must carry; must look like Stripe's (`sk_test_…`).
    ///   - group: The event loops to serve on.
    public init(
        secretKey: String = StripeDouble.defaultSecretKey,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.secretKey = secretKey
        self.group = group
        self.api = StripeDoubleAPI(secretKey: secretKey)
    }

    // MARK: Serving

    /// Listens on 127.0.0.1, on a port the system picks (see ``port``).
    public func start() async throws {
        guard server.withLockedValue({ $0.channel == nil }) else { return }
        let api = self.api
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [weak self] channel in
                self?.track(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(StripeDoubleHandler(api: api))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        server.withLockedValue { $0 = (channel, channel.localAddress?.port ?? 0) }
    }

    /// The port the double listens on; 0 before ``start()``.
    public var port: Int { server.withLockedValue { $0.port } }

    /// `http://127.0.0.1:<port>`, to use as the processor's base URL.
    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Stops listening and closes every open connection (those left hanging by
    /// ``loseNextAnswers(count:hang:)`` included).
    public func shutdown() async throws {
        let channel = server.withLockedValue { state -> (any Channel)? in
            defer { state.channel = nil }
            return state.channel
        }
        try await channel?.close().get()
        let open = connections.withLockedValue { Array($0.values) }
        for connection in open { try? await connection.close().get() }
    }

    private func track(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        connections.withLockedValue { $0[id] = channel }
        channel.closeFuture.whenComplete { [weak self] _ in
            _ = self?.connections.withLockedValue { $0.removeValue(forKey: id) }
        }
    }

    // MARK: Knobs

    /// Answers the next `count` API requests with `status` (e.g. `500`, `503`,
    /// `429`) and Stripe's error body for it (`api_error`, or `rate_limit` for
    /// `429`), before they reach the API: nothing is executed and nothing is
    /// stored under their idempotency keys, so a retry with the same key runs
    /// normally. (Stripe stores a `500` that happened while executing; this
    /// models failures in front of the API: load balancers, overload, rate limits.)
    public func failNext(count: Int = 1, status: Int = 500) {
        api.withState { $0.failures.append(contentsOf: Array(repeating: status, count: max(0, count))) }
    }

    /// Executes the next `count` API requests as usual (a PaymentIntent is
    /// charged, a refund made, the response stored under the idempotency key),
    /// then loses the answer: the connection is closed without a response, or,
    /// with `hang`, left open with no response until the client gives up (a
    /// timeout after charging). A replay of a stored response counts too.
    public func loseNextAnswers(count: Int = 1, hang: Bool = false) {
        api.withState { $0.lostAnswers.append(contentsOf: Array(repeating: hang, count: max(0, count))) }
    }

    /// How long after it is created a PaymentIntent appears in search results.
    /// Stripe's index usually lags under a minute; the double's default is zero.
    public var searchLag: Duration {
        get { api.withState { $0.searchLag } }
        set { api.withState { $0.searchLag = newValue } }
    }

    /// Forgets every stored idempotent response, as Stripe does 24 hours after a
    /// key's first use: a request with an old key is executed anew.
    public func forgetIdempotencyKeys() {
        api.withState { $0.idempotentResponses.removeAll() }
    }

    // MARK: Counters

    /// PaymentIntents that reached `succeeded`: the charges made.
    public var chargeCount: Int { api.withState { $0.chargeCount } }

    /// Succeeded PaymentIntents by their `metadata[kiosk_payment_id]`.
    public var chargesByPaymentID: [String: Int] {
        api.withState { state in
            var charges: [String: Int] = [:]
            for intent in state.intents.values where intent.status == "succeeded" {
                charges[intent.metadata["kiosk_payment_id"] ?? "", default: 0] += 1
            }
            return charges
        }
    }

    /// Refunds made.
    public var refundCount: Int { api.withState { $0.refunds.count } }

    /// PaymentIntents created, whatever became of them.
    public var paymentIntentCount: Int { api.withState { $0.intents.count } }

    /// Every API request received, oldest first (`/_double/` requests excluded).
    public var requests: [Request] { api.withState { $0.log } }

    /// The PaymentIntents whose `metadata[kiosk_payment_id]` is `paymentID`, oldest first.
    public func paymentIntents(forPaymentID paymentID: String) -> [PaymentIntent] {
        api.withState { state in
            state.intentOrder.compactMap { state.intents[$0] }
                .filter { $0.metadata["kiosk_payment_id"] == paymentID }
                .map(\.snapshot)
        }
    }

    /// A request the double received.
    public struct Request: Hashable, Sendable {
        /// `GET`, `POST`, ….
        public var method: String
        /// The path, without the query.
        public var path: String
        /// The `Idempotency-Key` header, if any.
        public var idempotencyKey: String?
        /// The status answered (also when the answer was then lost); 0 when none was made.
        public var status: Int
        /// True when the answer was a stored response replayed for the idempotency key.
        public var replayed: Bool
    }

    /// A PaymentIntent as the double holds it.
    public struct PaymentIntent: Hashable, Sendable {
        /// `pi_…`.
        public var id: String
        /// In the currency's smallest unit, as sent.
        public var amount: Int64
        /// Lowercase ISO code.
        public var currency: String
        /// `succeeded`, `requires_payment_method`, `requires_action`, `canceled`, ….
        public var status: String
        /// The `payment_method` sent.
        public var paymentMethod: String?
        /// The metadata sent.
        public var metadata: [String: String]
        /// How much was refunded.
        public var amountRefunded: Int64
        /// The Customer it was made for, if any.
        public var customer: String?
        /// True for a payment made without the buyer (`off_session=true`).
        public var offSession: Bool
        /// `off_session` when the payment saved its method to the Customer.
        public var setupFutureUsage: String?
    }
}

// MARK: - The API

/// The double's state and request handling; every request is handled whole
/// under one lock.
final class StripeDoubleAPI: Sendable {
    struct Intent {
        var id: String
        var amount: Int64
        var currency: String
        var status: String
        var paymentMethod: String?
        var metadata: [String: String]
        var created: Int64
        var searchableAt: ContinuousClock.Instant
        var automaticPaymentMethods: Bool
        var allowRedirects: String?
        var clientSecret: String
        var latestCharge: String?
        var amountReceived: Int64 = 0
        var amountRefunded: Int64 = 0
        var lastPaymentError: DoubleJSON = .null
        var nextAction: DoubleJSON = .null
        var canceledAt: Int64?
        var cancellationReason: String?
        var customer: String?
        var setupFutureUsage: String?
        var offSession = false

        var snapshot: StripeDouble.PaymentIntent {
            .init(
                id: id, amount: amount, currency: currency, status: status, paymentMethod: paymentMethod,
                metadata: metadata, amountRefunded: amountRefunded, customer: customer, offSession: offSession,
                setupFutureUsage: setupFutureUsage)
        }
    }

    struct StoredResponse {
        var endpoint: String
        var params: [String: String]
        var response: Response
        var requestID: String
    }

    struct State {
        var intents: [String: Intent] = [:]
        var intentOrder: [String] = []
        var refunds: [String: DoubleJSON] = [:]
        var idempotentResponses: [String: StoredResponse] = [:]
        var failures: [Int] = []
        var lostAnswers: [Bool] = []
        var searchLag: Duration = .zero
        var log: [StripeDouble.Request] = []
        var chargeCount = 0
        var customers: [String: Customer] = [:]
        var paymentMethods: [String: PaymentMethod] = [:]
        var setupIntents: [String: DoubleJSON] = [:]
        /// PaymentMethods whose issuer wants the buyer to authenticate their next charge (``StripeDouble/requireAuthentication(paymentMethod:)``).
        var authenticationRequired: Set<String> = []
        /// Events made by the last request, sent to the webhook endpoint once it is answered.
        var outbox: [OutgoingEvent] = []
        /// Disputes by id.
        var disputes: [String: Dispute] = [:]
    }

    /// An HTTP request, body read.
    struct Request {
        var method: String
        var path: String
        var query: [String: String]
        var headers: HTTPHeaders
        var body: String
        /// `req_…`, answered as `Request-Id`.
        var id = StripeDoubleAPI.newID("req")
    }

    /// An HTTP answer.
    struct Response {
        var status: Int
        var headers: [(String, String)] = []
        var body: String
    }

    /// What to do with a request.
    enum Reply {
        case respond(Response)
        case close
        case hang
    }

    /// What executing an endpoint gave, and whether its response is stored for the idempotency key.
    struct Execution {
        var response: Response
        var stored: Bool
    }

    /// The version answered to requests that do not name one.
    static let defaultAPIVersion = "2024-06-20"

    private let secretKey: String
    let state = NIOLockedValueBox(State())
    /// Where events go (``StripeDouble/sendWebhooks(to:secret:)``); nil: nowhere.
    let webhookSender = NIOLockedValueBox<StripeWebhookSender?>(nil)

    init(secretKey: String) {
        self.secretKey = secretKey
    }

    func withState<T>(_ body: (inout State) throws -> T) rethrows -> T {
        try state.withLockedValue(body)
    }

    // MARK: Dispatch

    func handle(_ request: Request) -> Reply {
        if request.method == "GET" && request.path == "/_double/stats" { return .respond(stats()) }
        defer { sendOutbox() }
        return state.withLockedValue { state in
            var (response, replayed) = answer(request, &state)
            response.headers.append(("Request-Id", request.id))
            response.headers.append(
                ("Stripe-Version", request.headers.first(name: "Stripe-Version") ?? Self.defaultAPIVersion))
            state.log.append(
                .init(
                    method: request.method, path: request.path,
                    idempotencyKey: request.headers.first(name: "Idempotency-Key"),
                    status: response.status, replayed: replayed))
            if !state.lostAnswers.isEmpty {
                return state.lostAnswers.removeFirst() ? .hang : .close
            }
            return .respond(response)
        }
    }

    private func answer(_ request: Request, _ state: inout State) -> (Response, replayed: Bool) {
        if !state.failures.isEmpty { return (Self.serverFailure(state.failures.removeFirst()), false) }
        if let refusal = authenticate(request) { return (refusal, false) }
        let params: [String: String]
        if request.method == "POST" {
            guard let form = Self.parseForm(request.body) else {
                return (
                    Self.error(400, message: "Invalid request body: expected application/x-www-form-urlencoded"), false
                )
            }
            params = form
        } else {
            params = request.query
        }
        let segments = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        switch (request.method, segments) {
        case ("POST", ["v1", "payment_intents"]):
            return idempotent(request, params, &state) { createIntent(params, &$0) }
        case ("GET", ["v1", "payment_intents", "search"]):
            return (search(params, state), false)
        case ("GET", let path) where path.count == 3 && path[0] == "v1" && path[1] == "payment_intents":
            return (retrieveIntent(path[2], state), false)
        case ("POST", let path)
        where path.count == 4 && path[0] == "v1" && path[1] == "payment_intents" && path[3] == "cancel":
            return idempotent(request, params, &state) { cancelIntent(path[2], params, &$0) }
        case ("POST", ["v1", "refunds"]):
            return idempotent(request, params, &state) { createRefund(params, &$0) }
        case ("POST", let path)
        where path.count == 4 && path[0] == "v1" && path[1] == "payment_intents" && path[3] == "confirm":
            return idempotent(request, params, &state) { confirmExisting(path[2], params, &$0) }
        case ("POST", ["v1", "customers"]):
            return idempotent(request, params, &state) { createCustomer(params, &$0) }
        case ("GET", let path) where path.count == 3 && path[0] == "v1" && path[1] == "customers":
            return (retrieveCustomer(path[2], state), false)
        case ("POST", ["v1", "payment_methods"]):
            return idempotent(request, params, &state) { createPaymentMethod(params, &$0) }
        case ("GET", let path) where path.count == 3 && path[0] == "v1" && path[1] == "payment_methods":
            return (retrievePaymentMethod(path[2], state), false)
        case ("POST", ["v1", "setup_intents"]):
            return idempotent(request, params, &state) { createSetupIntent(params, &$0) }
        default:
            let message =
                "Unrecognized request URL (\(request.method): \(request.path)). Please see https://stripe.com/docs or we can help at https://support.stripe.com/."
            return (Self.error(404, message: message), false)
        }
    }

    private func stats() -> Response {
        let body = state.withLockedValue { state in
            DoubleJSON.object([
                ("charges", .int(Int64(state.chargeCount))), ("refunds", .int(Int64(state.refunds.count))),
                ("payment_intents", .int(Int64(state.intents.count))),
            ])
        }
        return Self.json(200, body)
    }

    // MARK: Authentication

    private func authenticate(_ request: Request) -> Response? {
        guard let header = request.headers.first(name: "Authorization") else {
            let message =
                "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/."
            return Self.error(401, message: message)
        }
        let key: String
        if header.hasPrefix("Bearer ") {
            key = String(header.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)
        } else if header.hasPrefix("Basic "), let data = Data(base64Encoded: String(header.dropFirst("Basic ".count))),
            let decoded = String(data: data, encoding: .utf8)
        {
            key = String(decoded.prefix { $0 != ":" })
        } else {
            return Self.error(
                401, message: "Invalid Authorization header: use 'Authorization: Bearer YOUR_SECRET_KEY'.")
        }
        guard key == secretKey else { return Self.error(401, message: "Invalid API Key provided: \(Self.masked(key))") }
        return nil
    }

    /// `sk_test_****…abcd`, as Stripe shows a key in messages.
    private static func masked(_ key: String) -> String {
        guard key.count > 12 else { return String(repeating: "*", count: key.count) }
        return key.prefix(8) + String(repeating: "*", count: key.count - 12) + key.suffix(4)
    }

    // MARK: Idempotency

    private func idempotent(
        _ request: Request, _ params: [String: String], _ state: inout State,
        execute: (inout State) -> Execution
    ) -> (Response, replayed: Bool) {
        guard let key = request.headers.first(name: "Idempotency-Key") else { return (execute(&state).response, false) }
        guard key.count <= 255 else {
            return (
                Self.error(
                    400, type: "idempotency_error", message: "Idempotency keys can be at most 255 characters long."),
                false
            )
        }
        let endpoint = "\(request.method) \(request.path)"
        if let stored = state.idempotentResponses[key] {
            if stored.endpoint != endpoint {
                let message =
                    "Keys for idempotent requests can only be used for the same endpoint they were first used for ('\(stored.endpoint)' vs '\(endpoint)'). Try using a key other than '\(key)' if you meant to execute a different request."
                return (Self.error(400, type: "idempotency_error", message: message), false)
            }
            if stored.params != params {
                let message =
                    "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '\(key)' if you meant to execute a different request."
                return (Self.error(400, type: "idempotency_error", message: message), false)
            }
            var replay = stored.response
            replay.headers += [
                ("Idempotent-Replayed", "true"), ("Original-Request", stored.requestID), ("Idempotency-Key", key),
            ]
            return (replay, true)
        }
        let execution = execute(&state)
        if execution.stored {
            state.idempotentResponses[key] = StoredResponse(
                endpoint: endpoint, params: params, response: execution.response, requestID: request.id)
        }
        var response = execution.response
        response.headers.append(("Idempotency-Key", key))
        return (response, false)
    }

    // MARK: PaymentIntents

    /// The create parameters the double models (plus `metadata[…]` and
    /// `payment_method_types[…]`); others are refused as unknown rather than ignored.
    private static let createParams: Set<String> = [
        "amount", "currency", "confirm", "payment_method", "description", "return_url",
        "automatic_payment_methods[enabled]", "automatic_payment_methods[allow_redirects]", "customer",
        "setup_future_usage", "off_session",
    ]

    private func createIntent(_ params: [String: String], _ state: inout State) -> Execution {
        if let invalid = Self.unknownParameter(
            params, allowed: Self.createParams, prefixes: ["metadata[", "payment_method_types["])
        {
            return Execution(response: invalid, stored: false)
        }
        if let invalid = Self.validateCreate(params) { return Execution(response: invalid, stored: false) }
        let customer = params["customer"]
        if let customer, state.customers[customer] == nil {
            return Execution(response: Self.noSuchCustomer(customer), stored: false)
        }
        var paymentMethod: PaymentMethod?
        if let name = params["payment_method"] {
            switch usableMethod(name, customer: customer, state) {
            case .success(let found): paymentMethod = found
            case .failure(let refusal): return Execution(response: refusal.response, stored: false)
            }
        }
        let method = paymentMethod?.id
        var behaviour = paymentMethod?.behaviour
        if let method, state.authenticationRequired.contains(method) { behaviour = .requireAction }
        let confirm = params["confirm"] == "true"
        var intent = Intent(
            id: Self.newID("pi"), amount: Int64(params["amount"] ?? "") ?? 0, currency: params["currency"] ?? "",
            status: method == nil ? "requires_payment_method" : "requires_confirmation", paymentMethod: method,
            metadata: Self.metadata(params), created: Self.now(), searchableAt: .now + state.searchLag,
            automaticPaymentMethods: Self.automaticPaymentMethods(params),
            allowRedirects: params["automatic_payment_methods[allow_redirects]"], clientSecret: "")
        intent.clientSecret = "\(intent.id)_secret_\(Self.randomToken(24))"
        intent.customer = customer
        intent.setupFutureUsage = params["setup_future_usage"]
        intent.offSession = params["off_session"] == "true"
        var response: Response
        if confirm, let behaviour, var paymentMethod {
            response = confirmIntent(
                &intent, behaviour: behaviour, offSession: params["off_session"] == "true", state: &state)
            // A method used without being saved to the Customer may not be used again (Stripe's rule); one the
            // payment saved (setup_future_usage) is attached to the Customer.
            if intent.status == "succeeded", let customer, intent.setupFutureUsage != nil {
                paymentMethod.customer = customer
            } else if paymentMethod.customer == nil {
                paymentMethod.consumed = true
            }
            state.paymentMethods[paymentMethod.id] = paymentMethod
        } else {
            response = Self.json(200, Self.render(intent))
        }
        state.intents[intent.id] = intent
        state.intentOrder.append(intent.id)
        return Execution(response: response, stored: true)
    }

    private static func validateCreate(_ params: [String: String]) -> Response? {
        guard let amountText = params["amount"] else { return missing("amount") }
        guard let amount = Int64(amountText) else {
            return error(
                400, code: "parameter_invalid_integer", param: "amount", message: "Invalid integer: \(amountText)")
        }
        guard let currency = params["currency"] else { return missing("currency") }
        guard currency.count == 3, currency.allSatisfy({ $0.isASCII && $0.isLowercase }) else {
            return error(
                400, param: "currency",
                message:
                    "Invalid currency: \(currency). Stripe currently supports these currencies: usd, eur, gbp, jpy, …")
        }
        if amount < 50 {
            return error(
                400, code: "amount_too_small", param: "amount",
                message: "Amount must be at least 50 \(currency) in the smallest currency unit")
        }
        if amount > 99_999_999 {
            return error(
                400, code: "amount_too_large", param: "amount",
                message: "Amount must be no more than 99999999 in the smallest currency unit")
        }
        if let usage = params["setup_future_usage"], usage != "on_session", usage != "off_session" {
            return error(
                400, param: "setup_future_usage",
                message: "Invalid setup_future_usage: must be one of on_session or off_session")
        }
        if let offSession = params["off_session"], offSession != "true", offSession != "false" {
            return error(400, param: "off_session", message: "Invalid boolean: \(offSession)")
        }
        if params["off_session"] == "true", params["confirm"] != "true" {
            return error(400, param: "off_session", message: "off_session may only be used when confirm=true.")
        }
        if params["setup_future_usage"] != nil, params["customer"] == nil {
            return error(
                400, param: "setup_future_usage",
                message:
                    "You must provide a customer when setting setup_future_usage, so the PaymentMethod can be attached to it."
            )
        }
        if params["confirm"] == "true" {
            guard params["payment_method"] != nil else {
                return error(
                    400, code: "payment_intent_unexpected_state", param: "payment_method",
                    message:
                        "You cannot confirm this PaymentIntent because it's missing a payment method. Update the payment_method parameter and confirm again."
                )
            }
            if automaticPaymentMethods(params), params["automatic_payment_methods[allow_redirects]"] != "never",
                params["return_url"] == nil
            {
                return error(
                    400,
                    message:
                        "This PaymentIntent is configured to accept payment methods enabled in your Dashboard. Because some of these payment methods might redirect your customer off of your page, you must provide a `return_url`. If you don't want to accept redirect-based payment methods, set `automatic_payment_methods[enabled]` to `true` and `automatic_payment_methods[allow_redirects]` to `never` when creating Setup Intents and Payment Intents."
                )
            }
        }
        return nil
    }

    /// Whether the PaymentIntent takes the payment methods enabled in the
    /// Dashboard: asked for, or by default when no `payment_method_types` are given.
    static func automaticPaymentMethods(_ params: [String: String]) -> Bool {
        let hasMethodTypes = params.keys.contains { $0.hasPrefix("payment_method_types[") }
        return params["automatic_payment_methods[enabled]"].map { $0 == "true" } ?? !hasMethodTypes
    }

    /// How a test payment method behaves when confirmed.
    enum Behaviour: Equatable {
        case succeed
        case decline(code: String, declineCode: String, message: String)
        case requireAction
    }

    private static let testMethods: [String: Behaviour] = {
        var methods: [String: Behaviour] = [:]
        for name in [
            "visa", "visa_debit", "mastercard", "mastercard_debit", "mastercard_prepaid", "amex", "discover", "diners",
            "jcb", "unionpay", "us", "threeDSecureOptional",
        ] {
            methods["pm_card_" + name] = .succeed
        }
        let declined = "Your card was declined."
        methods["pm_card_chargeDeclined"] = .decline(
            code: "card_declined", declineCode: "generic_decline", message: declined)
        methods["pm_card_visa_chargeDeclined"] = .decline(
            code: "card_declined", declineCode: "generic_decline", message: declined)
        methods["pm_card_chargeDeclinedInsufficientFunds"] = .decline(
            code: "card_declined", declineCode: "insufficient_funds", message: "Your card has insufficient funds.")
        methods["pm_card_chargeDeclinedLostCard"] = .decline(
            code: "card_declined", declineCode: "lost_card", message: declined)
        methods["pm_card_chargeDeclinedStolenCard"] = .decline(
            code: "card_declined", declineCode: "stolen_card", message: declined)
        methods["pm_card_chargeDeclinedFraudulent"] = .decline(
            code: "card_declined", declineCode: "fraudulent", message: declined)
        methods["pm_card_chargeDeclinedExpiredCard"] = .decline(
            code: "expired_card", declineCode: "expired_card", message: "Your card has expired.")
        methods["pm_card_chargeDeclinedIncorrectCvc"] = .decline(
            code: "incorrect_cvc", declineCode: "incorrect_cvc", message: "Your card's security code is incorrect.")
        methods["pm_card_chargeDeclinedProcessingError"] = .decline(
            code: "processing_error", declineCode: "processing_error",
            message: "An error occurred while processing your card. Try again in a little bit.")
        for name in ["authenticationRequired", "threeDSecure2Required", "threeDSecureRequired"] {
            methods["pm_card_" + name] = .requireAction
        }
        return methods
    }()

    static func behaviour(of method: String) -> Behaviour? { testMethods[method] }

    private func confirmIntent(
        _ intent: inout Intent, behaviour: Behaviour, offSession: Bool, state: inout State
    ) -> Response {
        intent.latestCharge = Self.newID("ch")
        // Off-session, nobody can authenticate: the card that wants it declines with authentication_required.
        let behaviour =
            offSession && behaviour == .requireAction
            ? .decline(
                code: "authentication_required", declineCode: "authentication_required",
                message: "Your card was declined. This transaction requires authentication.")
            : behaviour
        switch behaviour {
        case .succeed:
            intent.status = "succeeded"
            intent.amountReceived = intent.amount
            state.chargeCount += 1
            emit("payment_intent.succeeded", Self.render(intent), &state)
            return Self.json(200, Self.render(intent))
        case .requireAction:
            intent.latestCharge = nil
            intent.status = "requires_action"
            intent.nextAction = .object([
                ("type", .string("use_stripe_sdk")),
                ("use_stripe_sdk", .object([("type", .string("three_d_secure_redirect"))])),
            ])
            return Self.json(200, Self.render(intent))
        case .decline(let code, let declineCode, let message):
            intent.status = "requires_payment_method"
            let error = Self.cardError(
                code: code, declineCode: declineCode, message: message, charge: intent.latestCharge,
                method: intent.paymentMethod)
            intent.lastPaymentError = error
            // As Stripe: a failed attempt unsets the method; the error names it (`last_payment_error.payment_method`),
            // and a confirmation passes it (or another) again.
            intent.paymentMethod = nil
            emit("payment_intent.payment_failed", Self.render(intent), &state)
            var body = Self.fields(of: error)
            body.append(("payment_intent", Self.render(intent)))
            return Self.json(402, .object([("error", .object(body))]))
        }
    }

    /// `POST /v1/payment_intents/{id}/confirm`: what the buyer's app does (Stripe.js, the mobile SDKs) with the
    /// client secret, here with the secret key: confirms a PaymentIntent that needs a method or a confirmation.
    private func confirmExisting(_ id: String, _ params: [String: String], _ state: inout State) -> Execution {
        if let invalid = Self.unknownParameter(
            params, allowed: ["payment_method", "return_url", "off_session"], prefixes: [])
        {
            return Execution(response: invalid, stored: false)
        }
        guard var intent = state.intents[id] else {
            return Execution(response: Self.noSuchIntent(id, status: 404), stored: false)
        }
        guard intent.status == "requires_payment_method" || intent.status == "requires_confirmation" else {
            let message =
                "You cannot confirm this PaymentIntent because it has a status of \(intent.status)."
            return Execution(
                response: Self.error(400, code: "payment_intent_unexpected_state", message: message), stored: true)
        }
        guard let name = params["payment_method"] ?? intent.paymentMethod else {
            return Execution(response: Self.missing("payment_method"), stored: false)
        }
        let method: PaymentMethod
        if let kept = state.paymentMethods[name], kept.id == intent.paymentMethod {
            method = kept
        } else {
            switch usableMethod(name, customer: intent.customer, state) {
            case .success(let found): method = found
            case .failure(let refusal): return Execution(response: refusal.response, stored: false)
            }
        }
        intent.paymentMethod = method.id
        intent.lastPaymentError = .null
        let offSession = params["off_session"] == "true"
        let behaviour = state.authenticationRequired.contains(method.id) ? .requireAction : method.behaviour
        let response = confirmIntent(&intent, behaviour: behaviour, offSession: offSession, state: &state)
        state.paymentMethods[method.id] = method
        state.intents[id] = intent
        return Execution(response: response, stored: true)
    }

    /// The buyer authenticated a PaymentIntent that required it (3-D Secure): it succeeds.
    func authenticate(_ id: String, _ state: inout State) -> Bool {
        guard var intent = state.intents[id], intent.status == "requires_action" else { return false }
        intent.status = "succeeded"
        intent.nextAction = .null
        intent.latestCharge = Self.newID("ch")
        intent.amountReceived = intent.amount
        state.chargeCount += 1
        if let method = intent.paymentMethod { state.authenticationRequired.remove(method) }
        state.intents[id] = intent
        emit("payment_intent.succeeded", Self.render(intent), &state)
        return true
    }

    private func retrieveIntent(_ id: String, _ state: State) -> Response {
        guard let intent = state.intents[id] else { return Self.noSuchIntent(id, status: 404) }
        return Self.json(200, Self.render(intent))
    }

    private static let cancellable: Set<String> = [
        "requires_payment_method", "requires_capture", "requires_confirmation", "requires_action", "processing",
    ]
    private static let cancellationReasons: Set<String> = [
        "duplicate", "fraudulent", "requested_by_customer", "abandoned",
    ]

    private func cancelIntent(_ id: String, _ params: [String: String], _ state: inout State) -> Execution {
        if let invalid = Self.unknownParameter(params, allowed: ["cancellation_reason"], prefixes: []) {
            return Execution(response: invalid, stored: false)
        }
        if let reason = params["cancellation_reason"], !Self.cancellationReasons.contains(reason) {
            return Execution(
                response: Self.error(
                    400, param: "cancellation_reason",
                    message:
                        "Invalid cancellation_reason: must be one of duplicate, fraudulent, requested_by_customer or abandoned"
                ), stored: false)
        }
        guard var intent = state.intents[id] else {
            return Execution(response: Self.noSuchIntent(id, status: 404), stored: false)
        }
        guard Self.cancellable.contains(intent.status) else {
            let message =
                "You cannot cancel this PaymentIntent because it has a status of \(intent.status). Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, requires_capture, requires_confirmation, requires_action, processing."
            var body = Self.fields(
                of: Self.errorObject(
                    type: "invalid_request_error", code: "payment_intent_unexpected_state", message: message))
            body.append(("payment_intent", Self.render(intent)))
            return Execution(response: Self.json(400, .object([("error", .object(body))])), stored: true)
        }
        intent.status = "canceled"
        intent.canceledAt = Self.now()
        intent.cancellationReason = params["cancellation_reason"]
        intent.nextAction = .null
        state.intents[id] = intent
        return Execution(response: Self.json(200, Self.render(intent)), stored: true)
    }

    private static func noSuchIntent(_ id: String, status: Int, param: String? = nil) -> Response {
        error(status, code: "resource_missing", param: param, message: "No such payment_intent: '\(id)'")
    }

    // MARK: Search

    private func search(_ params: [String: String], _ state: State) -> Response {
        if let invalid = Self.unknownParameter(params, allowed: ["query", "limit", "page"], prefixes: ["expand["]) {
            return invalid
        }
        guard let query = params["query"] else { return Self.missing("query") }
        guard let clauses = StripeSearchQuery.parse(query) else {
            return Self.error(
                400, param: "query",
                message: "The query `\(query)` is not valid: use clauses like metadata['key']:'value', joined with AND."
            )
        }
        var limit = 10
        if let text = params["limit"] {
            guard let value = Int(text), (1...100).contains(value) else {
                return Self.error(400, param: "limit", message: "Invalid limit: must be an integer between 1 and 100")
            }
            limit = value
        }
        let now = ContinuousClock.now
        let matches = state.intentOrder.reversed().compactMap { state.intents[$0] }
            .filter { $0.searchableAt <= now && clauses.allSatisfy($0.matches) }
        let page = matches.prefix(limit).map(Self.render)
        return Self.json(
            200,
            .object([
                ("object", .string("search_result")), ("data", .array(Array(page))),
                ("has_more", .bool(matches.count > limit)),
                ("next_page", .null), ("url", .string("/v1/payment_intents/search")),
            ]))
    }

    // MARK: Refunds

    private static let refundReasons: Set<String> = ["duplicate", "fraudulent", "requested_by_customer"]

    private func createRefund(_ params: [String: String], _ state: inout State) -> Execution {
        if let invalid = Self.unknownParameter(
            params, allowed: ["payment_intent", "charge", "amount", "reason"], prefixes: ["metadata["])
        {
            return Execution(response: invalid, stored: false)
        }
        if let reason = params["reason"], !Self.refundReasons.contains(reason) {
            return Execution(
                response: Self.error(
                    400, param: "reason",
                    message: "Invalid reason: must be one of duplicate, fraudulent or requested_by_customer"),
                stored: false)
        }
        let found: Intent?
        if let id = params["payment_intent"] {
            found = state.intents[id]
            guard found != nil else {
                return Execution(response: Self.noSuchIntent(id, status: 400, param: "payment_intent"), stored: false)
            }
        } else if let charge = params["charge"] {
            found = state.intents.values.first { $0.latestCharge == charge && $0.status == "succeeded" }
            guard found != nil else {
                return Execution(
                    response: Self.error(
                        400, code: "resource_missing", param: "charge", message: "No such charge: '\(charge)'"),
                    stored: false)
            }
        } else {
            return Execution(
                response: Self.error(
                    400, code: "parameter_missing",
                    message:
                        "One of the following params should be provided for this request: payment_intent or charge."),
                stored: false)
        }
        guard var intent = found else {
            return Execution(response: Self.error(500, type: "api_error", message: "unreachable"), stored: false)
        }
        guard intent.status == "succeeded", let charge = intent.latestCharge else {
            let message = "This PaymentIntent (\(intent.id)) does not have a successful charge to refund."
            return Execution(response: Self.error(400, code: "charge_not_refundable", message: message), stored: true)
        }
        let remaining = intent.amountReceived - intent.amountRefunded
        guard remaining > 0 else {
            return Execution(
                response: Self.error(
                    400, code: "charge_already_refunded", message: "Charge \(charge) has already been refunded."),
                stored: true)
        }
        var amount = remaining
        if let text = params["amount"] {
            guard let value = Int64(text), value > 0 else {
                return Execution(
                    response: Self.error(
                        400, code: "parameter_invalid_integer", param: "amount",
                        message: "Invalid positive integer: \(text)"), stored: false)
            }
            guard value <= remaining else {
                return Execution(
                    response: Self.error(
                        400, code: "amount_too_large", param: "amount",
                        message: "Refund amount (\(value)) is greater than unrefunded amount on charge (\(remaining))"),
                    stored: true)
            }
            amount = value
        }
        intent.amountRefunded += amount
        state.intents[intent.id] = intent
        let refundID = Self.newID("re")
        let refund = DoubleJSON.object([
            ("id", .string(refundID)), ("object", .string("refund")), ("amount", .int(amount)),
            ("balance_transaction", .null),
            ("charge", .string(charge)), ("created", .int(Self.now())), ("currency", .string(intent.currency)),
            ("metadata", Self.render(Self.metadata(params))), ("payment_intent", .string(intent.id)),
            ("reason", params["reason"].map(DoubleJSON.string) ?? .null), ("status", .string("succeeded")),
        ])
        state.refunds[refundID] = refund
        emit("charge.refunded", Self.renderCharge(intent, charge: charge), &state)
        return Execution(response: Self.json(200, refund), stored: true)
    }

    // MARK: Rendering

    static func render(_ intent: Intent) -> DoubleJSON {
        let customer: DoubleJSON = intent.customer.map(DoubleJSON.string) ?? .null
        let setupFutureUsage: DoubleJSON = intent.setupFutureUsage.map(DoubleJSON.string) ?? .null
        return .object([
            ("id", .string(intent.id)),
            ("object", .string("payment_intent")),
            ("amount", .int(intent.amount)),
            ("amount_capturable", .int(0)),
            ("amount_received", .int(intent.amountReceived)),
            (
                "automatic_payment_methods",
                .object([
                    ("allow_redirects", intent.allowRedirects.map(DoubleJSON.string) ?? .null),
                    ("enabled", .bool(intent.automaticPaymentMethods)),
                ])
            ),
            ("canceled_at", intent.canceledAt.map(DoubleJSON.int) ?? .null),
            ("cancellation_reason", intent.cancellationReason.map(DoubleJSON.string) ?? .null),
            ("capture_method", .string("automatic_async")),
            ("client_secret", .string(intent.clientSecret)),
            ("confirmation_method", .string("automatic")),
            ("created", .int(intent.created)),
            ("currency", .string(intent.currency)),
            ("customer", customer),
            ("description", .null),
            ("last_payment_error", intent.lastPaymentError),
            ("latest_charge", intent.latestCharge.map(DoubleJSON.string) ?? .null),
            ("livemode", .bool(false)),
            ("metadata", render(intent.metadata)),
            ("next_action", intent.nextAction),
            ("payment_method", intent.paymentMethod.map(DoubleJSON.string) ?? .null),
            ("payment_method_types", .array([.string("card")])),
            ("setup_future_usage", setupFutureUsage),
            ("status", .string(intent.status)),
        ])
    }

    static func render(_ metadata: [String: String]) -> DoubleJSON {
        .object(metadata.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })
    }

    static func cardError(
        code: String, declineCode: String, message: String, charge: String?, method: String?
    ) -> DoubleJSON {
        .object([
            ("type", .string("card_error")), ("code", .string(code)), ("decline_code", .string(declineCode)),
            ("message", .string(message)),
            ("charge", charge.map(DoubleJSON.string) ?? .null),
            (
                "doc_url",
                .string("https://stripe.com/docs/error-codes/\(code.replacingOccurrences(of: "_", with: "-"))")
            ),
            (
                "payment_method",
                method.map {
                    .object([("id", .string($0)), ("object", .string("payment_method")), ("type", .string("card"))])
                } ?? .null
            ),
        ])
    }

    static func errorObject(type: String, code: String?, param: String? = nil, message: String) -> DoubleJSON {
        var fields: [(String, DoubleJSON)] = [("type", .string(type))]
        if let code { fields.append(("code", .string(code))) }
        if let param { fields.append(("param", .string(param))) }
        fields.append(("message", .string(message)))
        return .object(fields)
    }

    static func fields(of object: DoubleJSON) -> [(String, DoubleJSON)] {
        if case .object(let fields) = object { return fields }
        return []
    }

    static func error(
        _ status: Int, type: String = "invalid_request_error", code: String? = nil, param: String? = nil,
        message: String
    ) -> Response {
        json(status, .object([("error", errorObject(type: type, code: code, param: param, message: message))]))
    }

    static func missing(_ param: String) -> Response {
        error(400, code: "parameter_missing", param: param, message: "Missing required param: \(param).")
    }

    static func unknownParameter(
        _ params: [String: String], allowed: Set<String>, prefixes: [String]
    ) -> Response? {
        for name in params.keys.sorted()
        where !allowed.contains(name) && !prefixes.contains(where: { name.hasPrefix($0) && name.hasSuffix("]") }) {
            return error(400, code: "parameter_unknown", param: name, message: "Received unknown parameter: \(name)")
        }
        return nil
    }

    /// Stripe's answer to a failure in front of the API.
    private static func serverFailure(_ status: Int) -> Response {
        if status == 429 {
            return error(
                429, code: "rate_limit",
                message:
                    "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests.")
        }
        return error(
            status, type: "api_error",
            message: "Something went wrong on Stripe's end. (This is an error the double was told to give.)")
    }

    static func json(_ status: Int, _ body: DoubleJSON) -> Response {
        Response(status: status, headers: [("Content-Type", "application/json")], body: body.serialized())
    }

    // MARK: Parsing and ids

    static func metadata(_ params: [String: String]) -> [String: String] {
        var metadata: [String: String] = [:]
        for (name, value) in params where name.hasPrefix("metadata[") && name.hasSuffix("]") {
            metadata[String(name.dropFirst("metadata[".count).dropLast())] = value
        }
        return metadata
    }

    /// `a=1&b=2` into a dictionary (`+` is a space; percent-escapes decoded); nil when malformed.
    static func parseForm(_ text: String) -> [String: String]? {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0]), let value = decode(parts.count > 1 ? parts[1] : "") else { return nil }
            fields[name] = value
        }
        return fields
    }

    private static func decode(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }

    static func newID(_ prefix: String) -> String { "\(prefix)_\(randomToken(24))" }

    static func randomToken(_ count: Int) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<count).map { _ in alphabet.randomElement() ?? "x" })
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }
}

// MARK: - Search queries

/// A parsed Stripe search query: `field:value` clauses joined by `AND`.
struct StripeSearchQuery {
    enum Field: Equatable {
        case metadata(String)
        case status, currency, amount
    }

    struct Clause {
        var field: Field
        var value: String
    }

    /// The clauses of `query`; nil when it is not of the supported form.
    static func parse(_ query: String) -> [Clause]? {
        var scanner = Scanner(Array(query))
        var clauses: [Clause] = []
        repeat {
            scanner.skipSpaces()
            guard let clause = scanner.clause() else { return nil }
            clauses.append(clause)
            scanner.skipSpaces()
        } while scanner.take("AND")
        return scanner.atEnd ? clauses : nil
    }

    private struct Scanner {
        var characters: [Character]
        var index = 0

        init(_ characters: [Character]) { self.characters = characters }

        var atEnd: Bool { index == characters.count }

        mutating func skipSpaces() {
            while index < characters.count, characters[index] == " " { index += 1 }
        }

        mutating func take(_ word: String) -> Bool {
            let word = Array(word)
            guard characters.count - index >= word.count, Array(characters[index..<index + word.count]) == word else {
                return false
            }
            index += word.count
            return true
        }

        mutating func clause() -> Clause? {
            guard let field = field(), take(":") else { return nil }
            if let value = quoted() { return Clause(field: field, value: value) }
            guard field == .amount else { return nil }
            let start = index
            while index < characters.count, characters[index].isNumber { index += 1 }
            return index > start ? Clause(field: field, value: String(characters[start..<index])) : nil
        }

        mutating func field() -> Field? {
            if take("metadata[") {
                guard let key = quoted(), take("]") else { return nil }
                return .metadata(key)
            }
            if take("status") { return .status }
            if take("currency") { return .currency }
            if take("amount") { return .amount }
            return nil
        }

        /// `'…'` or `"…"`, with `\` escaping the next character.
        mutating func quoted() -> String? {
            guard index < characters.count, characters[index] == "'" || characters[index] == "\"" else { return nil }
            let quote = characters[index]
            index += 1
            var value = ""
            while index < characters.count {
                let character = characters[index]
                index += 1
                if character == quote { return value }
                if character == "\\" {
                    guard index < characters.count else { return nil }
                    value.append(characters[index])
                    index += 1
                } else {
                    value.append(character)
                }
            }
            return nil
        }
    }
}

extension StripeDoubleAPI.Intent {
    func matches(_ clause: StripeSearchQuery.Clause) -> Bool {
        switch clause.field {
        case .metadata(let key): return metadata[key] == clause.value
        case .status: return status == clause.value
        case .currency: return currency == clause.value.lowercased()
        case .amount: return String(amount) == clause.value
        }
    }
}

// MARK: - JSON

/// A JSON value, written with its object keys in order.
enum DoubleJSON: Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case string(String)
    case array([DoubleJSON])
    case object([(String, DoubleJSON)])

    func serialized() -> String {
        var output = ""
        write(to: &output)
        return output
    }

    private func write(to output: inout String) {
        switch self {
        case .null: output += "null"
        case .bool(let value): output += value ? "true" : "false"
        case .int(let value): output += String(value)
        case .string(let value): Self.writeString(value, to: &output)
        case .array(let values):
            output += "["
            for (index, value) in values.enumerated() {
                if index > 0 { output += "," }
                value.write(to: &output)
            }
            output += "]"
        case .object(let fields):
            output += "{"
            for (index, (key, value)) in fields.enumerated() {
                if index > 0 { output += "," }
                Self.writeString(key, to: &output)
                output += ":"
                value.write(to: &output)
            }
            output += "}"
        }
    }

    private static func writeString(_ value: String, to output: inout String) {
        output += "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20: output += String(format: "\\u%04x", scalar.value)
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}

// MARK: - The channel handler

/// Reads whole HTTP requests and answers them through the API.
private final class StripeDoubleHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private static let maxBody = 1 << 20
    private let api: StripeDoubleAPI
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()
    private var bodyTooLarge = false

    init(api: StripeDoubleAPI) {
        self.api = api
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.clear()
            bodyTooLarge = false
        case .body(var chunk):
            if body.readableBytes + chunk.readableBytes > Self.maxBody {
                bodyTooLarge = true
            } else {
                body.writeBuffer(&chunk)
            }
        case .end:
            guard let head else { return }
            self.head = nil
            answer(head, context: context)
        }
    }

    private func answer(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let reply: StripeDoubleAPI.Reply
        if bodyTooLarge {
            reply = .respond(StripeDoubleAPI.error(413, message: "Request body too large"))
        } else {
            let (path, query) = Self.split(head.uri)
            reply = api.handle(
                .init(
                    method: head.method.rawValue, path: path, query: query, headers: head.headers,
                    body: String(buffer: body)))
        }
        switch reply {
        case .respond(let response):
            write(response, head: head, context: context)
        case .close:
            context.close(promise: nil)
        case .hang:
            break
        }
    }

    private func write(_ response: StripeDoubleAPI.Response, head: HTTPRequestHead, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(response.headers)
        let body = ByteBuffer(string: response.body)
        headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
        headers.replaceOrAdd(name: "Connection", value: head.isKeepAlive ? "keep-alive" : "close")
        let status = HTTPResponseStatus(statusCode: response.status)
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
            promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: written)
        if !head.isKeepAlive {
            let channel = context.channel
            written.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// The path and the decoded query parameters of a request target.
    private static func split(_ uri: String) -> (String, [String: String]) {
        guard let mark = uri.firstIndex(of: "?") else { return (uri, [:]) }
        let query = StripeDoubleAPI.parseForm(String(uri[uri.index(after: mark)...])) ?? [:]
        return (String(uri[..<mark]), query)
    }
}
