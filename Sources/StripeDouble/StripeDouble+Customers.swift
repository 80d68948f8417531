import Foundation

// Customers, PaymentMethods and SetupIntents, as Stripe's API reference documents them:
//
// | request | answer |
// |---|---|
// | `POST /v1/customers` | a Customer (`description`, `email`, `name`, `metadata[…]`) |
// | `GET /v1/customers/{id}` | the Customer |
// | `POST /v1/payment_methods` | a card PaymentMethod from a test token (`type=card`, `card[token]=tok_visa`, …) |
// | `GET /v1/payment_methods/{id}` | the PaymentMethod, with the Customer it is attached to |
// | `POST /v1/setup_intents` | saves a PaymentMethod to a Customer (`confirm=true`, `usage=off_session`) |
//
// Stripe's rules the double keeps: a test method name (`pm_card_visa`) makes a new PaymentMethod each time it is
// used; a PaymentMethod used in a payment without being saved to a Customer may not be used again; a PaymentMethod
// attached to a Customer is only used with that Customer; a PaymentIntent with `setup_future_usage` attaches its
// method to its Customer when it succeeds; an `off_session` payment of a card that wants authentication declines
// with `authentication_required`.
extension StripeDoubleAPI {
    struct Customer {
        var id: String
        var created: Int64
        var description: String?
        var email: String?
        var name: String?
        var metadata: [String: String]
    }

    struct PaymentMethod {
        var id: String
        var behaviour: Behaviour
        /// The test name it was made from (`pm_card_visa`, `tok_visa`), for its card's brand and last digits.
        var source: String
        var customer: String?
        /// Used in a payment without being saved to a Customer: Stripe refuses it from then on.
        var consumed = false
        var created: Int64
    }

    /// A refusal as Stripe answers it.
    struct Refusal: Error {
        var response: Response
    }

    static func noSuchCustomer(_ id: String) -> Response {
        error(400, code: "resource_missing", param: "customer", message: "No such customer: '\(id)'")
    }

    /// The PaymentMethod `name` names for a payment or a SetupIntent with `customer`: a new one for a test method
    /// name, else the stored one if Stripe would let it be used.
    func usableMethod(_ name: String, customer: String?, _ state: State) -> Result<PaymentMethod, Refusal> {
        if let behaviour = Self.behaviour(of: name) {
            return .success(
                PaymentMethod(id: Self.newID("pm"), behaviour: behaviour, source: name, created: Self.now()))
        }
        guard let method = state.paymentMethods[name] else {
            return .failure(
                Refusal(
                    response: Self.error(
                        400, code: "resource_missing", param: "payment_method",
                        message: "No such PaymentMethod: '\(name)'")))
        }
        if let owner = method.customer, owner != customer {
            let message =
                customer == nil
                ? "The provided PaymentMethod is attached to a Customer. To use it, pass that Customer as `customer`."
                : "The provided PaymentMethod does not belong to the Customer \(customer ?? "")."
            return .failure(
                Refusal(
                    response: Self.error(400, code: "payment_method_invalid", param: "payment_method", message: message)
                ))
        }
        if method.customer == nil, method.consumed {
            return .failure(
                Refusal(
                    response: Self.error(
                        400, param: "payment_method",
                        message:
                            "The provided PaymentMethod was previously used with a PaymentIntent without Customer attachment, shared with a connected account without Customer attachment, or was detached from a Customer. It may not be used again. To use a PaymentMethod multiple times, you must attach it to a Customer first."
                    )))
        }
        return .success(method)
    }

    // MARK: Customers

    func createCustomer(_ params: [String: String], _ state: inout State) -> Execution {
        if let invalid = Self.unknownParameter(
            params, allowed: ["description", "email", "name"], prefixes: ["metadata["])
        {
            return Execution(response: invalid, stored: false)
        }
        let customer = Customer(
            id: Self.newID("cus"), created: Self.now(), description: params["description"], email: params["email"],
            name: params["name"], metadata: Self.metadata(params))
        state.customers[customer.id] = customer
        return Execution(response: Self.json(200, render(customer, state)), stored: true)
    }

    func retrieveCustomer(_ id: String, _ state: State) -> Response {
        guard let customer = state.customers[id] else {
            return Self.error(404, code: "resource_missing", param: "id", message: "No such customer: '\(id)'")
        }
        return Self.json(200, render(customer, state))
    }

    private func render(_ customer: Customer, _ state: State) -> DoubleJSON {
        .object([
            ("id", .string(customer.id)), ("object", .string("customer")), ("created", .int(customer.created)),
            ("description", customer.description.map(DoubleJSON.string) ?? .null),
            ("email", customer.email.map(DoubleJSON.string) ?? .null),
            ("invoice_settings", .object([("default_payment_method", .null)])),
            ("livemode", .bool(false)), ("metadata", Self.render(customer.metadata)),
            ("name", customer.name.map(DoubleJSON.string) ?? .null),
        ])
    }

    // MARK: PaymentMethods

    func createPaymentMethod(_ params: [String: String], _ state: inout State) -> Execution {
        if let invalid = Self.unknownParameter(params, allowed: ["type", "card[token]"], prefixes: ["metadata["]) {
            return Execution(response: invalid, stored: false)
        }
        guard let type = params["type"] else { return Execution(response: Self.missing("type"), stored: false) }
        guard type == "card" else {
            return Execution(
                response: Self.error(400, param: "type", message: "The double makes card PaymentMethods only"),
                stored: false)
        }
        guard let token = params["card[token]"] else {
            return Execution(response: Self.missing("card[token]"), stored: false)
        }
        guard token.hasPrefix("tok_"), let behaviour = Self.behaviour(of: "pm_card_" + token.dropFirst(4)) else {
            return Execution(
                response: Self.error(
                    400, code: "resource_missing", param: "card[token]", message: "No such token: '\(token)'"),
                stored: false)
        }
        let method = PaymentMethod(id: Self.newID("pm"), behaviour: behaviour, source: token, created: Self.now())
        state.paymentMethods[method.id] = method
        return Execution(response: Self.json(200, Self.render(method)), stored: true)
    }

    func retrievePaymentMethod(_ id: String, _ state: State) -> Response {
        guard let method = state.paymentMethods[id] else {
            return Self.error(404, code: "resource_missing", param: "id", message: "No such PaymentMethod: '\(id)'")
        }
        return Self.json(200, Self.render(method))
    }

    static func render(_ method: PaymentMethod) -> DoubleJSON {
        .object([
            ("id", .string(method.id)), ("object", .string("payment_method")), ("type", .string("card")),
            ("created", .int(method.created)), ("customer", method.customer.map(DoubleJSON.string) ?? .null),
            ("livemode", .bool(false)),
        ])
    }

    // MARK: SetupIntents

    private static let setupParams: Set<String> = [
        "customer", "payment_method", "confirm", "usage", "return_url", "automatic_payment_methods[enabled]",
        "automatic_payment_methods[allow_redirects]",
    ]

    func createSetupIntent(_ params: [String: String], _ state: inout State) -> Execution {
        if let invalid = Self.unknownParameter(
            params, allowed: Self.setupParams, prefixes: ["metadata[", "payment_method_types["])
        {
            return Execution(response: invalid, stored: false)
        }
        if let usage = params["usage"], usage != "on_session", usage != "off_session" {
            return Execution(
                response: Self.error(
                    400, param: "usage", message: "Invalid usage: must be one of on_session or off_session"),
                stored: false)
        }
        let customer = params["customer"]
        if let customer, state.customers[customer] == nil {
            return Execution(response: Self.noSuchCustomer(customer), stored: false)
        }
        let confirm = params["confirm"] == "true"
        if confirm, params["payment_method"] == nil {
            return Execution(
                response: Self.error(
                    400, code: "setup_intent_unexpected_state", param: "payment_method",
                    message: "You cannot confirm this SetupIntent because it's missing a payment method."),
                stored: false)
        }
        var method: PaymentMethod?
        if let name = params["payment_method"] {
            switch usableMethod(name, customer: customer, state) {
            case .success(let found): method = found
            case .failure(let refusal): return Execution(response: refusal.response, stored: false)
            }
        }
        let id = Self.newID("seti")
        var status = method == nil ? "requires_payment_method" : "requires_confirmation"
        var lastError: DoubleJSON = .null
        var nextAction: DoubleJSON = .null
        var httpStatus = 200
        if confirm, var confirmed = method {
            switch confirmed.behaviour {
            case .succeed:
                status = "succeeded"
                if let customer { confirmed.customer = customer }
            case .requireAction:
                status = "requires_action"
                nextAction = .object([("type", .string("use_stripe_sdk"))])
            case .decline(let code, let declineCode, let message):
                status = "requires_payment_method"
                httpStatus = 402
                lastError = Self.cardError(
                    code: code, declineCode: declineCode, message: message, charge: nil, method: confirmed.id)
                if confirmed.customer == nil { confirmed.consumed = true }
            }
            state.paymentMethods[confirmed.id] = confirmed
            method = confirmed
        } else if let unconfirmed = method {
            state.paymentMethods[unconfirmed.id] = unconfirmed
        }
        let setupIntent = DoubleJSON.object([
            ("id", .string(id)), ("object", .string("setup_intent")),
            ("client_secret", .string("\(id)_secret_\(Self.randomToken(24))")), ("created", .int(Self.now())),
            ("customer", customer.map(DoubleJSON.string) ?? .null), ("last_setup_error", lastError),
            ("livemode", .bool(false)), ("metadata", Self.render(Self.metadata(params))), ("next_action", nextAction),
            ("payment_method", method.map { DoubleJSON.string($0.id) } ?? .null), ("status", .string(status)),
            ("usage", .string(params["usage"] ?? "off_session")),
        ])
        state.setupIntents[id] = setupIntent
        if httpStatus == 402 {
            var body = Self.fields(of: lastError)
            body.append(("setup_intent", setupIntent))
            return Execution(response: Self.json(402, .object([("error", .object(body))])), stored: true)
        }
        return Execution(response: Self.json(200, setupIntent), stored: true)
    }
}

extension StripeDouble {
    /// A PaymentMethod as the double holds it.
    public struct PaymentMethodState: Hashable, Sendable {
        /// `pm_…`.
        public var id: String
        /// The Customer it is attached to, if any.
        public var customer: String?
        /// True once it was used without being saved to a Customer: Stripe refuses it from then on.
        public var consumed: Bool
    }

    /// The PaymentMethod `id`, or nil.
    public func paymentMethod(_ id: String) -> PaymentMethodState? {
        api.withState { state in
            state.paymentMethods[id].map { .init(id: $0.id, customer: $0.customer, consumed: $0.consumed) }
        }
    }

    /// The card issuer of PaymentMethod `id` wants the buyer to authenticate its next charge (SCA): an off-session
    /// payment declines with `authentication_required`, leaving its PaymentIntent for the buyer to confirm; an
    /// on-session confirmation goes to `requires_action` until ``authenticate(paymentIntent:)``.
    public func requireAuthentication(paymentMethod id: String) {
        api.withState { _ = $0.authenticationRequired.insert(id) }
    }

    /// The buyer completes 3-D Secure for a PaymentIntent in `requires_action`: it succeeds (a charge). False when
    /// there is no such PaymentIntent waiting.
    @discardableResult
    public func authenticate(paymentIntent id: String) -> Bool {
        defer { api.sendOutbox() }
        return api.withState { api.authenticate(id, &$0) }
    }

    /// The ids of the Customers whose `metadata[key]` is `value`, oldest first.
    public func customers(metadata key: String, _ value: String) -> [String] {
        api.withState { state in
            state.customers.values.filter { $0.metadata[key] == value }.sorted {
                ($0.created, $0.id) < ($1.created, $1.id)
            }
            .map(\.id)
        }
    }

    /// The PaymentIntents whose `metadata[kiosk_account_id]` is `accountID`, oldest first, with the Customer and
    /// `off_session`-ness they were made with.
    public func paymentIntents(forAccount accountID: String) -> [PaymentIntent] {
        api.withState { state in
            state.intentOrder.compactMap { state.intents[$0] }
                .filter { $0.metadata["kiosk_account_id"] == accountID }
                .map(\.snapshot)
        }
    }
}
