import CProtobufC
import NIOCore

/// A Swift value type bridged to one protoc-c generated message.
///
/// Encoding builds the C struct in a ``CArena`` and packs it with
/// `protobuf_c_message_pack`; decoding unpacks with the generated `…__unpack`,
/// copies every field into Swift values and frees the C message exactly once.
/// No C pointer outlives the call that made it.
///
/// Bridging a new message takes the five obvious members:
///
/// ```swift
/// extension Ping: WireMessage {
///     public typealias CStruct = Kiosk__Rpc__V1__Ping
///     public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__ping__init(c) }
///     public static func cUnpack(_ n: Int, _ p: UnsafePointer<UInt8>) -> UnsafeMutablePointer<CStruct>? {
///         kiosk__rpc__v1__ping__unpack(nil, n, p)
///     }
///     public init(cStruct c: CStruct) throws(WireError) { self.init(opaque: c.opaque) }
///     public func fill(_ c: inout CStruct, arena: CArena) { c.opaque = opaque }
/// }
/// ```
public protocol WireMessage: Sendable {
    /// The protoc-c struct of the message.
    associatedtype CStruct

    /// Initialises a C struct to the message's defaults (the generated `…__init`).
    static func cInit(_ c: UnsafeMutablePointer<CStruct>)
    /// Unpacks bytes with the generated `…__unpack`; nil when they are not a valid message.
    static func cUnpack(_ count: Int, _ bytes: UnsafePointer<UInt8>) -> UnsafeMutablePointer<CStruct>?
    /// Copies the fields of an unpacked C struct into a Swift value.
    init(cStruct: CStruct) throws(WireError)
    /// Writes the fields into an initialised C struct; any memory comes from `arena`.
    func fill(_ c: inout CStruct, arena: CArena)
}

extension WireMessage {
    /// Builds this message's C struct inside `arena` (for a message-typed field of another message).
    @inlinable
    public func makeCStruct(in arena: CArena) -> UnsafeMutablePointer<CStruct> {
        let c = arena.allocate(CStruct.self)
        Self.cInit(c)
        fill(&c.pointee, arena: arena)
        return c
    }

    /// Calls `body` with this message as a protobuf-c message; the pointer is valid only inside `body`.
    @inlinable
    public func withCMessage<R>(_ body: (UnsafePointer<ProtobufCMessage>) throws -> R) rethrows -> R {
        let arena = CArena()
        return try withExtendedLifetime(arena) {
            let c = makeCStruct(in: arena)
            return try body(UnsafeRawPointer(c).assumingMemoryBound(to: ProtobufCMessage.self))
        }
    }

    /// The number of bytes ``serializedBytes()`` produces.
    @inlinable
    public var serializedSize: Int {
        withCMessage { protobuf_c_message_get_packed_size($0) }
    }

    /// The protobuf encoding of this message.
    @inlinable
    public func serializedBytes() -> [UInt8] {
        withCMessage { message in
            let size = protobuf_c_message_get_packed_size(message)
            return [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
                count = size == 0 ? 0 : protobuf_c_message_pack(message, buffer.baseAddress)
            }
        }
    }

    /// Appends the protobuf encoding of this message to `buffer`; returns the bytes written.
    @discardableResult
    @inlinable
    public func serialize(into buffer: inout ByteBuffer) -> Int {
        withCMessage { message in
            let size = protobuf_c_message_get_packed_size(message)
            guard size > 0 else { return 0 }
            return buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { out in
                protobuf_c_message_pack(message, out.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
    }

    /// Decodes a message from its protobuf encoding.
    ///
    /// - Throws: ``WireError`` with code `malformedMessage` when the bytes are not a valid message.
    @inlinable
    public init(serializedBytes bytes: UnsafeRawBufferPointer) throws(WireError) {
        var placeholder: UInt8 = 0
        let unpacked: UnsafeMutablePointer<CStruct>?
        if let base = bytes.baseAddress, bytes.count > 0 {
            unpacked = Self.cUnpack(bytes.count, base.assumingMemoryBound(to: UInt8.self))
        } else {
            unpacked = withUnsafePointer(to: &placeholder) { Self.cUnpack(0, $0) }
        }
        guard let unpacked else {
            throw WireError(.malformedMessage, "\(bytes.count) bytes are not a valid \(Self.self) message")
        }
        defer {
            protobuf_c_message_free_unpacked(UnsafeMutableRawPointer(unpacked).assumingMemoryBound(to: ProtobufCMessage.self), nil)
        }
        try self.init(cStruct: unpacked.pointee)
    }

    /// Decodes a message from its protobuf encoding.
    @inlinable
    public init(serializedBytes bytes: some Collection<UInt8>) throws(WireError) {
        let result: Result<Self, WireError>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(WireError) in try Self(serializedBytes: UnsafeRawBufferPointer(buffer)) }
        }
        if let result {
            self = try result.get()
        } else {
            self = try Self(serializedBytes: Array(bytes))
        }
    }

    /// Decodes a message from the readable bytes of `buffer`, leaving the buffer untouched.
    @inlinable
    public init(serializedBytes buffer: ByteBuffer) throws(WireError) {
        let result = buffer.withUnsafeReadableBytes { bytes in
            Result { () throws(WireError) in try Self(serializedBytes: bytes) }
        }
        self = try result.get()
    }
}
