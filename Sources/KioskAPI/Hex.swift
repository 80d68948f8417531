extension Sequence where Element == UInt8 {
    /// The bytes as lower-case hexadecimal, two digits each.
    public var hexString: String {
        var out = ""
        for byte in self {
            let digits = String(byte, radix: 16)
            if digits.count == 1 { out += "0" }
            out += digits
        }
        return out
    }
}

extension Array where Element == UInt8 {
    /// The bytes of `hex` (two digits a byte, either case); nil for an odd
    /// number of digits or any other character.
    public init?(hex: String) {
        var out: [UInt8] = []
        out.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8?
        for character in hex.utf8 {
            let value: UInt8
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = character - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = character - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): value = character - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let digit = high {
                out.append(digit << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        guard high == nil else { return nil }
        self = out
    }
}
