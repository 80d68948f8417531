import Foundation

// Subscription groups and the prices a catalog puts on a subscription: what the next renewal charges, whether
// it needs the buyer's consent, what buying another product of the group means (an upgrade now, a downgrade or
// crossgrade at renewal) and what an upgrade costs. The rules read the catalog and the repositories only; the
// store calls them inside the write that records the purchase, so what they read is what the write commits on.

/// What buying a product means for the account's subscription in the product's group.
public enum GroupChange: Equatable, Sendable {
    /// No other live subscription in the group: an ordinary purchase.
    case none
    /// A lower or equal level: the subscription switches at its next renewal (the current transaction).
    case atRenewal(TransactionRecord)
    /// A higher level: at once, charged this (the new price less the unused part of the current period).
    case upgrade(price: String)
}

/// The catalog's rules for auto-renewable subscriptions and their groups.
public struct SubscriptionRules: Sendable {
    /// The catalog the rules read.
    public var catalog: Catalog

    public init(catalog: Catalog) {
        self.catalog = catalog
    }

    /// What the next renewal of `row` is: the product (a pending downgrade's, or the current one), and the price and
    /// period — an offer's while periods of it are left, else the product's — in the subscription's storefront (the
    /// account's now). Nil when the product left the catalog.
    public func renewalTerms(_ row: Subscription) -> RenewalTerms? {
        let switching = !row.pendingProductID.isEmpty
        guard
            let product = catalog.product(
                switching ? row.pendingProductID : row.productID, storefront: row.storefront),
            product.type == .autoRenewableSubscription,
            let period = product.subscriptionPeriod
        else { return nil }
        if !switching, !row.offerID.isEmpty, let offer = product.offer(row.offerID),
            row.offerPeriodsUsed < offer.periods
        {
            return RenewalTerms(
                productID: product.id, price: offer.price, currency: product.currency, period: offer.period,
                offerID: offer.id)
        }
        return RenewalTerms(
            productID: product.id, price: product.price, currency: product.currency, period: period, offerID: "")
    }

    /// True when the next renewal's regular price (the product's, or a pending downgrade's) is above the one the buyer
    /// agreed to (during an offer too).
    public func priceIncreasePending(_ row: Subscription) -> Bool {
        guard
            let product = catalog.product(
                row.pendingProductID.isEmpty ? row.productID : row.pendingProductID, storefront: row.storefront)
        else {
            return false
        }
        return row.priceIncreasePending(regularPrice: product.price, currency: product.currency)
    }

    /// The ids of the auto-renewable products in `productID`'s group; empty when it is not one.
    public func groupMembers(of productID: String) -> [String] {
        guard let product = catalog.product(productID), product.type == .autoRenewableSubscription else { return [] }
        return catalog.products(inGroup: product.subscriptionGroup).map(\.id)
    }

    /// The account's subscription in `productID`'s group (any state, the latest ending first), if any.
    public func groupSubscription(
        _ db: any StoreRepositories, accountID: String, productID: String
    ) throws -> Subscription? {
        let members = groupMembers(of: productID)
        guard !members.isEmpty else { return nil }
        return try db.subscriptions(accountID: accountID, productIDs: members).first
    }

    /// Inside a write: true when another payment for a product of `productID`'s subscription group is in flight for the
    /// account (a renewal being charged while the buyer upgrades, or the reverse): one payment per group at a time.
    public func groupPaymentInFlight(
        _ db: any StoreRepositories, accountID: String, productID: String, except intentID: String? = nil
    ) throws -> Bool {
        let members = groupMembers(of: productID)
        guard !members.isEmpty else { return false }
        // Ordered after any other write about the account first (PostgreSQL), so the check sees the other's intent.
        try db.serializeOnAccount(accountID)
        return try db.pendingIntentIDs(accountID: accountID, productIDs: members).contains { $0 != intentID }
    }

    /// Inside the purchase's write: what buying `product` (priced in `storefront`, the account's) means for the
    /// account's subscription in its group. A downgrade or crossgrade is recorded on the subscription here (it switches
    /// at renewal, at the new product's price).
    public func groupChange(
        _ db: any StoreRepositories, accountID: String, to product: CatalogProduct, storefront: String = "",
        nowMs: Int64
    ) throws -> GroupChange {
        guard product.type == .autoRenewableSubscription,
            var current = try groupSubscription(db, accountID: accountID, productID: product.id),
            current.productID != product.id, current.isEntitled(atMs: nowMs),
            let latest = try db.transaction(id: current.latestTransactionID)
        else { return .none }
        let currentLevel = catalog.product(current.productID)?.groupLevel ?? UInt32.max
        if product.groupLevel >= currentLevel {
            current.downgradeChosen(to: product.id, price: product.price, currency: product.currency)
            try db.saveSubscription(current, nowMs: nowMs)
            return .atRenewal(latest)
        }
        // The unused part is valued at what was paid. Paid in another currency (the buyer moved storefront since): what
        // was paid in the proportion of the old product's prices in the two storefronts (a free trial credits nothing).
        var oldPrice = latest.price
        if !latest.currency.isEmpty, latest.currency != product.currency {
            oldPrice = Self.converted(
                latest.price, from: catalog.product(latest.productID, storefront: latest.storefront),
                to: catalog.product(latest.productID, storefront: storefront), paidCurrency: latest.currency,
                currency: product.currency)
        }
        return .upgrade(
            price: Self.upgradePrice(
                newPrice: product.price, oldPrice: oldPrice, currency: product.currency,
                periodStartMs: latest.periodStartMs, periodEndMs: latest.expiresMs, nowMs: nowMs))
    }

    /// `paid` (in `paidCurrency`) in `currency`, in the proportion of a product's regular prices `from` the storefront it
    /// was paid in `to` another: "0" when either price is missing, zero, or not in those currencies.
    static func converted(
        _ paid: String, from: CatalogProduct?, to: CatalogProduct?, paidCurrency: String, currency: String
    ) -> String {
        guard let amount = Money(decimal: paid, currency: paidCurrency), let from, let to,
            from.currency == paidCurrency, to.currency == currency,
            let there = Money(decimal: from.price, currency: paidCurrency), there.minorUnits > 0,
            let here = Money(decimal: to.price, currency: currency)
        else { return Money.zero(currency).decimalString }
        // amount × here / there, rounded down (the buyer is credited no more than they paid), 128-bit.
        let (quotient, _) = there.minorUnits.dividingFullWidth(
            amount.minorUnits.multipliedFullWidth(by: here.minorUnits))
        return Money(minorUnits: quotient, currency: currency).decimalString
    }

    /// The new price less the unused part of the current period (prorated by time, rounded half up to the currency's
    /// minor unit), never below 0, as a decimal string in the currency's decimals.
    public static func upgradePrice(
        newPrice: String, oldPrice: String, currency: String, periodStartMs: Int64, periodEndMs: Int64,
        nowMs: Int64
    ) -> String {
        guard let new = Money(decimal: newPrice, currency: currency),
            let old = Money(decimal: oldPrice, currency: currency),
            periodEndMs > periodStartMs
        else { return newPrice }
        let period = periodEndMs - periodStartMs
        let unused = min(max(periodEndMs - nowMs, 0), period)
        // old × unused / period, rounded half up, in minor units (a 128-bit product: no overflow).
        let product = old.minorUnits.multipliedFullWidth(by: unused)
        let (quotient, remainder) = period.dividingFullWidth(product)
        let credit = quotient + (remainder * 2 >= period ? 1 : 0)
        return Money(minorUnits: max(new.minorUnits - credit, 0), currency: currency).decimalString
    }

    /// Inside the write that records a PURCHASED auto-renewable transaction bought by the buyer: an upgrade ends the
    /// old product's transaction (revoked, reason "upgraded", so content services stop honouring it), then the
    /// subscription is ACTIVE on the new product, at the regular price the buyer had in front of them.
    /// - Parameter regularPrice: that price: the catalog's now for a purchase, the price asked for in an approved
    ///   ask-to-buy (nil: the catalog's now).
    public func bought(
        _ record: TransactionRecord, regularPrice: String? = nil, nowMs: Int64, _ db: any StoreRepositories
    ) throws {
        guard record.productType == .autoRenewableSubscription, record.state == .purchased else { return }
        if let row = try db.subscription(originalID: record.originalID), row.productID != record.productID,
            row.isEntitled(atMs: nowMs), let old = try db.transaction(id: row.latestTransactionID),
            old.state == .purchased, old.revokedMs == 0
        {
            _ = try db.revoke(transactionID: old.id, reason: "upgraded to \(record.productID)", nowMs: nowMs)
        }
        try Self.paid(
            record,
            regularPrice: regularPrice ?? catalog.product(record.productID, storefront: record.storefront)?.price,
            nowMs: nowMs, db)
    }

    /// Inside the write that records a PURCHASED auto-renewable transaction: the subscription's lifecycle
    /// takes it as a buyer's purchase (`renewal` false: a purchase, an approval, an upgrade) or as the store's
    /// renewal (``Subscription/renewed(_:)``: auto-renew and the agreed price left as they are).
    /// - Parameter regularPrice: the regular price the buyer had in front of them (purchases only).
    public static func paid(
        _ record: TransactionRecord, regularPrice: String?, renewal: Bool = false, nowMs: Int64,
        _ db: any StoreRepositories
    ) throws {
        guard record.productType == .autoRenewableSubscription, record.state == .purchased else { return }
        var row =
            try db.subscription(originalID: record.originalID)
            ?? Subscription(
                originalID: record.originalID, accountID: record.accountID, productID: record.productID,
                paymentMethod: record.paymentMethod, expiresMs: record.expiresMs, latestTransactionID: record.id)
        let paid = PaidPeriod(
            transactionID: record.id, productID: record.productID, expiresMs: record.expiresMs,
            paymentMethod: record.paymentMethod, offerID: record.offerID, regularPrice: regularPrice ?? "",
            currency: record.currency, storefront: record.storefront)
        if renewal { row.renewed(paid) } else { row.purchased(paid) }
        // Renewals are in the account's storefront now (an approved ask-to-buy was priced where it was asked).
        if let account = try db.account(id: record.accountID), !account.storefront.isEmpty {
            row.storefront = account.storefront
        }
        try db.saveSubscription(row, nowMs: nowMs)
    }
}
