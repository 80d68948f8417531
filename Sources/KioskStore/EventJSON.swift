import Foundation

/// Kiosk's JSON lines: keys sorted, slashes unescaped, one object per line: what the command lines print
/// with `--json` and webhooks send.
public enum JSONLine {
    /// `value` encoded as one line.
    public static func encode<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding these plain structs cannot fail; an empty object is still one line of JSON.
        guard let data = try? encoder.encode(value) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}

/// An event as JSON: what `kiosk-store events` prints and webhooks send. Empty and zero fields are left out;
/// `auto_renew` is there for AUTO_RENEW_CHANGED only.
public struct EventDocument: Codable, Hashable, Sendable {
    public var eventID: UInt64
    /// The type's short name ("REFUNDED").
    public var type: String
    public var createdMs: Int64
    /// `sandbox` or `production`.
    public var environment: String
    public var accountID: String?
    public var transactionID: String?
    public var originalTransactionID: String?
    public var productID: String?
    public var reason: String?
    public var creditShortfall: UInt64?
    public var autoRenew: Bool?
    public var price: String?
    public var expirationReason: String?
    /// Who made it happen, when an operator did.
    public var actor: String?
    /// ENTITLEMENT_STARTED / ENTITLEMENT_ENDED: the entitlement.
    public var entitlementID: String?
    /// ENTITLEMENT_STARTED: when it ends unless renewed; left out when never.
    public var expiresMs: Int64?
    /// The storefront of the event's transaction or price (STOREFRONT_CHANGED: the new one).
    public var storefront: String?
    /// The currency of the event's transaction or price.
    public var currency: String?

    enum CodingKeys: String, CodingKey {
        case eventID = "event_id", type, createdMs = "created_ms", environment, accountID = "account_id"
        case transactionID = "transaction_id", originalTransactionID = "original_transaction_id", productID =
            "product_id"
        case reason, creditShortfall = "credit_shortfall", autoRenew = "auto_renew", price, expirationReason =
            "expiration_reason"
        case actor, entitlementID = "entitlement_id", expiresMs = "expires_ms", storefront, currency
    }

    public init(_ event: EventRecord, environment: StoreEnvironment) {
        func present(_ text: String) -> String? { text.isEmpty ? nil : text }
        eventID = event.id
        type = event.type.shortName
        createdMs = event.createdMs
        self.environment = environment.name
        accountID = present(event.accountID)
        transactionID = present(event.transactionID)
        originalTransactionID = present(event.originalTransactionID)
        productID = present(event.productID)
        reason = present(event.reason)
        creditShortfall = event.creditShortfall > 0 ? event.creditShortfall : nil
        autoRenew = event.type == .autoRenewChanged ? event.autoRenew : nil
        price = present(event.price)
        expirationReason = event.expirationReason == .unspecified ? nil : "\(event.expirationReason)"
        actor = present(event.actor)
        entitlementID = present(event.entitlementID)
        expiresMs = event.expiresMs > 0 ? event.expiresMs : nil
        storefront = present(event.storefront)
        currency = present(event.currency)
    }

    /// One line of JSON.
    public var line: String { JSONLine.encode(self) }
}

/// A webhook's POST body: the event's fields and `signed_event`, the base64 of the encoded signed event
/// for offline verification with the store's public keys.
struct WebhookBody: Encodable {
    var event: EventDocument
    var signedEvent: String

    enum CodingKeys: String, CodingKey { case signedEvent = "signed_event" }

    func encode(to encoder: any Encoder) throws {
        try event.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(signedEvent, forKey: .signedEvent)
    }
}
