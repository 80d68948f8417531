import KioskProto

/// The payload of a WINDOW_UPDATE frame (`kiosk.rpc.v1.WindowUpdate`): the
/// receiver grants more MESSAGE payload bytes for a call.
public struct WindowUpdate: Hashable, Sendable {
    /// Bytes added to the sender's window.
    public var increment: UInt32

    /// Creates a window update.
    public init(increment: UInt32) {
        self.increment = increment
    }
}

extension WindowUpdate: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__WindowUpdate
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__window_update__init(c) }
    public init(cStruct c: CStruct) throws(WireError) { self.init(increment: c.increment) }
    public func fill(_ c: inout CStruct, arena: CArena) { c.increment = increment }
}
