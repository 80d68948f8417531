extension Sequence where Element == UInt8 {
    /// The bytes as lower-case hexadecimal, two digits each.
    public var hexString: String {
        var out: [UInt8] = []
        out.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            out.append(hexDigits[Int(byte >> 4)])
            out.append(hexDigits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

private let hexDigits = Array("0123456789abcdef".utf8)

extension Array where Element == UInt8 {
    /// `count` bytes from the system's secure generator, taken eight at a time: one system call each, where
    /// `UInt8.random(in:)` makes one a byte.
    package static func secureRandom(count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 7)
        while bytes.count < count {
            Swift.withUnsafeBytes(of: generator.next() as UInt64) { bytes.append(contentsOf: $0) }
        }
        bytes.removeLast(bytes.count - count)
        return bytes
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
