import KioskProto

/// One key/value pair of call metadata (`kiosk.rpc.v1.Metadata`).
///
/// Keys are lower-case ASCII. A pair carries text in ``value`` or bytes in
/// ``binaryValue``.
public struct MetadataEntry: Hashable, Sendable {
    /// The key, lower-case ASCII, e.g. `authorization`.
    public var key: String
    /// The text value.
    public var value: String
    /// The binary value, for keys that carry bytes.
    public var binaryValue: [UInt8]

    /// Creates a pair.
    public init(key: String, value: String = "", binaryValue: [UInt8] = []) {
        self.key = key
        self.value = value
        self.binaryValue = binaryValue
    }
}

extension MetadataEntry: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__Metadata
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__metadata__init(c) }
    public init(cStruct c: CStruct) throws(WireError) {
        self.init(
            key: try CField.string(c.key, field: "Metadata.key"),
            value: try CField.string(c.value, field: "Metadata.value"),
            binaryValue: CField.bytes(c.binary_value)
        )
    }
    public func fill(_ c: inout CStruct, arena: CArena) {
        c.key = arena.cString(key)
        c.value = arena.cString(value)
        c.binary_value = arena.binary(binaryValue)
    }
}
