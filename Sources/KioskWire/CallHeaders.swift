import KioskProto

/// The payload of a HEADERS frame (`kiosk.rpc.v1.CallHeaders`): the client opens a call.
public struct CallHeaders: Hashable, Sendable {
    /// The method, "/package.Service/Method".
    public var method: String
    /// The call's deadline in milliseconds from when the server reads the frame; 0 means none.
    public var timeoutMs: UInt32
    /// The call's metadata.
    public var metadata: Metadata

    /// Creates call headers.
    public init(method: String, timeoutMs: UInt32 = 0, metadata: Metadata = Metadata()) {
        self.method = method
        self.timeoutMs = timeoutMs
        self.metadata = metadata
    }
}

extension CallHeaders: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__CallHeaders
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__call_headers__init(c) }
    public init(cStruct c: CStruct) throws(WireError) {
        self.init(
            method: try CField.string(c.method, field: "CallHeaders.method"),
            timeoutMs: c.timeout_ms,
            metadata: Metadata(
                try CField.messages(c.n_metadata, c.metadata, as: MetadataEntry.self, field: "CallHeaders.metadata"))
        )
    }
    public func fill(_ c: inout CStruct, arena: CArena) {
        c.method = arena.cString(method)
        c.timeout_ms = timeoutMs
        (c.n_metadata, c.metadata) = arena.messages(metadata.entries)
    }
}
