import Foundation
import Kiosk

/// What the `kiosk` commands print with `--json`: one object on one line, keys sorted, the field names
/// scripts read kept in one place. Fields without a value are left out, never written as null.
enum Output {
    /// Encodes `value` as one line of JSON.
    static func line(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    /// A failed command: `kiosk: message` on stderr as text.
    struct Failure: Encodable {
        var error: String, code: Int, message: String
    }

    /// A transaction, as `buy`, `restore`, `entitlements`, `unfinished`, `history` and `transaction` print it.
    struct TransactionObject: Encodable {
        var transactionID: String, originalTransactionID: String, productID: String, productType: String,
            quantity: UInt32
        var purchaseDate: String, finished: Bool, environment: String, state: String
        var expirationDate: String?, periodStartDate: String?, offerID: String?, revocationDate: String?,
            revocationReason: String?
        var refundCreditShortfall: UInt64?
        var price: String?, currency: String?, storefront: String?
        /// `buy` only: where the receipt was saved.
        var receiptFile: String?

        init(_ transaction: Transaction) {
            transactionID = transaction.id
            originalTransactionID = transaction.originalID
            productID = transaction.productID
            productType = transaction.productType.rawValue
            quantity = transaction.purchasedQuantity
            purchaseDate = transaction.purchaseDate.formatted(.iso8601)
            finished = transaction.isFinished
            environment = transaction.environment
            state = transaction.state
            expirationDate = transaction.expirationDate?.formatted(.iso8601)
            periodStartDate = transaction.periodStartDate?.formatted(.iso8601)
            offerID = transaction.offerID
            revocationDate = transaction.revocationDate?.formatted(.iso8601)
            revocationReason = transaction.revocationReason
            refundCreditShortfall = transaction.refundCreditShortfall > 0 ? transaction.refundCreditShortfall : nil
            price = transaction.price.map { "\($0)" }
            currency = transaction.currencyCode.isEmpty ? nil : transaction.currencyCode
            storefront = transaction.storefrontCountryCode
        }

        enum CodingKeys: String, CodingKey {
            case transactionID = "transaction_id", originalTransactionID = "original_transaction_id", productID =
                "product_id"
            case productType = "product_type", quantity, purchaseDate = "purchase_date", finished, environment, state
            case expirationDate = "expiration_date", periodStartDate = "period_start_date", offerID = "offer_id"
            case revocationDate = "revocation_date", revocationReason = "revocation_reason"
            case refundCreditShortfall = "refund_credit_shortfall", receiptFile = "receipt_file"
            case price, currency, storefront
        }
    }

    /// `access`: the entitlements held (or the one asked for), when the store confirmed them, and `cached` when the
    /// store could not be reached.
    struct Access: Encodable {
        var entitlements: [EntitlementObject]
        var confirmedDate: String
        var cached: Bool?
        enum CodingKeys: String, CodingKey { case entitlements, confirmedDate = "confirmed_date", cached }
    }

    /// One entitlement.
    struct EntitlementObject: Encodable {
        var id: String, active: Bool, willRenew: Bool
        var source: String?, productID: String?, transactionID: String?, expirationDate: String?
        init(_ entitlement: Entitlement) {
            id = entitlement.id
            active = entitlement.isActive
            willRenew = entitlement.willRenew
            source = entitlement.source?.rawValue
            productID = entitlement.productID
            transactionID = entitlement.transactionID
            expirationDate = entitlement.expirationDate?.formatted(.iso8601)
        }
        enum CodingKeys: String, CodingKey {
            case id, active, willRenew = "will_renew", source, productID = "product_id"
            case transactionID = "transaction_id", expirationDate = "expiration_date"
        }
    }

    /// `products`.
    struct Products: Encodable {
        struct Product: Encodable {
            var id: String, type: String, title: String, price: String, currency: String, displayPrice: String
            enum CodingKeys: String, CodingKey { case id, type, title, price, currency, displayPrice = "display_price" }
        }
        var products: [Product]
        var invalidProductIDs: [String]
        var storefront: String
        enum CodingKeys: String, CodingKey { case products, invalidProductIDs = "invalid_product_ids", storefront }
    }

    /// `storefront`.
    struct Storefront: Encodable {
        var storefront: String
        var previous: String?
    }

    /// `buy` when nothing was bought yet: `pending`, `queued` or `cancelled`.
    struct PurchaseState: Encodable {
        var state: String
    }

    /// A subscription's status, as `subscriptions`, `auto-renew` and `accept-price` print it.
    struct SubscriptionObject: Encodable {
        var originalTransactionID: String, productID: String, group: String, state: String, willAutoRenew: Bool,
            expirationDate: String
        var periodsPaid: Int, entitled: Bool
        var expirationReason: String?, gracePeriodExpirationDate: String?, billingRetryEndDate: String?,
            pendingProductID: String?
        var renewalPrice: String?, latestTransactionID: String?
        /// Present (true) only when the buyer has a price increase to agree to.
        var priceIncreasePending: Bool?

        init(_ status: SubscriptionStatus) {
            originalTransactionID = status.originalTransactionID
            productID = status.productID
            group = status.groupID
            state = status.state.rawValue
            willAutoRenew = status.willAutoRenew
            expirationDate = status.expirationDate.formatted(.iso8601)
            periodsPaid = Int(status.periodsPaid)
            entitled = status.isEntitled
            expirationReason = status.expirationReason?.rawValue
            gracePeriodExpirationDate = status.gracePeriodExpirationDate?.formatted(.iso8601)
            billingRetryEndDate = status.billingRetryEndDate?.formatted(.iso8601)
            pendingProductID = status.pendingProductID
            renewalPrice = status.renewalPrice.map { "\($0) \(status.currencyCode)" }
            latestTransactionID = status.latestTransaction?.id
            priceIncreasePending = status.priceIncreasePending ? true : nil
        }

        enum CodingKeys: String, CodingKey {
            case originalTransactionID = "original_transaction_id", productID = "product_id", group, state
            case willAutoRenew = "will_auto_renew", expirationDate = "expiration_date", periodsPaid = "periods_paid",
                entitled
            case expirationReason = "expiration_reason", gracePeriodExpirationDate = "grace_period_expiration_date"
            case billingRetryEndDate = "billing_retry_end_date", pendingProductID = "pending_product_id", renewalPrice =
                "renewal_price"
            case latestTransactionID = "latest_transaction_id", priceIncreasePending = "price_increase_pending"
        }
    }

    /// `subscriptions`.
    struct Subscriptions: Encodable {
        var subscriptions: [SubscriptionObject]
    }

    /// `payment-method`: `payment_method`, `subscriptions`.
    struct SavedPaymentMethod: Encodable {
        var paymentMethod: String
        var subscriptions: Int

        enum CodingKeys: String, CodingKey {
            case paymentMethod = "payment_method"
            case subscriptions
        }
    }

    /// `balance`, and `spend` (with `spent`).
    struct Balance: Encodable {
        var balance: Int64
        var spent: Int64?
    }

    /// `request-refund`.
    struct RefundRequested: Encodable {
        var transactionID: String, productID: String, reason: String, state: String, requestedMs: Int64
        var decidedMs: Int64?, decisionReason: String?
        enum CodingKeys: String, CodingKey {
            case transactionID = "transaction_id", productID = "product_id", reason, state, requestedMs = "requested_ms"
            case decidedMs = "decided_ms", decisionReason = "decision_reason"
        }
    }

    /// `finish`.
    struct Finished: Encodable {
        var finished: String
    }

    /// `verify`.
    struct Verified: Encodable {
        var status: Int, valid: Bool, message: String
        var transactionID: String?, productID: String?, revocationReason: String?
        enum CodingKeys: String, CodingKey {
            case status, valid, message, transactionID = "transaction_id", productID = "product_id", revocationReason =
                "revocation_reason"
        }
    }

    /// `download`.
    struct Downloaded: Encodable {
        var productID: String, file: String, transactionID: String, finished: Bool
        enum CodingKeys: String, CodingKey {
            case productID = "product_id", file, transactionID = "transaction_id", finished
        }
    }
}
