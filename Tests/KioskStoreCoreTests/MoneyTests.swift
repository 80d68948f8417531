import KioskStoreCore
import Testing

@Suite("Money")
struct MoneyTests {
    @Test(
        "prices read with their currency's ISO 4217 decimals",
        arguments: [
            ("4.99", "USD", Int64(499)), ("4.9", "USD", 490), ("5", "EUR", 500), ("0", "USD", 0), ("0.00", "USD", 0),
            ("1.255", "KWD", 1255), ("1.2", "KWD", 1200), ("7", "BHD", 7000),
            ("500", "JPY", 500), ("120000", "KRW", 120_000),
        ])
    func reads(text: String, currency: String, minor: Int64) throws {
        let money = try #require(Money(decimal: text, currency: currency))
        #expect(money.minorUnits == minor)
        #expect(Money(decimal: money.decimalString, currency: currency) == money)
    }

    @Test(
        "more decimals than the currency has, signs, exponents and blanks are refused",
        arguments: [
            ("4.999", "USD"), ("1.2555", "KWD"), ("500.5", "JPY"), ("-1", "USD"), ("+1", "USD"), (".5", "USD"),
            ("5.", "USD"),
            ("1e3", "USD"), ("", "USD"), (" 1", "USD"), ("1.2.3", "USD"), ("99999999999999999999", "USD"),
        ])
    func refuses(text: String, currency: String) {
        #expect(Money(decimal: text, currency: currency) == nil)
    }

    @Test("decimal strings carry exactly the currency's decimals")
    func formats() {
        #expect(Money(minorUnits: 490, currency: "USD").decimalString == "4.90")
        #expect(Money(minorUnits: 1255, currency: "KWD").decimalString == "1.255")
        #expect(Money(minorUnits: 5, currency: "KWD").decimalString == "0.005")
        #expect(Money(minorUnits: 500, currency: "JPY").decimalString == "500")
    }

    @Test("totals multiply by quantity and refuse overflow")
    func totals() throws {
        let price = try #require(Money(decimal: "1.255", currency: "KWD"))
        #expect(price.times(4)?.minorUnits == 5020)
        #expect(Money(minorUnits: .max / 2, currency: "USD").times(3) == nil)
    }

    @Test("a charge of 1.255 KWD is 1255 fils to the processor")
    func threeDecimalCharge() {
        let request = PaymentRequest(
            paymentID: "p", accountID: "a", productID: "x", quantity: 2, unitPrice: "1.255", currency: "KWD",
            paymentMethod: "m")
        #expect(request.amountMinorUnits == 2510)
        let free = PaymentRequest(
            paymentID: "p", accountID: "a", productID: "x", quantity: 1, unitPrice: "0.00", currency: "USD",
            paymentMethod: "m")
        #expect(free.amount?.isZero == true)
    }

    @Test("amounts of one currency order by value")
    func orders() {
        #expect(Money(minorUnits: 499, currency: "USD") < Money(minorUnits: 599, currency: "USD"))
        #expect(!(Money(minorUnits: 599, currency: "USD") < Money(minorUnits: 499, currency: "USD")))
    }
}

@Suite("Field limits")
struct FieldLimitsTests {
    @Test("a field at its limit passes; one byte more is refused, naming the field")
    func limits() throws {
        try FieldLimits.check(
            String(repeating: "x", count: FieldLimits.paymentMethod), "payment_method", max: FieldLimits.paymentMethod)
        #expect(throws: FieldTooLong(field: "payment_method", limit: 256, length: 257)) {
            try FieldLimits.check(String(repeating: "x", count: 257), "payment_method", max: FieldLimits.paymentMethod)
        }
        // Bytes, not characters: 128 two-byte characters are 256 bytes.
        try FieldLimits.check(String(repeating: "é", count: 128), "payment_method", max: 256)
        #expect(throws: FieldTooLong.self) {
            try FieldLimits.check(String(repeating: "é", count: 129), "payment_method", max: 256)
        }
        #expect(
            FieldTooLong(field: "reason", limit: 1024, length: 2000).description
                == "reason is 2000 bytes; at most 1024 are accepted")
    }
}
