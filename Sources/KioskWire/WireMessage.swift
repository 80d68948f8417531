import CProtobufC
import NIOCore

/// A Swift value type bridged to one protoc-c generated message.
///
/// Encoding builds the C struct in a ``CArena`` and packs it with
/// `protobuf_c_message_pack`; decoding unpacks with `protobuf_c_message_unpack`
/// into a bump allocator over a stack buffer (``decodingArenaSize`` bytes; what
/// does not fit is malloc'd and freed), copies every field into Swift values
/// and frees the C message exactly once. No C pointer outlives the call that
/// made it.
///
/// Bridging a new message takes the four obvious members:
///
/// ```swift
/// extension Ping: WireMessage {
///     public typealias CStruct = Kiosk__Rpc__V1__Ping
///     public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__ping__init(c) }
///     public init(cStruct c: CStruct) throws(WireError) { self.init(opaque: c.opaque) }
///     public func fill(_ c: inout CStruct, arena: CArena) { c.opaque = opaque }
/// }
/// ```
public protocol WireMessage: Sendable {
    /// The protoc-c struct of the message.
    associatedtype CStruct

    /// Initialises a C struct to the message's defaults, descriptor included (the generated `…__init`):
    /// decoding reads the descriptor from it.
    static func cInit(_ c: UnsafeMutablePointer<CStruct>)
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
        // Typed throws all the way down: the message is returned by moving it, not copied out of a
        // `Result` (which would retain every string and array of it, then release them with the Result).
        self = try Self.withUnpacked(bytes) { c throws(WireError) -> Self in try Self(cStruct: c) }
    }

    /// Unpacks `bytes` with protobuf-c and hands `body` the C struct, read in
    /// place: its strings and `bytes` fields point into a temporary arena and
    /// are valid only inside `body`. For a reader that needs a few fields and
    /// no Swift copy of the others (``CField/view(_:)`` reads a `bytes` field).
    ///
    /// - Throws: ``WireError`` with code `malformedMessage` when the bytes are not a valid message, or what `body` throws.
    @inlinable
    public static func withUnpacked<Result>(
        _ bytes: UnsafeRawBufferPointer, _ body: (borrowing CStruct) throws(WireError) -> Result
    ) throws(WireError) -> Result {
        // The message's descriptor, from a defaults-initialised struct (the generated `…__init` sets it).
        let descriptor = withUnsafeTemporaryAllocation(of: CStruct.self, capacity: 1) { c in
            Self.cInit(c.baseAddress!)
            return UnsafeRawPointer(c.baseAddress!).assumingMemoryBound(to: ProtobufCMessage.self).pointee.descriptor
        }
        return try withUnsafeTemporaryAllocation(byteCount: decodingArenaSize, alignment: 16) {
            space throws(WireError) -> Result in
            var arena = KioskUnpackArena()
            return try withUnsafeMutablePointer(to: &arena) { arena throws(WireError) -> Result in
                // Initialised through this pointer: the arena keeps its own address (allocator_data).
                kiosk_unpack_arena_init(arena, space.baseAddress, space.count)
                let allocator = UnsafeMutableRawPointer(arena).assumingMemoryBound(to: ProtobufCAllocator.self)
                var placeholder: UInt8 = 0
                let unpacked = withUnsafePointer(to: &placeholder) { placeholder in
                    protobuf_c_message_unpack(
                        descriptor, allocator, bytes.count,
                        bytes.baseAddress.map { $0.assumingMemoryBound(to: UInt8.self) } ?? placeholder)
                }
                guard let unpacked else {
                    throw WireError(.malformedMessage, "\(bytes.count) bytes are not a valid \(Self.self) message")
                }
                defer { protobuf_c_message_free_unpacked(unpacked, allocator) }
                return try body(UnsafeRawPointer(unpacked).assumingMemoryBound(to: CStruct.self).pointee)
            }
        }
    }

    @inlinable
    public init(serializedBytes bytes: some Collection<UInt8>) throws(WireError) {
        let decoded: Self?
        do {
            decoded = try bytes.withContiguousStorageIfAvailable { buffer throws(WireError) -> Self in
                try Self(serializedBytes: UnsafeRawBufferPointer(buffer))
            }
        } catch {
            throw Self.wireError(error)
        }
        if let decoded {
            self = decoded
        } else {
            self = try Self(serializedBytes: Array(bytes))
        }
    }

    /// Decodes a message from the readable bytes of `buffer`, leaving the buffer untouched.
    @inlinable
    public init(serializedBytes buffer: ByteBuffer) throws(WireError) {
        do {
            self = try buffer.withUnsafeReadableBytes { bytes throws(WireError) -> Self in
                try Self(serializedBytes: bytes)
            }
        } catch {
            throw Self.wireError(error)
        }
    }

    /// The error a decoding body threw through an untyped `rethrows` (always a ``WireError``).
    @inlinable
    static func wireError(_ error: any Error) -> WireError {
        error as? WireError ?? WireError(.malformedMessage, "\(error)")
    }
}

/// Bytes of stack a decode carves the C message out of (its struct, strings
/// and bytes fields); a message needing more takes the rest from malloc.
/// At most 1 KiB: larger temporary allocations make Swift check the thread's
/// stack bounds at run time on every call.
public let decodingArenaSize = 1024
