import Foundation
import KioskAPI
import NIOConcurrencyHelpers

// Offer codes, as App Store Connect's: batches of one-time codes and custom codes (a word, up to a limit of
// accounts), each buying a product at the batch's price ("0": free): a first subscription period, a non-consumable,
// or credits. A redemption is a purchase with the code in it: the same intent, charge (none for a free code) and
// transaction with its receipt and PURCHASED event; the code is taken in the purchase's first write and given back
// if its payment fails. Guesses are limited per account and per address.

extension Store {
    /// The most codes one batch may hold.
    public static let maximumCodesPerBatch = 100_000

    /// Makes a batch: `count` one-time codes, or the custom code `customCode` redeemable by `limit` accounts. It buys
    /// `productID` at `price` (default "0", free): for an auto-renewable subscription, a first period of `period`
    /// (default the product's) at that price, then the product's price; for a consumable, `quantity` units.
    /// Returns the batch and its codes.
    /// - Throws: ``StoreError`` INVALID for a product, price, period, quantity, count or word that does not fit;
    ///   CONFLICT for a batch id or custom word in use.
    public func createOfferCodes(
        batchID: String, productID: String, count: Int = 0, customCode: String? = nil, limit: Int = 0,
        price: String = "0", period: String? = nil, quantity: UInt32 = 1, expiresMs: Int64 = 0
    ) async throws -> (batch: OfferCodeBatch, codes: [String]) {
        guard !batchID.isEmpty, batchID.count <= 64,
            batchID.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) })
        else {
            throw StoreError.invalid("the batch id must be 1 to 64 ASCII letters, digits, '.', '_' and '-'")
        }
        guard let product = catalog.product(productID) else {
            throw StoreError.invalid("\(productID) is not a product of the catalog")
        }
        guard let offered = Money(decimal: price, currency: product.currency),
            let regular = Money(decimal: product.price, currency: product.currency), offered.minorUnits >= 0,
            offered.minorUnits <= regular.minorUnits
        else {
            throw StoreError.invalid(
                "the price must be a decimal in \(product.currency) from 0 to the product's \(product.price)")
        }
        guard expiresMs == 0 || expiresMs > now else {
            throw StoreError.invalid("the expiry must be in the future (or none)")
        }
        var periodText = ""
        if product.type == .autoRenewableSubscription {
            guard let parsed = SubscriptionPeriod(iso8601: period ?? product.subscriptionPeriod?.description ?? "")
            else {
                throw StoreError.invalid("the period must be an ISO 8601 period such as P1M")
            }
            periodText = parsed.description
        } else if period != nil {
            throw StoreError.invalid("a period applies to auto-renewable subscriptions only")
        }
        guard quantity >= 1, quantity <= (product.type == .consumable ? product.maxQuantity : 1) else {
            throw StoreError.invalid(
                "the quantity must be 1\(product.type == .consumable ? " to \(product.maxQuantity)" : "")")
        }
        let codes: [String]
        let kind: OfferCodeBatch.Kind
        let redemptionLimit: Int
        if let customCode {
            guard count <= 1, OfferCodes.isCustomWord(customCode), let word = OfferCodes.normalized(customCode) else {
                throw StoreError.invalid("a custom code is one word of 4 to 32 ASCII letters and digits (and no count)")
            }
            guard (1...1_000_000).contains(limit) else {
                throw StoreError.invalid("a custom code needs a redemption limit from 1 to 1000000")
            }
            codes = [word]
            kind = .custom
            redemptionLimit = limit
        } else {
            guard (1...Self.maximumCodesPerBatch).contains(count), limit == 0 else {
                throw StoreError.invalid(
                    "the count must be 1 to \(Self.maximumCodesPerBatch) (a limit is for a custom code)")
            }
            var made = Set<String>()
            while made.count < count { made.insert(OfferCodes.newCode()) }
            codes = made.sorted()
            kind = .oneTime
            redemptionLimit = count
        }
        let batch = OfferCodeBatch(
            id: batchID, kind: kind, productID: productID, price: offered.decimalString, period: periodText,
            quantity: quantity,
            redemptionLimit: redemptionLimit, expiresMs: expiresMs, createdMs: now)
        try await ledger.createOfferCodes(batch, codes: codes) { Self.offerCodeHash($0) }
        return (batch, codes.map { kind == .oneTime ? Self.displayed($0) : $0 })
    }

    /// What a code is kept and looked up by: the SHA-256 of its normalized form.
    static func offerCodeHash(_ normalized: String) -> [UInt8] {
        hash("kiosk-offer-code\u{0}" + (OfferCodes.normalized(normalized) ?? normalized))
    }

    /// A one-time code as shown and exported: four groups of four.
    static func displayed(_ code: String) -> String {
        let kept = OfferCodes.normalized(code) ?? code
        guard kept.count == 16 else { return kept }
        let symbols = Array(kept)
        return stride(from: 0, to: 16, by: 4).map { String(symbols[$0..<$0 + 4]) }.joined(separator: "-")
    }

    /// Redeems an offer code for the account: a purchase of the code's product at its price, answered as
    /// ``purchase(account:productID:quantity:paymentMethod:idempotencyKey:offer:)`` answers (a refusal of the code is
    /// a FAILED outcome with a named reason: `offer_code_unknown`, `offer_code_used`, `offer_code_revoked`,
    /// `offer_code_expired`, `offer_code_limit_reached`, `ineligible_for_offer`). A free code of a non-consumable or
    /// credits needs no payment method; a subscription's code does (renewals charge it), as a code that is not free. Guesses (unknown codes) are limited per account and per `source` address: past the limit the call is
    /// refused (``StoreError/Kind/rateLimited``) before any code is looked at.
    public func redeemOfferCode(
        account: AccountRecord, code typed: String, paymentMethod: String = "", idempotencyKey: String?,
        source: String? = nil
    ) async throws -> PurchaseOutcome {
        // Counted as a guess before anything is looked up (so calls sent at once cannot pass the limit together), and
        // forgiven when the code exists.
        let attempt = try codeGuesses.begin(account: account.id, source: source, nowMs: now)
        guard let code = OfferCodes.normalized(typed) else {
            return Self.codeRefusal(account: account.id, "offer_code_unknown", "that is not an offer code", nowMs: now)
        }
        let hash = Self.offerCodeHash(code)
        guard let batch = try await ledger.offerCodeBatch(codeHash: hash) else {
            return Self.codeRefusal(account: account.id, "offer_code_unknown", "no such offer code", nowMs: now)
        }
        codeGuesses.forgive(attempt)
        let product = catalog.product(batch.productID)
        let free = Money(decimal: batch.price, currency: product?.currency ?? "USD")?.minorUnits == 0
        let subscription = product?.type == .autoRenewableSubscription
        // A subscription renews with the buyer's method after the code's period: it needs one, free or not.
        if paymentMethod.isEmpty, !free || subscription {
            throw StoreError.invalid(
                subscription
                    ? "payment_method is required: the subscription renews with it after the code's period"
                    : "payment_method is required: this code is not free")
        }
        let method = paymentMethod.isEmpty ? Self.offerCodePaymentMethod : paymentMethod
        return try await purchase(
            account: account, productID: batch.productID, quantity: batch.quantity, paymentMethod: method,
            idempotencyKey: idempotencyKey, code: (code, hash))
    }

    /// The payment method a free code's redemption records (nothing is charged).
    public static let offerCodePaymentMethod = "offer-code"

    private static func codeRefusal(
        account: String, _ reason: String, _ message: String, nowMs: Int64
    )
        -> PurchaseOutcome
    {
        PurchaseOutcome(
            result: .failed(
                FailedPurchase(
                    code: .invalidOfferIdentifier, reason: reason, message: message, transactionID: "",
                    accountID: account, productID: "", productType: nil, quantity: 0, dateMs: nowMs, price: "",
                    currency: "", environment: .sandbox)))
    }

    enum CodeTake {
        case accepted(OfferCodeBatch)
        case refused(FailedPurchase.Code, String, String)
    }

    /// Checks the code in the purchase's first write and takes it for `transactionID`: one-time codes once, custom
    /// codes up to their limit and once per account; a subscription's code once per subscription group and account.
    func takeOfferCode(
        _ code: (text: String, hash: [UInt8]), product: CatalogProduct, order: Order, transactionID: String,
        nowMs: Int64, _ db: any LedgerDatabase
    ) throws -> CodeTake {
        guard let row = try db.offerCode(hash: code.hash), let batch = try db.offerCodeBatch(id: row.batchID) else {
            return .refused(.invalidOfferIdentifier, "offer_code_unknown", "no such offer code")
        }
        // Taken already by this very payment (a retry of one closed uncharged): it keeps it.
        if batch.kind == .oneTime, !row.transactionID.isEmpty, row.transactionID == transactionID {
            return .accepted(batch)
        }
        guard batch.productID == product.id, batch.quantity == order.quantity else {
            return .refused(.invalidOfferIdentifier, "offer_code_unknown", "the code is not for this purchase")
        }
        if batch.revokedMs > 0 {
            return .refused(.invalidOfferIdentifier, "offer_code_revoked", "this offer code was revoked")
        }
        if batch.expiresMs > 0, batch.expiresMs <= nowMs {
            return .refused(.invalidOfferIdentifier, "offer_code_expired", "this offer code has expired")
        }
        // A discounted code's price is in the product's currency in the catalog's default storefront: it is
        // redeemable where that currency is paid. A free code is free in every storefront.
        if !Money.isZero(batch.price), let base = catalog.product(product.id), base.currency != product.currency {
            return .refused(
                .invalidOfferIdentifier, "offer_code_storefront",
                "this code's price is in \(base.currency); the account's storefront pays in \(product.currency)")
        }
        // Once per account: a subscription's code per subscription group (as the App Store's offers), a custom code
        // per code; one-time codes of other products may be redeemed again with other codes.
        var scope: String?
        if product.type == .autoRenewableSubscription {
            scope = "group:" + product.subscriptionGroup
            // A lapsed subscriber may come back with a code; a live one (active, grace, billing retry) may not.
            if try rules.groupSubscription(db, accountID: order.account, productID: product.id)?.isLive == true {
                return .refused(
                    .ineligibleForOffer, "ineligible_for_offer",
                    "the account is subscribed in \(product.subscriptionGroup) already")
            }
        } else if batch.kind == .custom {
            scope = "code:" + batch.id
        }
        if let scope, let held = try db.offerCodeRedemption(scope: scope, accountID: order.account) {
            if held == transactionID, batch.kind == .custom { return .accepted(batch) }
            return .refused(
                .ineligibleForOffer, "ineligible_for_offer",
                product.type == .autoRenewableSubscription
                    ? "the account redeemed an offer code for \(product.subscriptionGroup) already"
                    : "the account redeemed this code already")
        }
        switch batch.kind {
        case .oneTime:
            guard row.redeemedMs == 0,
                try db.takeOneTimeCode(
                    hash: code.hash, accountID: order.account, transactionID: transactionID, nowMs: nowMs)
            else {
                return .refused(.invalidOfferIdentifier, "offer_code_used", "this offer code was redeemed already")
            }
        case .custom:
            guard try db.countCustomRedemption(batchID: batch.id) else {
                return .refused(
                    .invalidOfferIdentifier, "offer_code_limit_reached",
                    "this offer code was redeemed its limit of times")
            }
        }
        if let scope {
            try db.recordOfferCodeRedemption(
                scope: scope, accountID: order.account, batchID: batch.id, transactionID: transactionID, nowMs: nowMs)
        }
        return .accepted(batch)
    }

    /// Revokes a batch: its codes are refused from now on.
    public func revokeOfferCodes(batchID: String) async throws {
        guard try await ledger.revokeOfferCodes(batchID: batchID, nowMs: now) else {
            throw StoreError.notFound("no offer code batch \(batchID) that is not revoked already")
        }
    }

    /// The batch's codes as CSV lines: `code,state,redeemed_ms,account_id,transaction_id` (state `unused`,
    /// `redeemed`), a header first; a custom code's batch has one line.
    public func exportOfferCodes(batchID: String, _ line: (String) -> Void) async throws {
        guard try await ledger.offerCodeBatch(id: batchID) != nil else {
            throw StoreError.notFound("no offer code batch \(batchID)")
        }
        let oneTime = try await ledger.offerCodeBatch(id: batchID)?.kind == .oneTime
        line("code,state,redeemed_ms,account_id,transaction_id")
        var cursor = ""
        while true {
            let page = try await ledger.offerCodes(batchID: batchID, after: cursor, limit: 1_000)
            guard let last = page.last else { break }
            cursor = last.code
            for row in page {
                let state = row.redeemedMs > 0 ? "redeemed" : "unused"
                line(
                    "\(oneTime ? Self.displayed(row.code) : row.code),\(state),\(row.redeemedMs),\(row.accountID),\(row.transactionID)"
                )
            }
        }
    }
}

/// Wrong offer codes per account and per address, in a sliding minute: past ``perAccount`` or ``perSource`` a
/// redemption is refused before any code is looked at, so guessing finds nothing faster than the limit allows. Each
/// attempt is counted when it begins (calls sent together cannot pass the limit together) and forgiven when its code
/// exists. Kept in this process (each store counts its own).
final class OfferCodeGuesses: Sendable {
    /// Wrong codes an account may try in ``windowMs``.
    static let perAccount = 10
    /// Wrong codes one address may try in ``windowMs`` (several accounts behind one address).
    static let perSource = 50
    static let windowMs: Int64 = 60_000
    /// How many accounts and addresses are remembered at most (those with nothing recent are forgotten first).
    static let remembered = 100_000

    /// One attempt, to forgive.
    struct Attempt {
        var keys: [String]
        var atMs: Int64
    }

    private let state = NIOLockedValueBox<[String: [Int64]]>([:])

    /// Counts an attempt, or refuses it when the account or the address is at its limit.
    func begin(account: String, source: String?, nowMs: Int64) throws -> Attempt {
        let keys = ["a:" + account] + (source.map { ["s:" + $0] } ?? [])
        let refused = state.withLockedValue { state -> Bool in
            if state.count > Self.remembered {
                state = state.filter { $0.value.contains { $0 > nowMs - Self.windowMs } }
            }
            let counts = keys.map { key in (state[key] ?? []).filter { $0 > nowMs - Self.windowMs }.count }
            if counts[0] >= Self.perAccount || (counts.count > 1 && counts[1] >= Self.perSource) { return true }
            for key in keys {
                var times = (state[key] ?? []).filter { $0 > nowMs - Self.windowMs }
                times.append(nowMs)
                state[key] = times
            }
            return false
        }
        if refused {
            throw StoreError(
                .rateLimited, "too many wrong offer codes; try again in a minute (nothing was looked up)")
        }
        return Attempt(keys: keys, atMs: nowMs)
    }

    /// The attempt's code existed: it was no guess.
    func forgive(_ attempt: Attempt) {
        state.withLockedValue { state in
            for key in attempt.keys {
                if let index = state[key]?.lastIndex(of: attempt.atMs) { state[key]?.remove(at: index) }
            }
        }
    }
}
