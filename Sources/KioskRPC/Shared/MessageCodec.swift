import KioskWire
import NIOCore

/// A message serialized once, to be sent or answered many times over without
/// encoding it again: a server's constant answer (``InlineAnswer/encoded(_:)``,
/// such as an access granted), a request a client sends again and again
/// (`RPCClient.unary(_:encoded:response:options:completion:)`). Each use
/// costs a reference instead of an encoding.
public struct EncodedMessage<Message: WireMessage>: Sendable {
    @usableFromInline
    let bytes: ByteBuffer

    /// `message`, serialized now.
    public init(_ message: Message) {
        var bytes = ByteBuffer()
        message.serialize(into: &bytes)
        self.bytes = bytes
    }

    /// A message's encoding as received, not decoded yet (the response of the
    /// ``RPCClient`` `unary` that takes `response: EncodedMessage<Response>.self`).
    @usableFromInline
    init(bytes: ByteBuffer) {
        self.bytes = bytes
    }

    /// The message, decoded now.
    /// - Throws: `WireError` `malformedMessage` when the bytes are not a valid `Message`.
    public func decoded() throws(WireError) -> Message {
        try Message(serializedBytes: bytes)
    }
}

/// Turns messages into MESSAGE payloads and back, compressing with zlib when asked.
struct MessageCodec: Sendable {
    /// Messages smaller than this are never compressed: zlib would not pay for itself.
    static let compressionThreshold = 256

    var maximumMessageSize: Int
    var allocator: ByteBufferAllocator

    /// A message's encoding: what `serialize` writes into a new buffer.
    func encoding(_ serialize: (inout ByteBuffer) -> Void) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: 0)
        serialize(&buffer)
        return buffer
    }

    /// The payload and flags of a MESSAGE frame carrying `message`, refusing one
    /// the peer would reject as over its size limit.
    /// - Throws: ``RPCError`` RESOURCE_EXHAUSTED.
    func encodeWithinLimit(
        _ message: some WireMessage, compress: Bool, what: @autoclosure () -> String
    ) throws(RPCError) -> (ByteBuffer, FrameFlags) {
        try framed(encoding { message.serialize(into: &$0) }, compress: compress, what: what())
    }

    /// The MESSAGE payload and flags for a message's `encoding`: compressed when
    /// asked and worth it, refusing one over the size limit.
    /// - Throws: ``RPCError`` RESOURCE_EXHAUSTED.
    func framed(
        _ encoding: ByteBuffer, compress: Bool, what: @autoclosure () -> String
    ) throws(RPCError) -> (ByteBuffer, FrameFlags) {
        var (payload, flags) = (encoding, FrameFlags())
        if compress, encoding.readableBytes >= Self.compressionThreshold {
            let compressed = Zlib.compress(encoding, allocator: allocator)
            if compressed.readableBytes < encoding.readableBytes { (payload, flags) = (compressed, .compressed) }
        }
        guard payload.readableBytes <= maximumMessageSize else {
            throw RPCError(
                .resourceExhausted,
                "\(what()) of \(payload.readableBytes) bytes exceeds the message size limit of \(maximumMessageSize) bytes",
                source: .local)
        }
        return (payload, flags)
    }

    /// A MESSAGE payload's message bytes: inflated when flagged compressed (up to the size limit).
    func inflated(_ payload: ByteBuffer, flags: FrameFlags) throws(WireError) -> ByteBuffer {
        guard flags.contains(.compressed) else { return payload }
        return try Zlib.decompress(payload, limit: maximumMessageSize, allocator: allocator)
    }

    /// Decodes a MESSAGE payload as `M`, inflating it first when flagged.
    func decode<M: WireMessage>(_ type: M.Type, payload: ByteBuffer, flags: FrameFlags) throws(WireError) -> M {
        try M(serializedBytes: inflated(payload, flags: flags))
    }
}
