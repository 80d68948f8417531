/// The metadata of a call: an ordered list of key/value pairs, as in gRPC.
///
/// Keys are compared lower-cased. Kiosk uses `authorization: Bearer <token>`
/// and `idempotency-key`.
public struct Metadata: Hashable, Sendable, RandomAccessCollection, ExpressibleByDictionaryLiteral {
    /// The pairs, in the order they were added.
    public var entries: [MetadataEntry]

    /// Creates metadata from pairs.
    public init(_ entries: [MetadataEntry] = []) {
        self.entries = entries
    }

    /// Creates metadata from text pairs; keys are lower-cased.
    public init(dictionaryLiteral elements: (String, String)...) {
        self.entries = elements.map { MetadataEntry(key: $0.0.lowercased(), value: $0.1) }
    }

    public var startIndex: Int { entries.startIndex }
    public var endIndex: Int { entries.endIndex }
    public subscript(position: Int) -> MetadataEntry { entries[position] }

    /// The first text value for `key`, if any.
    public subscript(key: String) -> String? {
        let key = Self.lowercased(key)
        return entries.first { $0.key == key }?.value
    }

    /// `key` lower-cased, without a copy when it already is (as keys in code are).
    private static func lowercased(_ key: String) -> String {
        key.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") } || !key.utf8.allSatisfy { $0 < 0x80 }
            ? key.lowercased() : key
    }

    /// Every text value for `key`, in order.
    public func values(for key: String) -> [String] {
        let key = key.lowercased()
        return entries.filter { $0.key == key }.map(\.value)
    }

    /// Appends a text pair; the key is lower-cased.
    public mutating func add(_ key: String, _ value: String) {
        entries.append(MetadataEntry(key: key.lowercased(), value: value))
    }

    /// Appends a binary pair; the key is lower-cased.
    public mutating func add(_ key: String, binary: [UInt8]) {
        entries.append(MetadataEntry(key: key.lowercased(), binaryValue: binary))
    }

    /// Replaces every pair with `key` by one text pair.
    public mutating func set(_ key: String, _ value: String) {
        let key = key.lowercased()
        entries.removeAll { $0.key == key }
        entries.append(MetadataEntry(key: key, value: value))
    }

    /// The token of an `authorization: Bearer <token>` pair, if present.
    public var bearerToken: String? {
        guard let value = self["authorization"] else { return nil }
        // "Bearer " in any case, then the token without the spaces around it.
        let utf8 = value.utf8
        var index = utf8.startIndex
        for expected in "bearer".utf8 {
            guard index != utf8.endIndex, utf8[index] | 0x20 == expected else { return nil }
            index = utf8.index(after: index)
        }
        guard index != utf8.endIndex, utf8[index] == UInt8(ascii: " ") else { return nil }
        var end = utf8.endIndex
        while index != end, utf8[index] == UInt8(ascii: " ") { index = utf8.index(after: index) }
        while index != end, utf8[utf8.index(before: end)] == UInt8(ascii: " ") { end = utf8.index(before: end) }
        guard index != end else { return nil }
        return String(value[index..<end])
    }
}
