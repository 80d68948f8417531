/// What happened to a purchase: one entry of the ledger's event log, recorded in the same write as
/// the change it describes.

/// The kinds of event. Raw values are the ledger's `type` column and the wire's `EventType`.
public enum EventKind: Int32, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// A purchase was charged (or a free trial began).
    case purchased = 1
    /// An auto-renewable subscription renewed: a new transaction, the same original.
    case renewed = 2
    /// A purchase waits for approval (ask to buy).
    case deferred = 3
    /// A deferred purchase was approved and charged.
    case approved = 4
    /// A deferred purchase was declined, or its request expired.
    case declined = 5
    /// A transaction was refunded or revoked.
    case refunded = 6
    /// A subscription ended.
    case expired = 7
    /// The buyer turned auto-renew off or on.
    case autoRenewChanged = 8
    /// The buyer accepted a subscription's new price.
    case priceChanged = 9
    /// Sent by an operator to check that receivers are wired up.
    case test = 10
    /// The buyer asked for a refund.
    case refundRequested = 11
    /// An operator denied a refund request.
    case refundDenied = 12

    /// The name webhooks and `kiosk-store events` print ("REFUNDED").
    public var shortName: String {
        switch self {
        case .purchased: "PURCHASED"
        case .renewed: "RENEWED"
        case .deferred: "DEFERRED"
        case .approved: "APPROVED"
        case .declined: "DECLINED"
        case .refunded: "REFUNDED"
        case .expired: "EXPIRED"
        case .autoRenewChanged: "AUTO_RENEW_CHANGED"
        case .priceChanged: "PRICE_CHANGED"
        case .test: "TEST"
        case .refundRequested: "REFUND_REQUESTED"
        case .refundDenied: "REFUND_DENIED"
        }
    }

    /// The wire enum's full name ("EVENT_TYPE_REFUNDED").
    public var description: String { "EVENT_TYPE_\(shortName)" }

    /// The kind named `name` ("refunded", "REFUNDED" or "EVENT_TYPE_REFUNDED").
    public init?(shortName name: String) {
        let wanted = name.uppercased()
        guard let kind = Self.allCases.first(where: { $0.shortName == wanted || $0.description == wanted }) else { return nil }
        self = kind
    }
}

/// One entry of the event log. Ids increase in the order events commit (the ledger adapters see to
/// it), so a reader resuming after an id never misses one.
public struct EventRecord: Hashable, Sendable {
    /// The event's id and cursor (assigned by the ledger; 0 before).
    public var id: UInt64
    public var type: EventKind
    public var accountID: String
    public var transactionID: String
    public var originalTransactionID: String
    public var productID: String
    /// When it was recorded, milliseconds since 1970 (the store's clock).
    public var createdMs: Int64
    /// REFUNDED: the revocation reason; DECLINED: why; REFUND_REQUESTED / REFUND_DENIED: the buyer's or operator's words.
    public var reason: String
    public var creditShortfall: UInt64
    /// AUTO_RENEW_CHANGED: the new setting.
    public var autoRenew: Bool
    /// PRICE_CHANGED: the accepted price.
    public var price: String
    /// EXPIRED: why.
    public var expirationReason: Subscription.ExpirationReason

    /// An event to record (its id is assigned by the ledger).
    public init(
        id: UInt64 = 0, type: EventKind, accountID: String, transactionID: String = "", originalTransactionID: String = "",
        productID: String = "", createdMs: Int64, reason: String = "", creditShortfall: UInt64 = 0, autoRenew: Bool = false,
        price: String = "", expirationReason: Subscription.ExpirationReason = .unspecified
    ) {
        self.id = id
        self.type = type
        self.accountID = accountID
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.createdMs = createdMs
        self.reason = reason
        self.creditShortfall = creditShortfall
        self.autoRenew = autoRenew
        self.price = price
        self.expirationReason = expirationReason
    }

    /// The event about `record` (its ids and product).
    public init(_ type: EventKind, _ record: TransactionRecord, nowMs: Int64, reason: String = "", creditShortfall: UInt64 = 0) {
        self.init(type: type, accountID: record.accountID, transactionID: record.id, originalTransactionID: record.originalID,
                  productID: record.productID, createdMs: nowMs, reason: reason, creditShortfall: creditShortfall)
    }
}
