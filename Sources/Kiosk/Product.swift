import Foundation
import KioskAPI

/// The kind of a product, as in StoreKit.
public enum ProductType: String, Hashable, Sendable, Codable {
    /// Bought any number of times, used up (credits).
    case consumable
    /// Bought once, owned forever, restorable.
    case nonConsumable = "non-consumable"
    /// A subscription that does not renew; it expires.
    case nonRenewable = "non-renewing-subscription"
    /// An auto-renewable subscription; it expires unless renewed.
    case autoRenewable = "auto-renewable-subscription"
    /// An operator's grant of an entitlement for a time, no charge (its product id is `grant:<entitlement>`).
    case grant

    init(_ type: ReceiptV1.ProductType) {
        switch type {
        case .grant: self = .grant
        case .nonConsumable: self = .nonConsumable
        case .nonRenewingSubscription: self = .nonRenewable
        case .autoRenewableSubscription: self = .autoRenewable
        default: self = .consumable
        }
    }
}

/// A product the store sells.
public struct Product: Hashable, Sendable, Identifiable {
    /// The product id, e.g. `credits.5`.
    public var id: String
    /// Its kind.
    public var type: ProductType
    /// The display title.
    public var displayName: String
    /// The display description.
    public var description: String
    /// The price of one unit.
    public var price: Decimal
    /// The ISO 4217 currency code.
    public var currencyCode: String
    /// The price formatted for display, e.g. "0.99 USD".
    public var displayPrice: String
    /// Credits one unit grants (consumables).
    public var creditsPerUnit: UInt64
    /// The largest quantity one purchase may ask for.
    public var maxQuantity: UInt32
    /// True when the content service hosts a file for it.
    public var hostsContent: Bool
    /// The subscription period (ISO 8601, e.g. "P1M"), for subscriptions.
    public var subscriptionPeriod: String?
    /// Auto-renewable subscriptions: period, group, level, grace and billing retry.
    public var subscription: SubscriptionInfo?
    /// The ids of the entitlements buying it grants (``KioskClient/entitlements``); none for consumables.
    public var entitlements: [String]

    init(_ message: StoreV1.Product) {
        id = message.id
        type = ProductType(message.type)
        displayName = message.title
        description = message.description
        price = Decimal(string: message.price, locale: Locale(identifier: "en_US_POSIX")) ?? 0
        currencyCode = message.currency
        displayPrice = "\(message.price) \(message.currency)"
        creditsPerUnit = message.creditsPerUnit
        maxQuantity = message.maxQuantity
        hostsContent = message.hostedContent
        entitlements = message.entitlements
        subscriptionPeriod = message.subscriptionPeriod.isEmpty ? nil : message.subscriptionPeriod
        subscription =
            message.type == .autoRenewableSubscription
            ? SubscriptionInfo(
                period: message.subscriptionPeriod, groupID: message.subscriptionGroup, groupLevel: message.groupLevel,
                gracePeriod: message.gracePeriod.isEmpty ? nil : message.gracePeriod,
                billingRetryPeriod: message.billingRetryPeriod,
                introductoryOffer: message.introductoryOffer.map(SubscriptionOfferInfo.init),
                promotionalOffers: message.promotionalOffers.map(SubscriptionOfferInfo.init))
            : nil
    }
}

/// The answer to ``KioskClient/products(for:)``.
public struct ProductsResult: Hashable, Sendable {
    /// The products found, in the order asked.
    public var products: [Product]
    /// The ids the store does not sell (StoreKit's invalid product identifiers).
    public var invalidIdentifiers: [String]
    /// The storefront the prices are in (ISO 3166-1 alpha-3, "FRA"): the account's.
    public var storefrontCountryCode: String = ""
}

/// A hosted product: the content service's entry joined with the store's product.
public struct HostedProduct: Hashable, Sendable, Identifiable {
    /// The product id.
    public var id: String { product?.id ?? productID }
    /// The product id.
    public var productID: String
    /// The store's product (price, title); nil when the store does not sell it.
    public var product: Product?
    /// The content version.
    public var contentVersion: String
    /// Size of the file.
    public var size: UInt64
    /// Bytes on the wire (compressed chunks).
    public var downloadSize: UInt64
    /// SHA-256 of the file.
    public var sha256: [UInt8]
    /// The content service's title.
    public var title: String
    /// The entitlement that opens it ("pro"): any transaction granting it downloads it
    /// (``KioskClient/download(productID:entitlement:to:)``); nil when only a purchase of ``productID`` does.
    public var entitlementID: String? = nil
}
