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
