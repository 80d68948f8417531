import KioskProto

/// The payload of a TRAILERS frame (`kiosk.rpc.v1.CallStatus`): the server ends a call.
public struct CallStatus: Hashable, Sendable {
    /// A gRPC status code, 0–16.
    public var code: UInt32
    /// A readable message; empty on success.
    public var message: String
    /// Trailing metadata.
    public var metadata: Metadata

    /// Creates a call status.
    public init(code: UInt32, message: String = "", metadata: Metadata = Metadata()) {
        self.code = code
        self.message = message
        self.metadata = metadata
    }
}

extension CallStatus: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__CallStatus
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__call_status__init(c) }
    public init(cStruct c: CStruct) throws(WireError) {
        self.init(
            code: c.code,
            message: try CField.string(c.message, field: "CallStatus.message"),
            metadata: Metadata(
                try CField.messages(c.n_metadata, c.metadata, as: MetadataEntry.self, field: "CallStatus.metadata"))
        )
    }
    public func fill(_ c: inout CStruct, arena: CArena) {
        c.code = code
        c.message = arena.cString(message)
        (c.n_metadata, c.metadata) = arena.messages(metadata.entries)
    }
}
