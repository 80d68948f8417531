/// An amount of money in a currency's minor unit, as ISO 4217 defines it: cents for
/// USD and EUR (exponent 2), yen for JPY (0), fils for KWD (3).
///
/// Prices travel and are stored as decimal strings (`"4.99"`, `"1.255"`, `"500"`); every
/// comparison, sum and charge goes through this type, so a price is read one way only.
public struct Money: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The amount in minor units (never negative for a price).
    public var minorUnits: Int64
    /// The ISO 4217 code, upper case.
    public var currency: String

    /// Creates an amount of `minorUnits` of `currency`.
    public init(minorUnits: Int64, currency: String) {
        self.minorUnits = minorUnits
        self.currency = currency
    }

    /// Reads a decimal price: digits, optionally a point and at most the currency's exponent of
    /// decimals (`1.255` KWD, `4.99` USD, `500` JPY). Nil for anything else: a sign, an exponent,
    /// more decimals than the currency has, or an amount that does not fit in 64 bits.
    public init?(decimal text: String, currency: String) {
        let exponent = Currency.exponent(of: currency)
        let utf8 = Array(text.utf8)
        guard !utf8.isEmpty, utf8.count <= 32 else { return nil }
        var whole: Int64 = 0
        var fraction: Int64 = 0
        var decimals = 0
        var seenPoint = false
        var wholeDigits = 0
        for byte in utf8 {
            if byte == UInt8(ascii: ".") {
                guard !seenPoint, wholeDigits > 0 else { return nil }
                seenPoint = true
                continue
            }
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let digit = Int64(byte - UInt8(ascii: "0"))
            if seenPoint {
                decimals += 1
                guard decimals <= exponent else { return nil }
                fraction = fraction * 10 + digit
            } else {
                wholeDigits += 1
                let (shifted, overflow) = whole.multipliedReportingOverflow(by: 10)
                guard !overflow else { return nil }
                whole = shifted + digit
            }
        }
        guard wholeDigits > 0, !(seenPoint && decimals == 0) else { return nil }
        for _ in decimals..<exponent { fraction *= 10 }
        let scale = Currency.scale(exponent)
        let (scaled, overflow) = whole.multipliedReportingOverflow(by: scale)
        guard !overflow else { return nil }
        let (total, overflowSum) = scaled.addingReportingOverflow(fraction)
        guard !overflowSum else { return nil }
        self.init(minorUnits: total, currency: currency.uppercased())
    }

    /// Zero in `currency`.
    public static func zero(_ currency: String) -> Money { Money(minorUnits: 0, currency: currency) }

    /// True for an amount of nothing (a free trial, an upgrade fully credited).
    public var isZero: Bool { minorUnits == 0 }

    /// True when a decimal price string is zero ("0", "0.00") in any currency.
    public static func isZero(_ decimal: String) -> Bool {
        !decimal.isEmpty && decimal.contains("0") && decimal.allSatisfy { $0 == "0" || $0 == "." }
    }

    /// This amount `count` times; nil on overflow.
    public func times(_ count: UInt32) -> Money? {
        let (total, overflow) = minorUnits.multipliedReportingOverflow(by: Int64(count))
        return overflow ? nil : Money(minorUnits: total, currency: currency)
    }

    /// The decimal string with exactly the currency's exponent of decimals (`4.90`, `1.255`, `500`).
    public var decimalString: String {
        let exponent = Currency.exponent(of: currency)
        guard exponent > 0 else { return String(minorUnits) }
        let scale = Currency.scale(exponent)
        let sign = minorUnits < 0 ? "-" : ""
        let magnitude = minorUnits.magnitude
        let whole = magnitude / UInt64(scale)
        var fraction = String(magnitude % UInt64(scale))
        while fraction.count < exponent { fraction = "0" + fraction }
        return "\(sign)\(whole).\(fraction)"
    }

    public var description: String { "\(decimalString) \(currency)" }

    /// Orders amounts of one currency; amounts of different currencies order by currency code, so
    /// callers compare prices of one product (one currency) only.
    public static func < (lhs: Money, rhs: Money) -> Bool {
        lhs.currency == rhs.currency ? lhs.minorUnits < rhs.minorUnits : lhs.currency < rhs.currency
    }
}

/// ISO 4217 minor-unit exponents.
public enum Currency {
    /// Currencies without a minor unit (ISO 4217 exponent 0).
    static let exponentZero: Set<String> = [
        "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF",
        "XPF",
    ]
    /// Currencies with three decimals (ISO 4217 exponent 3).
    static let exponentThree: Set<String> = ["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"]
    /// Currencies with four decimals (units of account).
    static let exponentFour: Set<String> = ["CLF", "UYW"]

    /// The number of decimals of `code`'s minor unit: 0, 2, 3 or 4 (2 for codes not listed as otherwise).
    public static func exponent(of code: String) -> Int {
        let upper = code.uppercased()
        if exponentZero.contains(upper) { return 0 }
        if exponentThree.contains(upper) { return 3 }
        if exponentFour.contains(upper) { return 4 }
        return 2
    }

    static func scale(_ exponent: Int) -> Int64 {
        var scale: Int64 = 1
        for _ in 0..<exponent { scale *= 10 }
        return scale
    }
}
