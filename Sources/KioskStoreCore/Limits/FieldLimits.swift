/// The largest value, in UTF-8 bytes (or bytes for `bytes` fields), the store accepts in each free-text
/// field of a request. A request over a limit is refused (INVALID_ARGUMENT, 3) before anything is read
/// from or written to the ledger; `docs/PROTOCOL.md` lists them.
public enum FieldLimits {
    /// `product_id`, and each of ListProducts' `product_ids`.
    public static let productID = 128
    /// ListProducts: how many ids one request may ask for.
    public static let productIDsPerRequest = 200
    /// `payment_method`.
    public static let paymentMethod = 256
    /// `transaction_id`, `original_transaction_id`.
    public static let transactionID = 128
    /// `page_token`.
    public static let pageToken = 512
    /// A refund's or refund request's `reason`.
    public static let reason = 1_000
    /// AccessToken's `audience`.
    public static let audience = 128
    /// A subscription offer's `offer_id`, `key_id` and `nonce`.
    public static let offerField = 64
    /// A subscription offer's `signature`.
    public static let offerSignature = 128
    /// VerifyReceipt's `signed_receipt`.
    public static let signedReceipt = 16 * 1_024
    /// The `idempotency-key` metadata.
    public static let idempotencyKey = 128

    /// Refuses `value` when it is longer than `limit` bytes.
    public static func check(_ value: String, _ field: String, max limit: Int) throws(FieldTooLong) {
        let length = value.utf8.count
        if length > limit { throw FieldTooLong(field: field, limit: limit, length: length) }
    }

    /// Refuses `value` when it is longer than `limit` bytes.
    public static func check(_ value: [UInt8], _ field: String, max limit: Int) throws(FieldTooLong) {
        if value.count > limit { throw FieldTooLong(field: field, limit: limit, length: value.count) }
    }
}

/// A request field over its limit (``FieldLimits``).
public struct FieldTooLong: Error, Hashable, Sendable, CustomStringConvertible {
    /// The field's name as the contract spells it.
    public var field: String
    /// Its limit, in bytes.
    public var limit: Int
    /// The length sent.
    public var length: Int

    /// Creates the error.
    public init(field: String, limit: Int, length: Int) {
        self.field = field
        self.limit = limit
        self.length = length
    }

    public var description: String { "\(field) is \(length) bytes; at most \(limit) are accepted" }
}
