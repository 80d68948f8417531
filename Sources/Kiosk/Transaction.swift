import Foundation
import KioskAPI

/// A purchase, as the store recorded it.
public struct Transaction: Hashable, Sendable, Identifiable {
    /// The transaction id.
    public var id: String
    /// The first transaction of this purchase (a renewal keeps its original's id).
    public var originalID: String
    /// The product bought.
    public var productID: String
    /// The product's kind.
    public var productType: ProductType
    /// Units bought.
    public var purchasedQuantity: UInt32
    /// When it was bought (or approved).
    public var purchaseDate: Date
    /// When a subscription expires.
    public var expirationDate: Date?
    /// When the subscription period this transaction paid for starts (a stacked non-renewing period starts
    /// when the one before ends; a renewal's, when the period before ended).
    public var periodStartDate: Date?
    /// A subscription bought or renewed under an offer: `introductory` or the promotional offer's id.
    public var offerID: String?
    /// When it was refunded or revoked.
    public var revocationDate: Date?
    /// Why it was revoked.
    public var revocationReason: String?
    /// The account that bought it.
    public var accountID: String
    /// Sandbox or production.
    public var environment: String
    /// The signed receipt (an encoded `kiosk.receipt.v1.SignedReceipt`) a server can verify.
    public var signedReceipt: [UInt8]
    /// True when the app had finished it when this value was read.
    public var isFinished: Bool
    /// A refunded consumable: credits the refund could not take back because they were already spent.
    public var refundCreditShortfall: UInt64
    /// PURCHASED or DEFERRED (FAILED purchases are answered, never recorded).
    public var state: String
    /// Set when ``KioskClient/transactionUpdates`` yields a subscription again because it ended:
    /// why ("CANCELLED", "BILLING_ERROR", "PRICE_INCREASE_NOT_ACCEPTED", "PRODUCT_UNAVAILABLE").
    public var expirationReason: String?
    /// The price of one unit as charged (an offer's, an upgrade's prorated price); nil when the store sent none.
    public var price: Decimal?
    /// The ISO 4217 currency code of ``price``.
    public var currencyCode: String
    /// The storefront it was bought in (ISO 3166-1 alpha-3, "FRA", as StoreKit's `Storefront.countryCode`); nil for
    /// transactions of older stores and grants.
    public var storefrontCountryCode: String?

    init(_ message: StoreV1.Transaction) {
        id = message.transactionID
        originalID = message.originalTransactionID
        productID = message.productID
        productType = ProductType(message.productType)
        purchasedQuantity = message.quantity
        purchaseDate = Date(milliseconds: message.purchaseDateMs)
        expirationDate = message.expiresDateMs > 0 ? Date(milliseconds: message.expiresDateMs) : nil
        periodStartDate = message.periodStartMs > 0 ? Date(milliseconds: message.periodStartMs) : nil
        offerID = message.offerID.isEmpty ? nil : message.offerID
        revocationDate = message.revocationDateMs > 0 ? Date(milliseconds: message.revocationDateMs) : nil
        revocationReason = message.revocationReason.isEmpty ? nil : message.revocationReason
        accountID = message.accountID
        environment = message.environment.name
        signedReceipt = message.signedReceipt
        isFinished = message.finished
        refundCreditShortfall = message.refundCreditShortfall
        state = message.state.name
        price =
            message.price.isEmpty ? nil : Decimal(string: message.price, locale: Locale(identifier: "en_US_POSIX"))
        currencyCode = message.currency
        storefrontCountryCode = message.storefront.isEmpty ? nil : message.storefront
    }

    /// True for a live entitlement: not revoked, and not expired if it expires.
    public func isActive(at date: Date = Date()) -> Bool {
        revocationDate == nil && (expirationDate.map { $0 > date } ?? true)
    }
}

/// The outcome of ``KioskClient/purchase(_:quantity:paymentMethod:offer:)``, as StoreKit's `Product.PurchaseResult`.
public enum PurchaseResult: Hashable, Sendable {
    /// Bought. Deliver the product, then call ``KioskClient/finish(_:)``.
    case success(Transaction)
    /// Not decided yet: waiting for approval (ask to buy), or queued because the
    /// store could not be reached. The outcome arrives on ``KioskClient/transactionUpdates``.
    case pending
    /// The buyer cancelled.
    case userCancelled
}

/// The store's answer to "is this receipt real?".
public struct VerificationResult: Hashable, Sendable {
    /// The status: 0 valid, 21002 malformed, 21003 not authentic, 21006 expired,
    /// 21007 sandbox receipt at production, 21008 production receipt at sandbox, 21010 account not found.
    public var status: UInt32
    /// A readable reason.
    public var message: String
    /// The decoded receipt's transaction id and product, when it could be decoded.
    public var transactionID: String?
    /// The product of the receipt.
    public var productID: String?
    /// The account of the receipt.
    public var accountID: String?
    /// When it was refunded or revoked.
    public var revocationDate: Date?
    /// Why.
    public var revocationReason: String?

    /// True when the receipt is valid and not revoked.
    public var isValid: Bool { status == 0 && revocationDate == nil }
}

extension Date {
    init(milliseconds: Int64) { self.init(timeIntervalSince1970: Double(milliseconds) / 1000) }
    var milliseconds: Int64 { Int64((timeIntervalSince1970 * 1000).rounded()) }
}

extension Transaction {
    /// Every transaction of the account `kiosk` signs in as, oldest first, paged as it is
    /// consumed (StoreKit's `Transaction.all`).
    public static func all(in kiosk: KioskClient) -> AsyncThrowingStream<Transaction, Error> {
        kiosk.allTransactions()
    }
}
