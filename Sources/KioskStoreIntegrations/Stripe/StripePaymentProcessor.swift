import AsyncHTTPClient
import Foundation
import KioskStoreCore
import NIOCore
import NIOHTTP1

/// Takes payments with Stripe's PaymentIntents API.
///
/// The Kiosk payment method is passed to Stripe as the PaymentIntent's
/// `payment_method`: a `pm_…` id the app got from Stripe, or one of Stripe's
/// test-mode methods (`pm_card_visa`, `pm_card_chargeDeclined`, …) with a
/// `sk_test_…` key. Kiosk's own sandbox methods (`test-card:…`, `test-cancel`,
/// `test-ask`) are not Stripe's and are declined with `invalid_payment_method`.
///
/// How each call maps onto Stripe:
///
/// - ``charge(_:)`` and ``approve(_:)`` create and confirm a PaymentIntent in one
///   request (`POST /v1/payment_intents`, `confirm=true`), with the payment id as
///   its `Idempotency-Key` and in `metadata[kiosk_payment_id]`. Asked again for
///   the same payment within Stripe's 24 hours of idempotency, Stripe answers
///   what it answered the first time and charges nothing. Redirect-based methods
///   are turned off (`automatic_payment_methods[allow_redirects]=never`) so a
///   server can confirm without a `return_url`; a payment that needs the buyer
///   to authenticate (3-D Secure) is cancelled and declined with
///   `authentication_required`.
/// - A subscription's payments go to the account's Customer (``createCustomer(accountID:generation:)``, once per account,
///   its id kept in the store's ledger): the first with `setup_future_usage=off_session`, which saves its method
///   to the Customer; renewals with that saved method and `off_session=true`. ``saveMethod(_:customer:accountID:)``
///   saves a method the buyer replaces it with (a SetupIntent; nothing is charged).
/// - ``lookup(_:)`` never charges: it finds the payment's PaymentIntents with
///   Stripe's Search API, by `metadata['kiosk_payment_id']`, and cancels one
///   that did not succeed so that it never will.
/// - ``refund(_:reason:)`` refunds the payment's succeeded PaymentIntent
///   (`POST /v1/refunds`, `Idempotency-Key: refund-<payment id>`); a payment
///   already refunded counts as refunded.
///
/// Every request has a timeout (``requestTimeout``). Connection errors,
/// timeouts, `409`, `429` and `5xx` answers are retried up to ``maxRetries``
/// times with exponential backoff and jitter, with the same `Idempotency-Key`,
/// as Stripe recommends; a `Stripe-Should-Retry` header overrides the status.
/// When the retries run out the outcome is unknown and the call throws
/// ``PaymentProcessorError``, so the store keeps the payment open and reconciles
/// it later with ``lookup(_:)``. Requests Stripe refuses for the integration's
/// sake (a bad API key, an invalid parameter) also throw
/// ``PaymentProcessorError``, with Stripe's message.
///
/// - Important: Stripe's search index lags behind writes, usually by under a
///   minute (longer during incidents), so a PaymentIntent made moments ago may
///   not be found yet. Reconcile only payments older than ``lookupDelay``.
///   Stripe also keeps idempotency keys for 24 hours only: a payment whose
///   outcome is unknown must be reconciled with ``lookup(_:)``, never charged
///   again, after that.
public struct StripePaymentProcessor: PaymentProcessor {
    /// Stripe's API host.
    public static let defaultBaseURL = "https://api.stripe.com"
    /// The Stripe API version every request asks for (`Stripe-Version`), so the
    /// shapes this processor reads do not change with the account's default.
    public static let apiVersion = "2024-06-20"

    /// Where requests go: ``defaultBaseURL``, or a local double of the API.
    public let baseURL: String
    /// The longest one HTTP request may take, response body included.
    public var requestTimeout: Duration
    /// How many times a request that got no answer, or a `409`, `429` or `5xx`,
    /// is sent again (so at most `maxRetries + 1` attempts).
    public var maxRetries: Int
    /// The wait before the first retry; it doubles for each further retry (with
    /// jitter), up to 32 times this.
    public var retryBaseDelay: Duration
    /// How old a payment must be before the store reconciles it with
    /// ``lookup(_:)``: Stripe's search index can lag up to a minute behind a
    /// charge, so an earlier lookup could miss it. 60 seconds for Stripe; zero
    /// for a local double that indexes at once.
    public var lookupDelay: Duration

    private let secretKey: String
    private let httpClient: HTTPClient
    private let recentCharges = RecentStripeCharges()

    /// Creates the processor.
    /// - Parameters:
    ///   - secretKey: A Stripe secret (`sk_…`) or restricted (`rk_…`) key; a
    ///     `…_test_…` key takes no real money, but the processor is still not
    ///     simulated.
    ///   - baseURL: The API's address, without a trailing `/v1`.
    ///   - httpClient: The client requests go through.
    ///   - requestTimeout: See ``requestTimeout``.
    ///   - maxRetries: See ``maxRetries``.
    ///   - retryBaseDelay: See ``retryBaseDelay``.
    ///   - lookupDelay: See ``lookupDelay``.
    public init(
        secretKey: String, baseURL: String = StripePaymentProcessor.defaultBaseURL, httpClient: HTTPClient = .shared,
        requestTimeout: Duration = .seconds(30), maxRetries: Int = 3, retryBaseDelay: Duration = .milliseconds(500),
        lookupDelay: Duration = .seconds(60)
    ) {
        self.secretKey = secretKey
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.httpClient = httpClient
        self.requestTimeout = requestTimeout
        self.maxRetries = max(0, maxRetries)
        self.retryBaseDelay = retryBaseDelay
        self.lookupDelay = lookupDelay
    }

    /// `stripe`.
    public var name: String { "stripe" }
    /// False, even with a test-mode key: the processor talks to Stripe.
    public var isSimulated: Bool { false }

    /// A price Stripe cannot take in its currency: a three-decimal currency (KWD, BHD, JOD, OMR, TND) priced in
    /// thousandths that are not whole hundredths (Stripe refuses `1.255` KWD, takes `1.250`), or an amount past 64
    /// bits in Stripe's units. Stripe's minimum charge (0.50 USD or its worth in the settlement currency) depends on
    /// the account and the day's rate, and is not checked here.
    public func refusal(toCharge price: Money) -> String? {
        guard !price.isZero, StripeAmount.apiAmount(price) == nil else { return nil }
        if StripeAmount.exponent(price.currency) == 3 {
            return "Stripe charges \(price.currency) in whole hundredths (a last decimal of 0, such as "
                + "\(Money(minorUnits: price.minorUnits / 10 * 10, currency: price.currency).decimalString)): "
                + "\(price.decimalString) cannot be charged"
        }
        return "\(price) is not an amount Stripe can charge"
    }

    /// True for a test-mode key (`sk_test_…`, `rk_test_…`): Stripe takes no real money.
    public var isTestMode: Bool { secretKey.hasPrefix("sk_test_") || secretKey.hasPrefix("rk_test_") }

    /// The longest one Stripe request can take, retries and backoff included:
    /// `(maxRetries + 1) × requestTimeout` plus the waits between attempts
    /// (2 min 3.5 s with the defaults). A charge is one such request (plus a
    /// cancel when the card needs authentication); a store must not reconcile a
    /// payment a live process may still be charging before this has passed.
    public var longestRequest: Duration {
        var total = requestTimeout * (maxRetries + 1)
        for attempt in 0..<maxRetries { total += retryBaseDelay * (1 << min(attempt, 5)) }
        return total
    }

    // MARK: Charging

    /// Creates and confirms a PaymentIntent for the payment (`Idempotency-Key`:
    /// the payment id): `succeeded` with the PaymentIntent's id as reference, or
    /// `declined` with Stripe's decline code (`card_declined`,
    /// `insufficient_funds`, `expired_card`, …; `invalid_payment_method`,
    /// `invalid_amount`, `authentication_required`). Never `cancelled` or
    /// `deferred`. Throws ``PaymentProcessorError`` when the outcome is unknown
    /// (no answer, `5xx`, still `processing`) or Stripe refused the request.
    public func charge(_ request: PaymentRequest) async throws -> PaymentOutcome {
        if let refusal = Self.localRefusal(of: request) { return refusal }
        guard let amount = StripeAmount.apiAmount(request) else {
            return .declined(
                reason: "invalid_amount",
                message:
                    "\(request.unitPrice) × \(request.quantity) \(request.currency) is not an amount Stripe can charge")
        }
        let response = try await send(
            .POST, "/v1/payment_intents", form: Self.createForm(request, amount: amount),
            idempotencyKey: request.paymentID)
        return try await outcome(of: response, request: request)
    }

    /// Charges like ``charge(_:)``, with the same idempotency key: Stripe has no
    /// deferred payments, so an approved payment is simply charged.
    public func approve(_ request: PaymentRequest) async throws -> PaymentOutcome {
        try await charge(request)
    }

    // MARK: Customers and saved methods

    /// True: renewals charge a Stripe Customer's saved PaymentMethod off-session, as Stripe requires (a
    /// PaymentMethod used once without a Customer may not be used again).
    public var keepsCustomers: Bool { true }

    /// Creates the account's Customer (`POST /v1/customers`, `metadata[kiosk_account_id]`), with
    /// `Idempotency-Key: customer-<account>[-<generation>]`: asked again within Stripe's 24 hours, Stripe answers
    /// the same Customer. The store keeps its id in the ledger, so it is asked once per account (and generation).
    public func createCustomer(accountID: String, generation: String) async throws -> String {
        let response = try await send(
            .POST, "/v1/customers",
            form: [("metadata[kiosk_account_id]", accountID), ("description", "Kiosk account \(accountID)")],
            idempotencyKey: "customer-\(accountID)" + (generation.isEmpty ? "" : "-\(generation)"))
        try Self.requireSuccess(response)
        return try response.decode(StripeCustomer.self).id
    }

    /// Saves `method` to `customer` for off-session use with a SetupIntent (`POST /v1/setup_intents`,
    /// `confirm=true`, `usage=off_session`): nothing is charged; the card issuer may check the card. Answers the
    /// saved PaymentMethod's id (a test method such as `pm_card_visa` is saved under a new id), or why Stripe
    /// refused it (`card_declined`, …; `invalid_payment_method` for a method that is not Stripe's or belongs to
    /// another Customer; `authentication_required` when the issuer wants the buyer to authenticate, which a server
    /// cannot do).
    public func saveMethod(_ method: String, customer: String?, accountID: String) async throws -> MethodSaving {
        let request = PaymentRequest(
            paymentID: "", accountID: accountID, productID: "", quantity: 1, unitPrice: "0", currency: "usd",
            paymentMethod: method)
        if case .declined(let reason, let message) = Self.localRefusal(of: request) {
            return .declined(reason: reason, message: message)
        }
        guard let customer else { throw PaymentProcessorError("stripe: a method is saved to a Customer; none given") }
        let form = [
            ("customer", customer), ("payment_method", method), ("confirm", "true"), ("usage", "off_session"),
            ("automatic_payment_methods[enabled]", "true"), ("automatic_payment_methods[allow_redirects]", "never"),
            ("metadata[kiosk_account_id]", accountID),
        ]
        // A new key per call: saving the same card again later must ask Stripe again, not replay a refusal.
        let response = try await send(
            .POST, "/v1/setup_intents", form: form, idempotencyKey: "setup-\(accountID)-\(UUID().uuidString)")
        switch response.status.code {
        case 200..<300:
            let intent = try response.decode(StripeSetupIntent.self)
            switch intent.status {
            case "succeeded":
                guard let saved = intent.paymentMethod else {
                    throw PaymentProcessorError("stripe: SetupIntent \(intent.id) succeeded without a payment_method")
                }
                return .saved(method: saved)
            case "requires_action":
                return .declined(
                    reason: "authentication_required",
                    message: "the card issuer requires the buyer to authenticate before the card is saved")
            case "requires_payment_method":
                let outcome = Self.declined(
                    intent.lastSetupError ?? StripeErrorBody(type: "card_error", code: "card_declined"))
                if case .declined(let reason, let message) = outcome {
                    return .declined(reason: reason, message: message)
                }
                return .declined(reason: "card_declined", message: "the card was declined")
            default:
                throw PaymentProcessorError("stripe: SetupIntent \(intent.id) is \(intent.status)")
            }
        case 402:
            let outcome = Self.declined(response.error() ?? StripeErrorBody(type: "card_error", code: "card_declined"))
            if case .declined(let reason, let message) = outcome { return .declined(reason: reason, message: message) }
            return .declined(reason: "card_declined", message: "the card was declined")
        case let code where Self.isTransient(code):
            throw Self.unknownOutcome(response)
        case 400..<500:
            let error = response.error()
            if let outcome = Self.declinedForBadInput(error), case .declined(let reason, let message) = outcome {
                return .declined(reason: reason, message: message)
            }
            throw Self.rejected(response, error: error)
        default:
            throw Self.unknownOutcome(response)
        }
    }

    /// What became of a renewal's PaymentIntent that needed the buyer (`GET /v1/payment_intents/{id}`):
    /// `succeeded` is charged; `canceled` ended; anything else waits for the buyer, or, `cancelling`, is cancelled
    /// (`POST …/cancel`) and ended unless it succeeded meanwhile. `processing` throws (ask again later).
    public func resolveAction(reference: String, cancelling: Bool) async throws -> ActionResolution {
        var intent = try await retrieve(reference)
        if cancelling, Self.cancellableStatuses.contains(intent.status) { intent = try await cancel(intent) }
        switch intent.status {
        case "succeeded":
            return .charged(reference: intent.id)
        case "canceled":
            return .ended
        case "processing":
            throw PaymentProcessorError("stripe: PaymentIntent \(intent.id) is still processing; ask again later")
        default:
            return .waiting
        }
    }

    /// The Kiosk payment id a PaymentIntent was made for (`metadata[kiosk_payment_id]`), nil for one Kiosk did not
    /// make. For webhook objects that name a PaymentIntent but not its metadata (a Charge, a Dispute).
    public func paymentID(ofPaymentIntent id: String) async throws -> String? {
        try await retrieve(id).metadata?["kiosk_payment_id"]
    }

    /// Declines, without asking Stripe, a payment method that is not Stripe's.
    private static func localRefusal(of request: PaymentRequest) -> PaymentOutcome? {
        let method = request.paymentMethod
        if method.isEmpty || SimulatedPaymentProcessor.isTestMethod(method) {
            return .declined(
                reason: "invalid_payment_method",
                message: "\"\(method)\" is not a Stripe payment method; use a pm_… id (pm_card_visa in test mode)")
        }
        return nil
    }

    /// The form that creates and confirms the payment's PaymentIntent.
    static func createForm(_ request: PaymentRequest, amount: Int64) -> [(String, String)] {
        var form = [
            ("amount", String(amount)),
            ("currency", request.currency.lowercased()),
            ("payment_method", request.paymentMethod),
            ("confirm", "true"),
            ("automatic_payment_methods[enabled]", "true"),
            ("automatic_payment_methods[allow_redirects]", "never"),
            ("metadata[kiosk_payment_id]", request.paymentID),
            ("metadata[kiosk_account_id]", request.accountID),
            ("metadata[kiosk_product_id]", request.productID),
        ]
        if let customer = request.customer {
            form.append(("customer", customer))
            if request.isRenewal {
                // A merchant-initiated charge of the saved method: the buyer is not there to authenticate.
                form.append(("off_session", "true"))
            } else if request.savesMethod {
                form.append(("setup_future_usage", "off_session"))
            }
        }
        return form
    }

    /// What Stripe's answer to a create-and-confirm request means.
    private func outcome(of response: StripeResponse, request: PaymentRequest) async throws -> PaymentOutcome {
        switch response.status.code {
        case 200..<300:
            return try await outcome(of: response.decode(StripePaymentIntent.self), request: request)
        case 402:
            let error = response.error()
            // An off-session renewal the issuer wants authenticated: the buyer can still confirm this PaymentIntent.
            if request.isRenewal, error?.code == "authentication_required",
                let intent = try? response.decode(StripeErrorIntentEnvelope.self).error.paymentIntent,
                let clientSecret = intent.clientSecret
            {
                return .needsAction(reference: intent.id, clientSecret: clientSecret)
            }
            return Self.declined(error ?? StripeErrorBody(type: "card_error", code: "card_declined"))
        case let code where Self.isTransient(code):
            throw Self.unknownOutcome(response)
        case 400..<500:
            let error = response.error()
            if let declined = Self.declinedForBadInput(error) { return declined }
            throw Self.rejected(response, error: error)
        default:
            throw Self.unknownOutcome(response)
        }
    }

    /// What a PaymentIntent's status means for the payment.
    private func outcome(of intent: StripePaymentIntent, request: PaymentRequest) async throws -> PaymentOutcome {
        switch intent.status {
        case "succeeded":
            await recentCharges.remember(intent, for: request.paymentID)
            return .succeeded(reference: intent.id, savedMethod: intent.savedMethod)
        case "requires_payment_method":
            return Self.declined(intent.lastPaymentError ?? StripeErrorBody(type: "card_error", code: "card_declined"))
        case "requires_action" where request.isRenewal:
            // A renewal: the buyer authenticates later, in the app, with the client secret.
            guard let clientSecret = intent.clientSecret else {
                throw PaymentProcessorError(
                    "stripe: PaymentIntent \(intent.id) requires action but has no client_secret")
            }
            return .needsAction(reference: intent.id, clientSecret: clientSecret)
        case "requires_action":
            // The buyer must authenticate (3-D Secure), which a server cannot do:
            // cancel the intent so it can never be completed, and decline.
            _ = try? await cancel(intent)
            return .declined(
                reason: "authentication_required",
                message: "the card issuer requires the buyer to authenticate this payment")
        case "canceled":
            return .declined(reason: "payment_canceled", message: "Stripe cancelled PaymentIntent \(intent.id)")
        case "processing":
            throw PaymentProcessorError(
                "stripe: PaymentIntent \(intent.id) is still processing; its outcome is not known yet")
        default:
            throw PaymentProcessorError("stripe: PaymentIntent \(intent.id) has unexpected status \(intent.status)")
        }
    }

    /// Decline codes Stripe advises not to show the buyer; they are reported as a plain decline.
    private static let confidentialDeclineCodes: Set<String> = [
        "fraudulent", "lost_card", "stolen_card", "pickup_card", "merchant_blacklist", "restricted_card",
        "security_violation",
    ]

    /// A card error as a decline: the reason is the decline code when it says
    /// more than `generic_decline`, else the error code.
    static func declined(_ error: StripeErrorBody) -> PaymentOutcome {
        if let decline = error.declineCode, confidentialDeclineCodes.contains(decline) {
            return .declined(reason: "card_declined", message: "Your card was declined.")
        }
        let reason: String
        if let decline = error.declineCode, decline != "generic_decline" {
            reason = decline
        } else {
            reason = error.code ?? "card_declined"
        }
        return .declined(reason: reason, message: error.message ?? "the card was declined")
    }

    /// A `400` about the buyer's input (their payment method or the price) as a decline.
    private static func declinedForBadInput(_ error: StripeErrorBody?) -> PaymentOutcome? {
        guard let error else { return nil }
        let message = error.message ?? "Stripe refused the payment"
        if error.param == "payment_method" {
            return .declined(reason: "invalid_payment_method", message: message)
        }
        if error.param == "customer" {
            // The Customer the store kept is gone (deleted, or another Stripe account's): the store forgets it.
            return .declined(reason: PaymentOutcome.customerMissingReason, message: message)
        }
        if error.param == "amount" || error.code == "amount_too_small" || error.code == "amount_too_large" {
            return .declined(reason: "invalid_amount", message: message)
        }
        return nil
    }

    // MARK: Lookup

    /// Whether the payment was charged. Sends no charge: it reads the payment's
    /// PaymentIntents (from this process's recent charges, else Stripe's Search
    /// API) and cancels any that did not succeed. Throws
    /// ``PaymentProcessorError`` when Stripe cannot be asked or a PaymentIntent
    /// is still processing.
    ///
    /// Stripe's search index lags up to a minute behind: a payment charged more
    /// recently than ``lookupDelay`` may be answered `notCharged` wrongly, so the
    /// store reconciles only payments older than that.
    public func lookup(_ request: PaymentRequest) async throws -> PaymentLookup {
        if let recent = await recentCharges.charge(for: request.paymentID) {
            return .charged(reference: recent.intentID, savedMethod: recent.savedMethod)
        }
        let intents = try await searchIntents(paymentID: request.paymentID)
        if let charged = intents.first(where: { $0.status == "succeeded" }) {
            await recentCharges.remember(charged, for: request.paymentID)
            return .charged(reference: charged.id, savedMethod: charged.savedMethod)
        }
        for intent in intents {
            let settled = Self.cancellableStatuses.contains(intent.status) ? try await cancel(intent) : intent
            switch settled.status {
            case "succeeded":
                await recentCharges.remember(settled, for: request.paymentID)
                return .charged(reference: settled.id, savedMethod: settled.savedMethod)
            case "canceled":
                continue
            default:
                throw PaymentProcessorError(
                    "stripe: PaymentIntent \(settled.id) for payment \(request.paymentID) is \(settled.status); ask again later"
                )
            }
        }
        return .notCharged
    }

    /// The statuses a PaymentIntent can be cancelled in (`processing` only rarely, so it is left alone).
    private static let cancellableStatuses: Set<String> = [
        "requires_payment_method", "requires_confirmation", "requires_action", "requires_capture",
    ]

    /// The payment's PaymentIntents, found with Stripe's Search API.
    private func searchIntents(paymentID: String) async throws -> [StripePaymentIntent] {
        let query = StripeSearch.metadataEquals("kiosk_payment_id", paymentID)
        let response = try await send(.GET, "/v1/payment_intents/search", query: [("query", query), ("limit", "100")])
        try Self.requireSuccess(response)
        let result = try response.decode(StripeSearchResult.self)
        return result.data.filter { $0.metadata?["kiosk_payment_id"] == paymentID }
    }

    /// Cancels a PaymentIntent and answers its state after: `canceled`, or
    /// whatever it reached first if it could no longer be cancelled.
    private func cancel(_ intent: StripePaymentIntent) async throws -> StripePaymentIntent {
        let response = try await send(
            .POST, "/v1/payment_intents/\(StripeForm.escape(intent.id))/cancel",
            form: [("cancellation_reason", "abandoned")], idempotencyKey: "cancel-\(intent.id)")
        if (200..<300).contains(response.status.code) { return try response.decode(StripePaymentIntent.self) }
        if Self.isTransient(response.status.code) { throw Self.unknownOutcome(response) }
        let error = response.error()
        if error?.code == "payment_intent_unexpected_state" { return try await retrieve(intent.id) }
        throw Self.rejected(response, error: error)
    }

    /// A PaymentIntent as Stripe has it now.
    private func retrieve(_ intentID: String) async throws -> StripePaymentIntent {
        let response = try await send(.GET, "/v1/payment_intents/\(StripeForm.escape(intentID))")
        try Self.requireSuccess(response)
        return try response.decode(StripePaymentIntent.self)
    }

    // MARK: Refunds

    /// Refunds the payment's succeeded PaymentIntent in full, once: the
    /// `Idempotency-Key` is `refund-<payment id>`, and Stripe's
    /// `charge_already_refunded` counts as done. Stripe's `reason` only takes
    /// its own three values, so Kiosk's `reason` stays in Kiosk's ledger.
    ///
    /// The PaymentIntent is the one this process charged, else the one Stripe's
    /// Search API finds; a payment charged by another process less than a
    /// minute ago may not be found yet, which throws ``PaymentProcessorError``
    /// (ask again later). A payment Stripe has only unsucceeded PaymentIntents
    /// for took no money, and there is nothing to refund.
    public func refund(_ request: PaymentRequest, reason: String) async throws {
        guard let intentID = try await chargedIntentID(for: request) else { return }
        let form = [("payment_intent", intentID), ("metadata[kiosk_payment_id]", request.paymentID)]
        let response = try await send(.POST, "/v1/refunds", form: form, idempotencyKey: "refund-\(request.paymentID)")
        switch response.status.code {
        case 200..<300:
            let refund = try response.decode(StripeRefund.self)
            if let status = refund.status, status == "failed" || status == "canceled" {
                throw PaymentProcessorError("stripe: refund \(refund.id) of payment \(request.paymentID) \(status)")
            }
        case let code where Self.isTransient(code):
            throw Self.unknownOutcome(response)
        case 400..<500 where response.error()?.code == "charge_already_refunded":
            return
        default:
            throw Self.rejected(response, error: response.error())
        }
    }

    /// The id of the payment's succeeded PaymentIntent; nil when Stripe has
    /// PaymentIntents for it but none succeeded.
    private func chargedIntentID(for request: PaymentRequest) async throws -> String? {
        if let recent = await recentCharges.charge(for: request.paymentID) { return recent.intentID }
        let intents = try await searchIntents(paymentID: request.paymentID)
        if let charged = intents.first(where: { $0.status == "succeeded" }) { return charged.id }
        guard !intents.isEmpty else {
            throw PaymentProcessorError(
                "stripe: no PaymentIntent found for payment \(request.paymentID) (Stripe's search index can lag up to a minute); ask again later"
            )
        }
        if let pending = intents.first(where: { $0.status == "processing" }) {
            throw PaymentProcessorError(
                "stripe: PaymentIntent \(pending.id) for payment \(request.paymentID) is still processing; ask again later"
            )
        }
        return nil
    }

    // MARK: Errors

    /// `409` (a concurrent request with the same key), `429` and `5xx`: the
    /// request may not have been executed, or its outcome is not known.
    private static func isTransient(_ code: UInt) -> Bool {
        code == 409 || code == 429 || code >= 500
    }

    /// Throws for anything but a `2xx`.
    private static func requireSuccess(_ response: StripeResponse) throws {
        guard !(200..<300).contains(response.status.code) else { return }
        throw isTransient(response.status.code) ? unknownOutcome(response) : rejected(response, error: response.error())
    }

    /// A request Stripe refused for the integration's sake (bad key, invalid
    /// parameter): nothing was charged, and asking again will not help.
    private static func rejected(_ response: StripeResponse, error: StripeErrorBody?) -> PaymentProcessorError {
        let what = response.status.code == 401 ? "rejected the API key" : "refused the request"
        let detail = [error?.type, error?.code].compactMap { $0 }.joined(separator: "/")
        let message = error?.message ?? response.bodyText
        return PaymentProcessorError(
            "stripe \(what) (HTTP \(response.status.code)\(detail.isEmpty ? "" : " \(detail)")): \(message)")
    }

    /// A `5xx` or `429` left after the retries: the outcome is unknown.
    private static func unknownOutcome(_ response: StripeResponse) -> PaymentProcessorError {
        let message = response.error()?.message ?? response.bodyText
        return PaymentProcessorError("stripe: outcome unknown after HTTP \(response.status.code): \(message)")
    }

    // MARK: HTTP

    /// Sends a request, retrying what may succeed when sent again (same
    /// `Idempotency-Key`), and answers the last response. Throws
    /// ``PaymentProcessorError`` when no response came after the retries.
    private func send(
        _ method: HTTPMethod, _ path: String, query: [(String, String)] = [], form: [(String, String)]? = nil,
        idempotencyKey: String? = nil
    ) async throws -> StripeResponse {
        let request = makeRequest(method, path, query: query, form: form, idempotencyKey: idempotencyKey)
        var attempt = 0
        while true {
            do {
                let response = try await sendOnce(request)
                guard attempt < maxRetries, Self.shouldRetry(response) else { return response }
            } catch let error as CancellationError {
                throw error
            } catch {
                if Task.isCancelled { throw CancellationError() }
                guard attempt < maxRetries else {
                    throw PaymentProcessorError(
                        "stripe: no answer to \(method) \(path) after \(attempt + 1) attempts: \(error)")
                }
            }
            try await Task.sleep(for: backoff(afterAttempt: attempt))
            attempt += 1
        }
    }

    /// Whether a response is worth sending the request again for.
    static func shouldRetry(_ response: StripeResponse) -> Bool {
        switch response.headers.first(name: "Stripe-Should-Retry")?.lowercased() {
        case "true": return true
        case "false": return false
        default: return isTransient(response.status.code)
        }
    }

    /// The wait before retry `attempt + 1`: exponential, capped, with jitter (50–100 %).
    private func backoff(afterAttempt attempt: Int) -> Duration {
        let factor = 1 << min(attempt, 5)
        return retryBaseDelay * factor * Double.random(in: 0.5...1.0)
    }

    private func makeRequest(
        _ method: HTTPMethod, _ path: String, query: [(String, String)], form: [(String, String)]?,
        idempotencyKey: String?
    ) -> HTTPClientRequest {
        var request = HTTPClientRequest(url: baseURL + path + (query.isEmpty ? "" : "?" + StripeForm.encode(query)))
        request.method = method
        request.headers.add(name: "Authorization", value: "Bearer \(secretKey)")
        request.headers.add(name: "Stripe-Version", value: Self.apiVersion)
        request.headers.add(name: "User-Agent", value: "Kiosk StripePaymentProcessor")
        request.headers.add(name: "Accept", value: "application/json")
        if let idempotencyKey { request.headers.add(name: "Idempotency-Key", value: idempotencyKey) }
        if let form {
            request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
            request.body = .bytes(ByteBuffer(string: StripeForm.encode(form)))
        }
        return request
    }

    /// One attempt, within ``requestTimeout``.
    private func sendOnce(_ request: HTTPClientRequest) async throws -> StripeResponse {
        let deadline = NIODeadline.now() + TimeAmount(requestTimeout)
        let response = try await httpClient.execute(request, deadline: deadline)
        let body = try await response.body.collect(upTo: 4 << 20)
        return StripeResponse(status: response.status, headers: response.headers, body: body)
    }
}

// MARK: - Helpers

/// The PaymentIntents this process charged lately, by payment id: a refund or a
/// lookup right after a charge cannot rely on Stripe's lagging search index.
private actor RecentStripeCharges {
    private var charges: [String: (intentID: String, savedMethod: String?)] = [:]
    private var order: [String] = []
    private let capacity = 10_000

    func remember(_ intent: StripePaymentIntent, for paymentID: String) {
        if charges.updateValue((intent.id, intent.savedMethod), forKey: paymentID) == nil { order.append(paymentID) }
        if order.count > capacity {
            let dropped = order.prefix(order.count - capacity)
            for paymentID in dropped { charges[paymentID] = nil }
            order.removeFirst(dropped.count)
        }
    }

    func charge(for paymentID: String) -> (intentID: String, savedMethod: String?)? { charges[paymentID] }
}

/// Kiosk amounts in Stripe's units.
enum StripeAmount {
    /// Currencies Stripe counts in whole units (no cents).
    static let zeroDecimal: Set<String> = [
        "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf",
    ]
    /// Currencies Stripe counts in thousandths.
    static let threeDecimal: Set<String> = ["bhd", "jod", "kwd", "omr", "tnd"]

    /// The number of decimals Stripe counts `currency` in.
    static func exponent(_ currency: String) -> Int {
        let lower = currency.lowercased()
        if zeroDecimal.contains(lower) { return 0 }
        if threeDecimal.contains(lower) { return 3 }
        return 2
    }

    /// The request's total as Stripe's `amount`: the ISO 4217 minor units (``Money``) converted to the
    /// decimals Stripe counts the currency in (cents for most, whole units for zero-decimal ones, so the
    /// total must be whole; thousandths for three-decimal ones, which Stripe takes only in whole hundredths, a last
    /// digit of 0; ISK, zero-decimal in ISO 4217 but not in Stripe's list, in hundredths). Nil when it cannot be
    /// expressed or is not positive.
    static func apiAmount(_ request: PaymentRequest) -> Int64? {
        request.amount.flatMap(apiAmount)
    }

    /// `amount` as Stripe's `amount` (see ``apiAmount(_:)-(PaymentRequest)``); nil when it cannot be expressed or is
    /// not positive.
    static func apiAmount(_ amount: Money) -> Int64? {
        guard amount.minorUnits > 0 else { return nil }
        let iso = Currency.exponent(of: amount.currency)
        let stripe = exponent(amount.currency)
        var value = amount.minorUnits
        if stripe >= iso {
            for _ in iso..<stripe {
                let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
                if overflow { return nil }
                value = shifted
            }
        } else {
            for _ in stripe..<iso {
                guard value % 10 == 0 else { return nil }
                value /= 10
            }
        }
        if stripe == 3, value % 10 != 0 { return nil }
        return value
    }
}

/// `application/x-www-form-urlencoded`, as Stripe reads it.
enum StripeForm {
    private static let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

    /// Percent-encodes everything but RFC 3986's unreserved characters.
    static func escape(_ text: String) -> String {
        var escaped = ""
        for byte in text.utf8 {
            if unreserved.contains(byte) {
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                escaped += String(format: "%%%02X", byte)
            }
        }
        return escaped
    }

    /// `key=value&…`, in order.
    static func encode(_ fields: [(String, String)]) -> String {
        fields.map { "\(escape($0.0))=\(escape($0.1))" }.joined(separator: "&")
    }
}

/// Stripe Search API queries.
enum StripeSearch {
    /// `metadata['key']:'value'`, quotes and backslashes escaped.
    static func metadataEquals(_ key: String, _ value: String) -> String {
        "metadata['\(quoted(key))']:'\(quoted(value))'"
    }

    private static func quoted(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
    }
}

/// An HTTP answer from Stripe, body read.
struct StripeResponse: Sendable {
    var status: HTTPResponseStatus
    var headers: HTTPHeaders
    var body: ByteBuffer

    /// The body as text, for messages.
    var bodyText: String { String(buffer: body) }

    /// The body decoded; a body that is not the expected JSON throws
    /// ``PaymentProcessorError`` (the outcome is then unknown).
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        do {
            return try JSONDecoder().decode(T.self, from: Data(body.readableBytesView))
        } catch {
            throw PaymentProcessorError("stripe: unreadable \(T.self) in HTTP \(status.code) answer: \(error)")
        }
    }

    /// Stripe's error object, if the body is one.
    func error() -> StripeErrorBody? {
        try? JSONDecoder().decode(StripeErrorEnvelope.self, from: Data(body.readableBytesView)).error
    }
}

/// The fields of a PaymentIntent this processor reads.
struct StripePaymentIntent: Decodable, Sendable {
    var id: String
    var status: String
    var amount: Int64?
    var currency: String?
    var metadata: [String: String]?
    var lastPaymentError: StripeErrorBody?
    var paymentMethod: String?
    var clientSecret: String?
    var customer: String?
    var setupFutureUsage: String?

    /// The method a succeeded payment saved to its Customer for off-session use (`setup_future_usage`), else nil.
    var savedMethod: String? {
        status == "succeeded" && customer != nil && setupFutureUsage == "off_session" ? paymentMethod : nil
    }

    enum CodingKeys: String, CodingKey {
        case id, status, amount, currency, metadata, customer
        case lastPaymentError = "last_payment_error"
        case paymentMethod = "payment_method"
        case clientSecret = "client_secret"
        case setupFutureUsage = "setup_future_usage"
    }
}

/// `{"error": {…, "payment_intent": {…}}}`: a card error with the PaymentIntent it left.
struct StripeErrorIntentEnvelope: Decodable, Sendable {
    struct Body: Decodable, Sendable {
        var paymentIntent: StripePaymentIntent?
        enum CodingKeys: String, CodingKey { case paymentIntent = "payment_intent" }
    }
    var error: Body
}

/// The fields of a Customer this processor reads.
struct StripeCustomer: Decodable, Sendable {
    var id: String
}

/// The fields of a SetupIntent this processor reads.
struct StripeSetupIntent: Decodable, Sendable {
    var id: String
    var status: String
    var paymentMethod: String?
    var lastSetupError: StripeErrorBody?

    enum CodingKeys: String, CodingKey {
        case id, status
        case paymentMethod = "payment_method"
        case lastSetupError = "last_setup_error"
    }
}

/// `{"error": {...}}`.
struct StripeErrorEnvelope: Decodable, Sendable {
    var error: StripeErrorBody
}

/// Stripe's error object (also a PaymentIntent's `last_payment_error`).
struct StripeErrorBody: Decodable, Sendable {
    var type: String?
    var code: String?
    var declineCode: String?
    var message: String?
    var param: String?

    init(
        type: String? = nil, code: String? = nil, declineCode: String? = nil, message: String? = nil,
        param: String? = nil
    ) {
        self.type = type
        self.code = code
        self.declineCode = declineCode
        self.message = message
        self.param = param
    }

    enum CodingKeys: String, CodingKey {
        case type, code, message, param
        case declineCode = "decline_code"
    }
}

/// A search answer's page of PaymentIntents.
struct StripeSearchResult: Decodable, Sendable {
    var data: [StripePaymentIntent]
}

/// The fields of a Refund this processor reads.
struct StripeRefund: Decodable, Sendable {
    var id: String
    var status: String?
}
