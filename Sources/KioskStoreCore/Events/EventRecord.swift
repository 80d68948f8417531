/// What happened to a purchase: one entry of the ledger's event log, recorded in the same write as
/// the change it describes.

/// The kinds of event. Raw values are the ledger's `type` column and the wire's `EventType`.
///
/// Open, as the log is: replicas of different versions share one ledger during an upgrade, and an
/// event a newer one recorded is kept, listed, signed and delivered by an older one with its number
/// (``isKnown`` false, named `EventType(16)`), never dropped or refused.
public struct EventKind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// A purchase was charged (or a free trial began).
    public static let purchased = EventKind(rawValue: 1)
    /// An auto-renewable subscription renewed: a new transaction, the same original.
    public static let renewed = EventKind(rawValue: 2)
    /// A purchase waits for approval (ask to buy).
    public static let deferred = EventKind(rawValue: 3)
    /// A deferred purchase was approved and charged.
    public static let approved = EventKind(rawValue: 4)
    /// A deferred purchase was declined, or its request expired.
    public static let declined = EventKind(rawValue: 5)
    /// A transaction was refunded or revoked.
    public static let refunded = EventKind(rawValue: 6)
    /// A subscription ended.
    public static let expired = EventKind(rawValue: 7)
    /// The buyer turned auto-renew off or on.
    public static let autoRenewChanged = EventKind(rawValue: 8)
    /// The buyer accepted a subscription's new price.
    public static let priceChanged = EventKind(rawValue: 9)
    /// Sent by an operator to check that receivers are wired up.
    public static let test = EventKind(rawValue: 10)
    /// The buyer asked for a refund.
    public static let refundRequested = EventKind(rawValue: 11)
    /// An operator denied a refund request.
    public static let refundDenied = EventKind(rawValue: 12)
    /// A renewal needs the buyer: the card issuer asked them to authenticate the charge (SCA). The subscription is
    /// in grace or billing retry until they confirm it in the app (its status carries what the app needs, to that
    /// account only).
    public static let renewalNeedsAction = EventKind(rawValue: 13)
    /// The buyer's bank opened a dispute (a chargeback) of the transaction's payment: it is revoked (a REFUNDED
    /// event too), without a refund; the money goes back through the dispute.
    public static let disputed = EventKind(rawValue: 14)
    /// A revocation was undone (the merchant won the dispute): the transaction counts again; a subscription is
    /// entitled to the end of its period, without auto-renew.
    public static let refundReversed = EventKind(rawValue: 15)
    /// An operator acted (a key rotated or retired, a credential created or revoked, webhook deliveries redriven, an
    /// account created…) through the Admin RPCs, `kiosk-store` or the admin console: its `reason` says what, its
    /// ``EventRecord/actor`` who. Actions that record an event of their own (a refund, a denial, an approval) carry
    /// the actor on that event instead.
    public static let operatorAction = EventKind(rawValue: 16)
    /// The account now holds an entitlement it did not hold: ``EventRecord/entitlementID``, granted by the event's
    /// transaction and product, `reason` its source (``EntitlementSource``), ``EventRecord/expiresMs`` its end.
    public static let entitlementStarted = EventKind(rawValue: 17)
    /// The account no longer holds ``EventRecord/entitlementID``: `reason` is `revoked` or `expired`.
    public static let entitlementEnded = EventKind(rawValue: 18)
    /// An operator moved an active subscription's renewal date later: the event's transaction is its latest, whose
    /// expiry and receipt were updated; ``EventRecord/expiresMs`` is the new end, `reason` the operator's.
    public static let renewalExtended = EventKind(rawValue: 19)
    /// The buyer moved their account to another storefront: ``EventRecord/storefront`` is the new one, `reason`
    /// "from" the old one.
    public static let storefrontChanged = EventKind(rawValue: 20)

    /// The kinds this version records, in number order.
    public static let known: [EventKind] = [
        .purchased, .renewed, .deferred, .approved, .declined, .refunded, .expired, .autoRenewChanged, .priceChanged,
        .test,
        .refundRequested, .refundDenied, .renewalNeedsAction, .disputed, .refundReversed, .operatorAction,
        .entitlementStarted, .entitlementEnded, .renewalExtended, .storefrontChanged,
    ]

    /// True for a kind this version records.
    public var isKnown: Bool { rawValue >= 1 && rawValue <= 20 }

    /// The name webhooks and `kiosk-store events` print ("REFUNDED"); `EventType(16)` for a kind this version does not know.
    public var shortName: String {
        switch rawValue {
        case 1: "PURCHASED"
        case 2: "RENEWED"
        case 3: "DEFERRED"
        case 4: "APPROVED"
        case 5: "DECLINED"
        case 6: "REFUNDED"
        case 7: "EXPIRED"
        case 8: "AUTO_RENEW_CHANGED"
        case 9: "PRICE_CHANGED"
        case 10: "TEST"
        case 11: "REFUND_REQUESTED"
        case 12: "REFUND_DENIED"
        case 13: "RENEWAL_NEEDS_ACTION"
        case 14: "DISPUTED"
        case 15: "REFUND_REVERSED"
        case 16: "OPERATOR_ACTION"
        case 17: "ENTITLEMENT_STARTED"
        case 18: "ENTITLEMENT_ENDED"
        case 19: "RENEWAL_EXTENDED"
        case 20: "STOREFRONT_CHANGED"
        default: "EventType(\(rawValue))"
        }
    }

    /// The wire enum's full name ("EVENT_TYPE_REFUNDED").
    public var description: String { isKnown ? "EVENT_TYPE_\(shortName)" : shortName }

    /// The known kind named `name` ("refunded", "REFUNDED" or "EVENT_TYPE_REFUNDED").
    public init?(shortName name: String) {
        let wanted = name.uppercased()
        guard let kind = Self.known.first(where: { $0.shortName == wanted || $0.description == wanted }) else {
            return nil
        }
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
    /// The request id of the call that recorded it (its logs'), empty when none: read back from the ledger, set
    /// by the ledger when it records the event within a call.
    public var requestID: String = ""
    /// The W3C `traceparent` of the span that recorded it, empty when none (read back, as ``requestID``).
    public var traceParent: String = ""
    /// Who made it happen when an operator did (``OperatorScope``): `admin-rpc svc_… (name)`, `console svc_… (name)`,
    /// `kiosk-store (user)`; empty for a buyer's or the store's own doing (read back, as ``requestID``).
    public var actor: String = ""
    /// ENTITLEMENT_STARTED / ENTITLEMENT_ENDED: the catalog's entitlement id.
    public var entitlementID: String = ""
    /// ENTITLEMENT_STARTED: when the entitlement ends unless renewed (ms since 1970); 0: never.
    public var expiresMs: Int64 = 0
    /// The storefront of the event's transaction (or price); STOREFRONT_CHANGED: the new storefront. Empty: none.
    public var storefront: String = ""
    /// The currency of the event's transaction (or PRICE_CHANGED's price). Empty: none.
    public var currency: String = ""

    /// An event to record (its id is assigned by the ledger).
    public init(
        id: UInt64 = 0, type: EventKind, accountID: String, transactionID: String = "",
        originalTransactionID: String = "",
        productID: String = "", createdMs: Int64, reason: String = "", creditShortfall: UInt64 = 0,
        autoRenew: Bool = false,
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
    public init(
        _ type: EventKind, _ record: TransactionRecord, nowMs: Int64, reason: String = "", creditShortfall: UInt64 = 0
    ) {
        self.init(
            type: type, accountID: record.accountID, transactionID: record.id, originalTransactionID: record.originalID,
            productID: record.productID, createdMs: nowMs, reason: reason, creditShortfall: creditShortfall)
        storefront = record.storefront
        currency = record.currency
    }
}
