import KioskWire
import NIOCore

/// Turns messages into MESSAGE payloads and back, compressing with zlib when asked.
struct MessageCodec: Sendable {
    /// Messages smaller than this are never compressed: zlib would not pay for itself.
    static let compressionThreshold = 256

    var maximumMessageSize: Int
    var allocator: ByteBufferAllocator

    /// The payload and flags of a MESSAGE frame carrying `message`.
    func encode(_ message: some WireMessage, compress: Bool) -> (ByteBuffer, FrameFlags) {
        encode(compress: compress) { message.serialize(into: &$0) }
    }

    /// The payload and flags of a MESSAGE frame carrying what `serialize` writes.
    func encode(compress: Bool, _ serialize: (inout ByteBuffer) -> Void) -> (ByteBuffer, FrameFlags) {
        var buffer = allocator.buffer(capacity: 0)
        serialize(&buffer)
        return compressed(buffer, compress: compress)
    }

    /// A message's encoding as a MESSAGE payload: compressed when asked and worth it.
    func compressed(_ buffer: ByteBuffer, compress: Bool) -> (ByteBuffer, FrameFlags) {
        guard compress, buffer.readableBytes >= Self.compressionThreshold else { return (buffer, []) }
        let compressed = Zlib.compress(buffer, allocator: allocator)
        guard compressed.readableBytes < buffer.readableBytes else { return (buffer, []) }
        return (compressed, .compressed)
    }

    /// The payload and flags of a MESSAGE frame carrying `message`, refusing one
    /// the peer would reject as over its size limit.
    /// - Throws: ``RPCError`` RESOURCE_EXHAUSTED.
    func encodeWithinLimit(_ message: some WireMessage, compress: Bool, what: @autoclosure () -> String) throws(RPCError) -> (ByteBuffer, FrameFlags) {
        try encodeWithinLimit(compress: compress, what: what()) { message.serialize(into: &$0) }
    }

    /// ``encodeWithinLimit(_:compress:what:)`` for what `serialize` writes.
    func encodeWithinLimit(compress: Bool, what: @autoclosure () -> String, _ serialize: (inout ByteBuffer) -> Void) throws(RPCError) -> (ByteBuffer, FrameFlags) {
        try withinLimit(encode(compress: compress, serialize), what: what())
    }

    /// The MESSAGE payload and flags for a message's `encoding`, compressed when asked, refusing one over the size limit.
    func framed(_ encoding: ByteBuffer, compress: Bool, what: @autoclosure () -> String) throws(RPCError) -> (ByteBuffer, FrameFlags) {
        try withinLimit(compressed(encoding, compress: compress), what: what())
    }

    private func withinLimit(_ encoded: (ByteBuffer, FrameFlags), what: @autoclosure () -> String) throws(RPCError) -> (ByteBuffer, FrameFlags) {
        let (payload, flags) = encoded
        guard payload.readableBytes <= maximumMessageSize else {
            throw RPCError(.resourceExhausted, "\(what()) of \(payload.readableBytes) bytes exceeds the message size limit of \(maximumMessageSize) bytes", source: .local)
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
