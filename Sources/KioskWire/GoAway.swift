import KioskProto

/// The payload of a GOAWAY frame (`kiosk.rpc.v1.GoAway`): no new calls above
/// ``lastCallID``; the sender drains and closes.
public struct GoAway: Hashable, Sendable {
    /// The highest call id the sender has processed or will process.
    public var lastCallID: UInt32
    /// A gRPC status code: 0 for a graceful shutdown, 8 for an over-limit frame, 13 for a protocol breach.
    public var code: UInt32
    /// A readable reason.
    public var message: String

    /// Creates a GOAWAY payload.
    public init(lastCallID: UInt32, code: UInt32, message: String = "") {
        self.lastCallID = lastCallID
        self.code = code
        self.message = message
    }
}

extension GoAway: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__GoAway
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__go_away__init(c) }
    public init(cStruct c: CStruct) throws(WireError) {
        self.init(
            lastCallID: c.last_call_id, code: c.code, message: try CField.string(c.message, field: "GoAway.message"))
    }
    public func fill(_ c: inout CStruct, arena: CArena) {
        c.last_call_id = lastCallID
        c.code = code
        c.message = arena.cString(message)
    }
}
