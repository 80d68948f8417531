import Foundation

/// A batch of offer codes an operator made, as App Store Connect's offer codes: one-time codes (each redeemed once)
/// or one custom code (a word, redeemed up to a limit, once per account). Redeeming one buys ``productID`` at
/// ``price`` (usually "0"): a free or discounted first period of ``period`` for an auto-renewable subscription
/// (then the product's price), the non-consumable, or ``quantity`` units of a consumable (its credits).
public struct OfferCodeBatch: Hashable, Sendable {
    /// One-time codes, or one custom code.
    public enum Kind: String, Hashable, Sendable {
        case oneTime = "one_time"
        case custom
    }

    /// The batch's id (letters, digits, '.', '_', '-'): the transactions' offer id is `code:<id>`.
    public var id: String
    public var kind: Kind
    public var productID: String
    /// The price of what a code buys, a decimal in the product's currency: "0" for free.
    public var price: String
    /// Auto-renewable subscriptions: the first period's length (ISO 8601); empty otherwise.
    public var period: String
    /// Consumables: the units a code buys; 1 otherwise.
    public var quantity: UInt32
    /// Custom codes: how many accounts may redeem it; one-time codes: how many codes were made.
    public var redemptionLimit: Int
    /// How many times its codes were redeemed.
    public var redeemed: Int
    /// When its codes stop working (ms since 1970); 0: never.
    public var expiresMs: Int64
    /// When it was revoked; 0: it was not.
    public var revokedMs: Int64
    public var createdMs: Int64

    public init(
        id: String, kind: Kind, productID: String, price: String, period: String, quantity: UInt32,
        redemptionLimit: Int, redeemed: Int = 0, expiresMs: Int64, revokedMs: Int64 = 0, createdMs: Int64
    ) {
        self.id = id
        self.kind = kind
        self.productID = productID
        self.price = price
        self.period = period
        self.quantity = quantity
        self.redemptionLimit = redemptionLimit
        self.redeemed = redeemed
        self.expiresMs = expiresMs
        self.revokedMs = revokedMs
        self.createdMs = createdMs
    }

    /// The offer id its transactions carry.
    public var offerID: String { EntitlementSource.offerCodePrefix + id }
}

/// Offer codes as typed and as kept.
public enum OfferCodes {
    /// The alphabet of one-time codes: digits and capitals without 0, 1, I and O (32 symbols, 5 bits each).
    public static let alphabet = Array("23456789ABCDEFGHJKLMNPQRSTUVWXYZ")

    /// A new one-time code: 16 symbols (80 random bits from the system's generator), in four groups of four:
    /// `ABCD-EFGH-JKLM-NPQR`.
    public static func newCode() -> String {
        var generator = SystemRandomNumberGenerator()
        let symbols = (0..<16).map { _ in alphabet[Int(generator.next(upperBound: UInt32(alphabet.count)))] }
        return stride(from: 0, to: 16, by: 4).map { String(symbols[$0..<$0 + 4]) }.joined(separator: "-")
    }

    /// A code as typed, in the form it is kept: capitals, without spaces and dashes. Nil for one that cannot be a
    /// code (empty, longer than 32 symbols, or holding anything but ASCII letters and digits).
    public static func normalized(_ typed: String) -> String? {
        let kept = typed.uppercased().filter { $0 != "-" && $0 != " " }
        guard (4...32).contains(kept.count), kept.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }) else {
            return nil
        }
        return kept
    }

    /// True for a custom code's word: 4 to 32 ASCII letters and digits.
    public static func isCustomWord(_ word: String) -> Bool {
        (4...32).contains(word.count) && word.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
    }
}
