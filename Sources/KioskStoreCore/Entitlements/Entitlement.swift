/// What gives an account an entitlement.
public struct EntitlementSource: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// A non-consumable or a non-renewing subscription bought.
    public static let purchase = EntitlementSource(rawValue: "purchase")
    /// An auto-renewable subscription, entitled now (paid up or in its grace period).
    public static let subscription = EntitlementSource(rawValue: "subscription")
    /// A redeemed offer code.
    public static let offerCode = EntitlementSource(rawValue: "offer_code")
    /// An operator's grant.
    public static let grant = EntitlementSource(rawValue: "grant")

    public var description: String { rawValue }

    /// What a transaction's `offerID` starts with when an offer code paid for it.
    public static let offerCodePrefix = "code:"
}

/// An entitlement an account has now, and what gives it.
public struct ActiveEntitlement: Hashable, Sendable {
    /// The catalog's entitlement id, e.g. `pro`.
    public var id: String
    /// The product of the granting transaction.
    public var productID: String
    /// The granting transaction: a subscription's latest.
    public var transactionID: String
    public var originalTransactionID: String
    public var source: EntitlementSource
    /// When it ends unless renewed, ms since 1970; 0: never (a lifetime purchase).
    public var expiresMs: Int64
    /// When the granting transaction was bought.
    public var purchaseMs: Int64
    /// True when an auto-renewable subscription grants it and will renew.
    public var willRenew: Bool

    public init(
        id: String, productID: String, transactionID: String, originalTransactionID: String,
        source: EntitlementSource, expiresMs: Int64, purchaseMs: Int64, willRenew: Bool
    ) {
        self.id = id
        self.productID = productID
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.source = source
        self.expiresMs = expiresMs
        self.purchaseMs = purchaseMs
        self.willRenew = willRenew
    }

    /// What decides which of several grants of one entitlement is reported: never ending beats ending, a later end
    /// beats an earlier one, then the earlier purchase, then the transaction id (so every replica picks the same).
    func outranks(_ other: ActiveEntitlement) -> Bool {
        if (expiresMs == 0) != (other.expiresMs == 0) { return expiresMs == 0 }
        if expiresMs != other.expiresMs { return expiresMs > other.expiresMs }
        if purchaseMs != other.purchaseMs { return purchaseMs < other.purchaseMs }
        return transactionID < other.transactionID
    }
}

/// Which products grant which entitlements: what the store keeps of its catalog to decide entitlements (a store opened
/// by a command without the catalog reads the serving store's copy from the ledger).
public struct EntitlementMap: Hashable, Sendable, Codable {
    /// The entitlement ids, in catalog order.
    public var ids: [String]
    /// Product id → the entitlements it grants.
    public var byProduct: [String: [String]]

    public init(ids: [String], byProduct: [String: [String]]) {
        self.ids = ids
        self.byProduct = byProduct
    }

    /// The catalog's.
    public init(catalog: Catalog) {
        ids = catalog.entitlements.map(\.id)
        byProduct = Dictionary(
            catalog.products.filter { !$0.entitlements.isEmpty }.map { ($0.id, $0.entitlements) },
            uniquingKeysWith: { first, _ in first })
    }

    /// True when there are no entitlements.
    public var isEmpty: Bool { ids.isEmpty }

    /// The entitlements `productID` grants.
    public func entitlements(of productID: String) -> [String] { byProduct[productID] ?? [] }

    /// The products that grant at least one entitlement, sorted.
    public var grantingProductIDs: [String] { byProduct.keys.sorted() }

    /// The product id of a grant of `entitlement` (``ProductKind/grant``): not a catalog product (catalog ids have no
    /// `:`).
    public static func grantProductID(_ entitlement: String) -> String { "grant:" + entitlement }

    /// The entitlement a grant's product id names, if it is one.
    public static func grantedEntitlement(productID: String) -> String? {
        productID.hasPrefix("grant:") ? String(productID.dropFirst(6)) : nil
    }
}

/// How an account's transactions and subscriptions become its entitlements.
public enum EntitlementRules {
    /// The entitlements the account holds at `nowMs`, by id, given its transactions of granting products and its
    /// subscriptions of granting products (others are ignored).
    ///
    /// - A non-consumable: purchased and not revoked, no end.
    /// - A grant (``ProductKind/grant``): not revoked, until its `expiresMs`; source ``EntitlementSource/grant``.
    /// - A non-renewing subscription: purchased, not revoked, until its `expiresMs`.
    /// - An auto-renewable subscription: its subscription record decides (``Subscription/isEntitled(atMs:)``:
    ///   paid up, or in its grace period), until its period's end or its grace period's, through its latest
    ///   transaction, which must not be revoked. One that will renew is still held for `renewalPendingMs` after its
    ///   period ends, while the renewal is due and not yet tried (the store renews at the period's end, so a renewal
    ///   on time never ends and restarts the entitlement); a declined renewal then decides (grace or not).
    /// - Several grants of one entitlement: the one that lasts longest (``ActiveEntitlement`` ranks them).
    public static func active(
        map: EntitlementMap, transactions: [TransactionRecord], subscriptions: [Subscription], nowMs: Int64,
        renewalPendingMs: Int64 = 0
    ) -> [String: ActiveEntitlement] {
        var best: [String: ActiveEntitlement] = [:]
        func offer(_ candidate: ActiveEntitlement) {
            if let held = best[candidate.id], !candidate.outranks(held) { return }
            best[candidate.id] = candidate
        }
        let byID = Dictionary(transactions.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        for record in transactions where record.state == .purchased && record.revokedMs == 0 {
            let source: EntitlementSource
            var granted = map.entitlements(of: record.productID)
            switch record.productType {
            case .nonConsumable: source = .purchase
            case .nonRenewingSubscription:
                guard record.expiresMs > nowMs else { continue }
                source = .purchase
            case .grant:
                guard record.expiresMs > nowMs,
                    let entitlement = EntitlementMap.grantedEntitlement(productID: record.productID),
                    map.ids.contains(entitlement)
                else { continue }
                source = .grant
                granted = [entitlement]
            default: continue  // auto-renewable: the subscription record decides, below; consumables grant none
            }
            for id in granted {
                offer(
                    ActiveEntitlement(
                        id: id, productID: record.productID, transactionID: record.id,
                        originalTransactionID: record.originalID,
                        source: record.offerID.hasPrefix(EntitlementSource.offerCodePrefix) ? .offerCode : source,
                        expiresMs: record.productType == .nonConsumable ? 0 : record.expiresMs,
                        purchaseMs: record.purchaseMs, willRenew: false))
            }
        }
        for subscription in subscriptions
        where subscription.isEntitled(atMs: nowMs)
            || (subscription.state == .active && subscription.willAutoRenew
                && nowMs < subscription.expiresMs + renewalPendingMs)
        {
            let granted = map.entitlements(of: subscription.productID)
            guard !granted.isEmpty else { continue }
            let latest = byID[subscription.latestTransactionID]
            if let latest, latest.revokedMs != 0 { continue }
            let ends = subscription.state == .inGracePeriod ? subscription.graceEndMs : subscription.expiresMs
            for id in granted {
                offer(
                    ActiveEntitlement(
                        id: id, productID: subscription.productID, transactionID: subscription.latestTransactionID,
                        originalTransactionID: subscription.originalID,
                        source: latest?.offerID.hasPrefix(EntitlementSource.offerCodePrefix) == true
                            ? .offerCode : .subscription, expiresMs: ends,
                        purchaseMs: latest?.purchaseMs ?? 0, willRenew: subscription.willAutoRenew))
            }
        }
        return best
    }
}
