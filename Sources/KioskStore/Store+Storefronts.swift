import KioskAPI
import KioskStoreCore
import KioskStoreLedger

// Storefronts: the country an account buys in (ISO 3166-1 alpha-3, as StoreKit's `Storefront.countryCode`). The
// catalog prices each product per storefront (``CatalogProduct/priced(in:)``); a purchase is priced in the account's
// storefront inside its write, a renewal in its subscription's (kept in step with the account's by
// `setStorefront`), and the transaction, its receipt and its events say which storefront and currency.

extension Store {
    /// The catalog's default storefront: accounts created without one buy there.
    public var defaultStorefront: String { catalog.defaultStorefront }

    /// The storefront `account` buys in (the catalog's default for an account from before storefronts).
    public func storefront(of account: AccountRecord) -> String { catalog.storefront(account.storefront) }

    /// `text` as a storefront code.
    /// - Throws: ``StoreError`` 3 unless it is three capital letters.
    static func checkStorefront(_ text: String) throws {
        guard Storefront.isCode(text) else {
            throw StoreError.invalid(
                "storefront must be an ISO 3166-1 alpha-3 country code such as \"FRA\", got \"\(text.prefix(16))\"")
        }
    }

    /// The catalog products with `ids` (all when empty) as a buyer in `storefront` sees them, and the ids the catalog
    /// does not have.
    public func products(ids: [String], storefront: String) -> (found: [CatalogProduct], invalid: [String]) {
        let (found, invalid) = products(ids: ids)
        let storefront = catalog.storefront(storefront)
        return (found.map { $0.priced(in: storefront) }, invalid)
    }

    /// The storefront ListProducts shows: the one asked for; else the caller's account's, when the call carries an
    /// account's token; else the catalog's default.
    /// - Throws: ``StoreError`` 3 for a malformed storefront, 16 for a token that is not valid.
    public func listingStorefront(requested: String, token: String?) async throws -> String {
        if !requested.isEmpty {
            try Self.checkStorefront(requested)
            return requested
        }
        guard let token, !token.isEmpty else { return catalog.defaultStorefront }
        if case .account(let account) = try await caller(token: token) { return storefront(of: account) }
        return catalog.defaultStorefront
    }

    /// Moves the buyer's account to `storefront`, as changing their App Store country: purchases are priced there at
    /// once; a subscription keeps its price to the end of the period paid and renews in the new storefront's price,
    /// with the buyer's consent when that is higher or in another currency
    /// (``SubscriptionRules/priceIncreasePending(_:)``). Records STOREFRONT_CHANGED; nothing when it is the same.
    /// - Returns: the account as it is now.
    public func setStorefront(account: AccountRecord, to storefront: String) async throws -> AccountRecord {
        try Self.checkStorefront(storefront)
        let nowMs = now
        let catalog = self.catalog
        return try await ledger.write(account: account.id) { db in
            guard var current = try db.account(id: account.id) else {
                throw StoreError.unauthenticated("account \(account.id) no longer exists")
            }
            let previous = catalog.storefront(current.storefront)
            guard previous != storefront else { return current }
            try db.setStorefront(accountID: current.id, storefront, previous: previous, nowMs: nowMs)
            current.storefront = storefront
            return current
        }
    }
}
