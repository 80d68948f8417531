import Foundation

/// A product the store sells.
public struct CatalogProduct: Hashable, Sendable {
    /// The product id, e.g. `credits.5`.
    public var id: String
    /// Consumable, non-consumable or a kind of subscription.
    public var type: ProductKind
    /// The display title.
    public var title: String
    /// The display description.
    public var description: String
    /// The price as a decimal string, e.g. "0.99".
    public var price: String
    /// The ISO 4217 currency code, e.g. "USD".
    public var currency: String
    /// Credits granted per unit, for consumables; 0 otherwise.
    public var credits: UInt64
    /// The largest quantity one purchase may ask for.
    public var maxQuantity: UInt32
    /// True when the content service hosts the product's file.
    public var hostedContent: Bool
    /// The subscription period, for subscriptions.
    public var subscriptionPeriod: SubscriptionPeriod?
    /// Auto-renewable subscriptions: the group (one active subscription per group and account); the product id when none is given.
    public var subscriptionGroup: String
    /// Auto-renewable subscriptions: the level in the group, 1 the highest tier.
    public var groupLevel: UInt32
    /// Auto-renewable subscriptions: how long a failed renewal keeps the entitlement; nil: no grace period.
    public var gracePeriod: SubscriptionPeriod?
    /// Auto-renewable subscriptions: how long the store retries a failed renewal before the subscription expires.
    public var billingRetryPeriod: SubscriptionPeriod

    /// Auto-renewable subscriptions: the introductory offer (once per group and account), if any.
    public var introductoryOffer: OfferTerms?
    /// Auto-renewable subscriptions: the offers the app's server may sign for a buyer.
    public var promotionalOffers: [OfferTerms] = []
    /// The ids of the entitlements this product grants (the catalog's ``Catalog/entitlements`` name it); never any
    /// for a consumable.
    public var entitlements: [String] = []
    /// Its price in other storefronts, by ISO 3166-1 alpha-3 code ("FRA"); a storefront not listed pays ``price`` in
    /// ``currency``, as the catalog's default storefront does.
    public var storefrontPrices: [String: StorefrontPrice] = [:]

    /// The product as a buyer in `storefront` sees it: its price, currency and offer prices there.
    public func priced(in storefront: String) -> CatalogProduct {
        guard let local = storefrontPrices[storefront] else { return self }
        var copy = self
        copy.price = local.price
        copy.currency = local.currency
        func localized(_ offer: OfferTerms) -> OfferTerms {
            var offer = offer
            // A free offer is free everywhere; a paid one has its price per storefront (the parser requires it).
            offer.price = local.offerPrices[offer.id] ?? (Money.isZero(offer.price) ? "0" : offer.price)
            return offer
        }
        copy.introductoryOffer = introductoryOffer.map(localized)
        copy.promotionalOffers = promotionalOffers.map(localized)
        return copy
    }

    /// The offer with `id` (`introductory` or a promotional offer's).
    public func offer(_ id: String) -> OfferTerms? {
        id == OfferTerms.introductoryID ? introductoryOffer : promotionalOffers.first { $0.id == id }
    }

    /// The default billing retry period, as the App Store's: 60 days.
    public static let defaultBillingRetryPeriod = SubscriptionPeriod(iso8601: "P60D")!

    /// Creates a product.
    public init(
        id: String, type: ProductKind, title: String, description: String = "", price: String, currency: String,
        credits: UInt64 = 0, maxQuantity: UInt32 = 1, hostedContent: Bool = false,
        subscriptionPeriod: SubscriptionPeriod? = nil,
        subscriptionGroup: String? = nil, groupLevel: UInt32 = 1, gracePeriod: SubscriptionPeriod? = nil,
        billingRetryPeriod: SubscriptionPeriod = CatalogProduct.defaultBillingRetryPeriod
    ) {
        self.id = id
        self.type = type
        self.title = title
        self.description = description
        self.price = price
        self.currency = currency
        self.credits = credits
        self.maxQuantity = maxQuantity
        self.hostedContent = hostedContent
        self.subscriptionPeriod = subscriptionPeriod
        self.subscriptionGroup = type == .autoRenewableSubscription ? (subscriptionGroup ?? id) : ""
        self.groupLevel = type == .autoRenewableSubscription ? groupLevel : 0
        self.gracePeriod = gracePeriod
        self.billingRetryPeriod = billingRetryPeriod
    }

    /// True for products bought once and owned: non-consumables and subscriptions.
    public var isRestorable: Bool { type != .consumable }
}

/// A product's price in one storefront: the amount, its currency, and the prices of its paid offers there.
public struct StorefrontPrice: Hashable, Sendable {
    /// The price, a decimal string in ``currency``'s decimals.
    public var price: String
    /// The ISO 4217 currency code.
    public var currency: String
    /// The paid offers' prices there, by offer id (free offers are free in every storefront).
    public var offerPrices: [String: String]

    public init(price: String, currency: String, offerPrices: [String: String] = [:]) {
        self.price = price
        self.currency = currency
        self.offerPrices = offerPrices
    }
}

/// Storefronts, as the App Store's: an ISO 3166-1 alpha-3 country code ("USA", "FRA", "JPN"), as StoreKit's
/// `Storefront.countryCode`. An account buys in one; the catalog prices products per storefront.
public enum Storefront {
    /// The storefront of a catalog that names none.
    public static let defaultCode = "USA"

    /// True for three ASCII capital letters.
    public static func isCode(_ text: String) -> Bool {
        text.utf8.count == 3 && text.utf8.allSatisfy { (0x41...0x5A).contains($0) }
    }
}

/// A subscription offer's terms: `price` for `periods` periods of `period` each, then the product's price.
public struct OfferTerms: Hashable, Sendable {
    /// The id of the introductory offer.
    public static let introductoryID = "introductory"
    /// `introductory`, or the promotional offer's id.
    public var id: String
    /// The price of one offer period, a decimal string ("0" is a free trial).
    public var price: String
    /// How long one offer period lasts.
    public var period: SubscriptionPeriod
    /// How many periods the offer price applies to (the first purchase counts as one).
    public var periods: Int

    public init(id: String, price: String, period: SubscriptionPeriod, periods: Int) {
        self.id = id
        self.price = price
        self.period = period
        self.periods = periods
    }
}

/// A capability of the app ("pro") that any of several products grants: a subscription, a lifetime purchase, later
/// a redeemed code or an operator's grant. Apps ask for the entitlement, not the product.
public struct CatalogEntitlement: Hashable, Sendable {
    /// The id apps look up, e.g. `pro`.
    public var id: String
    /// The display title.
    public var title: String
    /// The products that grant it, in catalog order: non-consumables and subscriptions.
    public var productIDs: [String]

    public init(id: String, title: String, productIDs: [String]) {
        self.id = id
        self.title = title
        self.productIDs = productIDs
    }
}

/// Why a catalog was refused: names the file, the product and the field.
public struct CatalogError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The catalog file.
    public var file: String
    /// The product id (or its position, when it has no id); nil for file-level problems.
    public var product: String?
    /// The field; nil when the problem is not one field's.
    public var field: String?
    /// What is wrong.
    public var problem: String

    public var description: String {
        var place = file
        if let product { place += ": product \(product)" }
        if let field { place += ", field \"\(field)\"" }
        return "\(place): \(problem)"
    }
}

/// The store's catalog, loaded from a JSON file.
///
/// ```json
/// {
///   "bundle_id": "com.example.monkeys",
///   "products": [
///     { "id": "credits.5", "type": "consumable", "title": "5 Credits", "description": "A handful",
///       "price": "0.99", "currency": "USD", "credits": 5, "max_quantity": 10 },
///     { "id": "filter.sepia", "type": "non-consumable", "title": "Sepia", "description": "A filter",
///       "price": "2.99", "currency": "USD" },
///     { "id": "pro.monthly", "type": "auto-renewable-subscription", "title": "Pro", "description": "Monthly",
///       "price": "4.99", "currency": "USD", "subscription_period": "P1M",
///       "group": "pro", "level": 1, "grace_period": "P6D", "billing_retry_period": "P60D" }
///   ],
///   "entitlements": [
///     { "id": "pro", "title": "Pro", "products": ["pro.monthly"] }
///   ]
/// }
/// ```
public struct Catalog: Sendable {
    /// The app's bundle id, written into every receipt.
    public var bundleID: String
    /// The products, in file order.
    public var products: [CatalogProduct]
    /// The public halves (raw 32-byte Ed25519) of the keys the app's server signs promotional offers with, by key id.
    public var offerKeys: [String: [UInt8]]
    /// The entitlements, in file order; each product's ``CatalogProduct/entitlements`` lists the ones it grants.
    public private(set) var entitlements: [CatalogEntitlement]
    /// The storefront whose prices are the products' own ``CatalogProduct/price`` and ``CatalogProduct/currency``:
    /// accounts created without one buy there.
    public var defaultStorefront: String = Storefront.defaultCode
    private var byID: [String: CatalogProduct]

    /// Creates a catalog from products; ids must be unique. Each product's ``CatalogProduct/entitlements`` are set from
    /// `entitlements` (ids they name that are not products are ignored: ``parse(_:file:)`` refuses them).
    public init(
        bundleID: String, products: [CatalogProduct], offerKeys: [String: [UInt8]] = [:],
        entitlements: [CatalogEntitlement] = []
    ) {
        self.bundleID = bundleID
        // The entitlements given decide what each product grants (a product taken from another catalog keeps none of
        // that catalog's).
        var products = products
        for index in products.indices {
            products[index].entitlements = entitlements.filter { $0.productIDs.contains(products[index].id) }.map(\.id)
        }
        self.products = products
        self.offerKeys = offerKeys
        self.entitlements = entitlements
        self.byID = Dictionary(products.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// The entitlement with `id`, if the catalog declares it.
    public func entitlement(_ id: String) -> CatalogEntitlement? { entitlements.first { $0.id == id } }

    /// The products that grant at least one entitlement.
    public var grantingProductIDs: [String] { products.filter { !$0.entitlements.isEmpty }.map(\.id) }

    /// The product with `id`, if the catalog has it, at its default storefront's prices.
    public func product(_ id: String) -> CatalogProduct? { byID[id] }

    /// The product with `id` as a buyer in `storefront` sees it (empty: the default storefront).
    public func product(_ id: String, storefront: String) -> CatalogProduct? {
        byID[id]?.priced(in: storefront.isEmpty ? defaultStorefront : storefront)
    }

    /// The storefront an account's stored one stands for: the default when empty (an account from before storefronts).
    public func storefront(_ stored: String) -> String { stored.isEmpty ? defaultStorefront : stored }

    /// The storefronts the catalog prices in: the default, then every one a product lists, sorted.
    public var storefronts: [String] {
        [defaultStorefront]
            + Set(products.flatMap(\.storefrontPrices.keys)).subtracting([defaultStorefront]).sorted()
    }

    /// The auto-renewable subscriptions of `group`, highest level (1) first.
    public func products(inGroup group: String) -> [CatalogProduct] {
        products.filter { $0.type == .autoRenewableSubscription && $0.subscriptionGroup == group }.sorted {
            $0.groupLevel < $1.groupLevel
        }
    }

    /// Loads and validates a catalog file.
    /// - Throws: ``CatalogError`` naming the file, product and field at fault.
    public static func load(path: String) throws(CatalogError) -> Catalog {
        let file = (path as NSString).lastPathComponent
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CatalogError(file: path, problem: "cannot read the file")
        }
        return try parse(data, file: file)
    }

    static let productTypes: [String: ProductKind] = [
        "consumable": .consumable,
        "non-consumable": .nonConsumable,
        "non-renewing-subscription": .nonRenewingSubscription,
        "auto-renewable-subscription": .autoRenewableSubscription,
    ]
    static let productFields: Set<String> = [
        "id", "type", "title", "description", "price", "currency", "credits", "max_quantity", "hosted_content",
        "subscription_period", "group", "level", "grace_period", "billing_retry_period", "introductory_offer",
        "promotional_offers", "prices",
    ]

    /// Parses and validates catalog JSON.
    public static func parse(_ data: Data, file: String) throws(CatalogError) -> Catalog {
        func fail(_ product: String?, _ field: String?, _ problem: String) -> CatalogError {
            CatalogError(file: file, product: product, field: field, problem: problem)
        }
        guard case .object(let root)? = JSONValue.parse(data) else {
            throw fail(nil, nil, "is not a JSON object")
        }
        for key in root.keys where !["bundle_id", "storefront", "products", "offer_keys", "entitlements"].contains(key)
        {
            throw fail(
                nil, key,
                "unknown field (expected \"bundle_id\", \"storefront\", \"products\", \"offer_keys\" and \"entitlements\")"
            )
        }
        var defaultStorefront = Storefront.defaultCode
        if let value = root["storefront"] {
            guard case .string(let text) = value, Storefront.isCode(text) else {
                throw fail(nil, "storefront", "must be an ISO 3166-1 alpha-3 country code such as \"USA\"")
            }
            defaultStorefront = text
        }
        var offerKeys: [String: [UInt8]] = [:]
        if let value = root["offer_keys"] {
            guard case .object(let keys) = value else {
                throw fail(nil, "offer_keys", "must be an object: key id → hex Ed25519 public key")
            }
            for (keyID, hex) in keys {
                guard case .string(let text) = hex, let raw = hexBytes(text), raw.count == 32, !keyID.isEmpty,
                    !keyID.contains("\n")
                else {
                    throw fail(nil, "offer_keys", "key \"\(keyID)\" must be 64 hex digits (a raw Ed25519 public key)")
                }
                offerKeys[keyID] = raw
            }
        }
        var bundleID = "com.example.kiosk"
        if let value = root["bundle_id"] {
            guard case .string(let text) = value, !text.isEmpty else {
                throw fail(nil, "bundle_id", "must be a non-empty string")
            }
            bundleID = text
        }
        guard case .array(let entries)? = root["products"] else {
            throw fail(nil, "products", "must be an array of products")
        }
        var products: [CatalogProduct] = []
        var seen: Set<String> = []
        for (index, entry) in entries.enumerated() {
            guard case .object(let object) = entry else { throw fail("#\(index + 1)", nil, "must be a JSON object") }
            guard case .string(let id)? = object["id"], !id.isEmpty else {
                throw fail("#\(index + 1)", "id", "is required (a non-empty string)")
            }
            let name = "\"\(id)\""
            guard id.count <= 128, id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })
            else {
                throw fail(name, "id", "may hold only ASCII letters, digits, '.', '_' and '-' (at most 128)")
            }
            guard seen.insert(id).inserted else { throw fail(name, "id", "appears twice") }
            for key in object.keys where !productFields.contains(key) {
                throw fail(name, key, "unknown field")
            }
            func string(_ field: String, required: Bool = true) throws(CatalogError) -> String? {
                guard let value = object[field] else {
                    if required { throw fail(name, field, "is required") }
                    return nil
                }
                guard case .string(let text) = value else { throw fail(name, field, "must be a string") }
                return text
            }
            func integer(_ field: String) throws(CatalogError) -> Int? {
                guard let value = object[field] else { return nil }
                guard case .number(let number) = value, let int = Int(exactly: number) else {
                    throw fail(name, field, "must be a whole number")
                }
                return int
            }
            guard let typeName = try string("type"), let type = productTypes[typeName] else {
                throw fail(name, "type", "must be one of \(productTypes.keys.sorted().joined(separator: ", "))")
            }
            guard let title = try string("title"), !title.isEmpty else {
                throw fail(name, "title", "must not be empty")
            }
            let description = try string("description", required: false) ?? ""
            guard let currency = try string("currency"), currency.count == 3,
                currency.allSatisfy({ $0.isASCII && $0.isUppercase })
            else {
                throw fail(name, "currency", "must be an ISO 4217 code such as \"USD\"")
            }
            guard let price = try string("price"), isPrice(price, currency) else {
                throw fail(
                    name, "price",
                    "must be a decimal string with at most \(Currency.exponent(of: currency)) decimals for \(currency), such as \"0.99\""
                )
            }
            let credits = try integer("credits")
            if type == .consumable {
                guard let credits, credits > 0, credits <= 1_000_000_000 else {
                    throw fail(name, "credits", "is required for a consumable: the credits one unit grants (1 or more)")
                }
            } else if credits != nil {
                throw fail(name, "credits", "applies to consumables only")
            }
            let maxQuantity = try integer("max_quantity") ?? (type == .consumable ? 10 : 1)
            guard maxQuantity >= 1, maxQuantity <= 10_000 else {
                throw fail(name, "max_quantity", "must be between 1 and 10000")
            }
            if type != .consumable, maxQuantity != 1 {
                throw fail(name, "max_quantity", "must be 1 for a product bought once")
            }
            var hosted = false
            if let value = object["hosted_content"] {
                guard case .bool(let flag) = value else { throw fail(name, "hosted_content", "must be true or false") }
                hosted = flag
            }
            let periodText = try string("subscription_period", required: false)
            var period: SubscriptionPeriod?
            if type == .autoRenewableSubscription || type == .nonRenewingSubscription {
                guard let periodText, let parsed = SubscriptionPeriod(iso8601: periodText) else {
                    throw fail(
                        name, "subscription_period",
                        "is required for a subscription: an ISO 8601 period such as \"P1M\"")
                }
                period = parsed
            } else if periodText != nil {
                throw fail(name, "subscription_period", "applies to subscriptions only")
            }
            let renewing = type == .autoRenewableSubscription
            func renewingOnly(_ field: String) throws(CatalogError) {
                if !renewing, object[field] != nil {
                    throw fail(name, field, "applies to auto-renewable subscriptions only")
                }
            }
            for field in [
                "group", "level", "grace_period", "billing_retry_period", "introductory_offer", "promotional_offers",
            ] {
                try renewingOnly(field)
            }
            func terms(_ value: JSONValue, field: String, id fixedID: String?) throws(CatalogError) -> OfferTerms {
                guard case .object(let offer) = value else {
                    throw fail(name, field, "must be an object with price, period and periods")
                }
                for key in offer.keys where !["id", "price", "period", "periods"].contains(key) {
                    throw fail(name, field, "unknown offer field \"\(key)\"")
                }
                var offerID = fixedID ?? ""
                if fixedID == nil {
                    guard case .string(let text)? = offer["id"], !text.isEmpty, text != OfferTerms.introductoryID,
                        text.count <= 64,
                        text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })
                    else {
                        throw fail(
                            name, field,
                            "each offer needs an \"id\" of ASCII letters, digits, '.', '_' and '-' (not \"introductory\")"
                        )
                    }
                    offerID = text
                }
                guard case .string(let price)? = offer["price"], isPrice(price, currency) else {
                    throw fail(
                        name, field,
                        "offer \(offerID): \"price\" must be a decimal string such as \"0.99\" (\"0\" for a free trial)"
                    )
                }
                var offerPeriod = period
                if let value = offer["period"] {
                    guard case .string(let text) = value, let parsed = SubscriptionPeriod(iso8601: text) else {
                        throw fail(
                            name, field, "offer \(offerID): \"period\" must be an ISO 8601 period such as \"P1W\"")
                    }
                    offerPeriod = parsed
                }
                var count = 1
                if let value = offer["periods"] {
                    guard case .number(let number) = value, let whole = Int(exactly: number), (1...120).contains(whole)
                    else {
                        throw fail(name, field, "offer \(offerID): \"periods\" must be a whole number from 1 to 120")
                    }
                    count = whole
                }
                guard let offerPeriod else { throw fail(name, field, "offer \(offerID): needs a period") }
                return OfferTerms(id: offerID, price: price, period: offerPeriod, periods: count)
            }
            let introductory = try object["introductory_offer"].map { value throws(CatalogError) in
                try terms(value, field: "introductory_offer", id: OfferTerms.introductoryID)
            }
            var promotional: [OfferTerms] = []
            if let value = object["promotional_offers"] {
                guard case .array(let offers) = value else {
                    throw fail(name, "promotional_offers", "must be an array of offers")
                }
                for offer in offers {
                    let parsed = try terms(offer, field: "promotional_offers", id: nil)
                    guard !promotional.contains(where: { $0.id == parsed.id }) else {
                        throw fail(name, "promotional_offers", "offer id \"\(parsed.id)\" appears twice")
                    }
                    promotional.append(parsed)
                }
            }
            let group = try string("group", required: false)
            if let group {
                guard !group.isEmpty, group.count <= 128 else {
                    throw fail(name, "group", "must be a non-empty string (at most 128 characters)")
                }
            }
            let level = try integer("level") ?? 1
            guard (1...1000).contains(level) else {
                throw fail(name, "level", "must be between 1 (the highest tier) and 1000")
            }
            func duration(_ field: String) throws(CatalogError) -> SubscriptionPeriod? {
                guard let text = try string(field, required: false) else { return nil }
                guard let parsed = SubscriptionPeriod(iso8601: text) else {
                    throw fail(name, field, "must be an ISO 8601 period such as \"P6D\" or \"P1M\"")
                }
                return parsed
            }
            let grace = try duration("grace_period")
            let retry = try duration("billing_retry_period") ?? CatalogProduct.defaultBillingRetryPeriod
            var product = CatalogProduct(
                id: id, type: type, title: title, description: description, price: price, currency: currency,
                credits: UInt64(credits ?? 0), maxQuantity: UInt32(maxQuantity), hostedContent: hosted,
                subscriptionPeriod: period,
                subscriptionGroup: group, groupLevel: UInt32(level), gracePeriod: grace, billingRetryPeriod: retry)
            product.introductoryOffer = introductory
            product.promotionalOffers = promotional
            if let value = object["prices"] {
                product.storefrontPrices = try parsePrices(
                    value, product: product, defaultStorefront: defaultStorefront,
                    fail: { field, problem in fail(name, field, problem) })
            }
            products.append(product)
        }
        let entitlements = try parseEntitlements(root["entitlements"], products: products, fail: fail)
        var catalog = Catalog(bundleID: bundleID, products: products, offerKeys: offerKeys, entitlements: entitlements)
        catalog.defaultStorefront = defaultStorefront
        return catalog
    }

    /// A product's `prices`: `{"FRA": {"price": "5.49", "currency": "EUR", "offers": {"introductory": "0.99"}}}`. Each
    /// paid offer needs its price in every storefront listed; a free one is free everywhere.
    private static func parsePrices(
        _ value: JSONValue, product: CatalogProduct, defaultStorefront: String,
        fail: (String, String) -> CatalogError
    ) throws(CatalogError) -> [String: StorefrontPrice] {
        guard case .object(let entries) = value else {
            throw fail(
                "prices", "must be an object: storefront (ISO 3166-1 alpha-3) → {\"price\", \"currency\"}")
        }
        var out: [String: StorefrontPrice] = [:]
        for (storefront, entry) in entries {
            guard Storefront.isCode(storefront) else {
                throw fail("prices", "\"\(storefront)\" is not an ISO 3166-1 alpha-3 country code such as \"FRA\"")
            }
            guard storefront != defaultStorefront else {
                throw fail(
                    "prices",
                    "\(storefront) is the catalog's default storefront: its price is the product's \"price\" and \"currency\""
                )
            }
            guard case .object(let object) = entry else {
                throw fail("prices", "\(storefront): must be an object with \"price\" and \"currency\"")
            }
            for key in object.keys where !["price", "currency", "offers"].contains(key) {
                throw fail("prices", "\(storefront): unknown field \"\(key)\" (expected price, currency and offers)")
            }
            guard case .string(let currency)? = object["currency"], currency.count == 3,
                currency.allSatisfy({ $0.isASCII && $0.isUppercase })
            else {
                throw fail("prices", "\(storefront): \"currency\" must be an ISO 4217 code such as \"EUR\"")
            }
            guard case .string(let price)? = object["price"], isPrice(price, currency) else {
                throw fail(
                    "prices",
                    "\(storefront): \"price\" must be a decimal string with at most \(Currency.exponent(of: currency)) decimals for \(currency)"
                )
            }
            var offerPrices: [String: String] = [:]
            if let value = object["offers"] {
                guard case .object(let offers) = value else {
                    throw fail("prices", "\(storefront): \"offers\" must be an object: offer id → price")
                }
                for (offerID, offerValue) in offers {
                    guard product.offer(offerID) != nil else {
                        throw fail("prices", "\(storefront): the product has no offer \"\(offerID)\"")
                    }
                    guard case .string(let offerPrice) = offerValue, isPrice(offerPrice, currency) else {
                        throw fail(
                            "prices", "\(storefront): offer \(offerID)'s price must be a decimal string in \(currency)")
                    }
                    offerPrices[offerID] = offerPrice
                }
            }
            for offer in [product.introductoryOffer].compactMap({ $0 }) + product.promotionalOffers
            where !Money.isZero(offer.price) && offerPrices[offer.id] == nil {
                throw fail(
                    "prices",
                    "\(storefront): offer \(offer.id) is paid (\(offer.price) \(product.currency)); give its price in \(currency) under \"offers\""
                )
            }
            out[storefront] = StorefrontPrice(price: price, currency: currency, offerPrices: offerPrices)
        }
        return out
    }

    /// The catalog's `entitlements`: `[{"id", "title", "products": [ids]}]`, each product a non-consumable or a
    /// subscription of the catalog.
    private static func parseEntitlements(
        _ value: JSONValue?, products: [CatalogProduct],
        fail: (String?, String?, String) -> CatalogError
    ) throws(CatalogError) -> [CatalogEntitlement] {
        guard let value else { return [] }
        guard case .array(let entries) = value else {
            throw fail(nil, "entitlements", "must be an array of {\"id\", \"title\", \"products\"}")
        }
        var out: [CatalogEntitlement] = []
        for (index, entry) in entries.enumerated() {
            let place = "entitlements #\(index + 1)"
            guard case .object(let object) = entry else { throw fail(nil, place, "must be a JSON object") }
            for key in object.keys where !["id", "title", "products"].contains(key) {
                throw fail(nil, place, "unknown field \"\(key)\" (expected \"id\", \"title\" and \"products\")")
            }
            guard case .string(let id)? = object["id"], !id.isEmpty, id.count <= 64,
                id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })
            else {
                throw fail(nil, place, "\"id\" must be 1 to 64 ASCII letters, digits, '.', '_' and '-'")
            }
            guard !out.contains(where: { $0.id == id }) else {
                throw fail(nil, "entitlements", "entitlement \"\(id)\" appears twice")
            }
            var title = id
            if let value = object["title"] {
                guard case .string(let text) = value, !text.isEmpty else {
                    throw fail(nil, place, "entitlement \(id): \"title\" must be a non-empty string")
                }
                title = text
            }
            guard case .array(let listed)? = object["products"], !listed.isEmpty else {
                throw fail(nil, place, "entitlement \(id): \"products\" must list the product ids that grant it")
            }
            var productIDs: [String] = []
            for item in listed {
                guard case .string(let productID) = item else {
                    throw fail(nil, place, "entitlement \(id): \"products\" must hold product ids (strings)")
                }
                guard let product = products.first(where: { $0.id == productID }) else {
                    throw fail(nil, place, "entitlement \(id): \"\(productID)\" is not a product of the catalog")
                }
                guard product.type != .consumable else {
                    throw fail(
                        "\"\(productID)\"", "entitlements",
                        "a consumable grants no entitlement (entitlement \(id)); credits are its use")
                }
                guard !productIDs.contains(productID) else {
                    throw fail(nil, place, "entitlement \(id): \(productID) is listed twice")
                }
                productIDs.append(productID)
            }
            out.append(CatalogEntitlement(id: id, title: title, productIDs: productIDs))
        }
        return out
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                return nil
            }
            out.append(byte)
        }
        return out
    }

    /// A price the store can charge: a decimal of at most 12 whole digits and at most the currency's ISO 4217
    /// decimals (so every catalog price can be bought, and read one way, ``Money``).
    private static func isPrice(_ text: String, _ currency: String) -> Bool {
        guard let whole = text.split(separator: ".", omittingEmptySubsequences: false).first, whole.count <= 12 else {
            return false
        }
        return Money(decimal: text, currency: currency) != nil
    }
}
