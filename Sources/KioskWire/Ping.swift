import KioskProto

/// The payload of PING and PONG frames (`kiosk.rpc.v1.Ping`); a PONG echoes the PING's value.
public struct Ping: Hashable, Sendable {
    /// An opaque value the PONG must echo.
    public var opaque: UInt64

    /// Creates a ping payload.
    public init(opaque: UInt64) {
        self.opaque = opaque
    }
}

extension Ping: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__Ping
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__ping__init(c) }
    public init(cStruct c: CStruct) throws(WireError) { self.init(opaque: c.opaque) }
    public func fill(_ c: inout CStruct, arena: CArena) { c.opaque = opaque }
}
