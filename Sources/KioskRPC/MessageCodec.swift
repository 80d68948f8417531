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
        var buffer = allocator.buffer(capacity: 0)
        message.serialize(into: &buffer)
        guard compress, buffer.readableBytes >= Self.compressionThreshold else { return (buffer, []) }
        let compressed = Zlib.compress(buffer, allocator: allocator)
        guard compressed.readableBytes < buffer.readableBytes else { return (buffer, []) }
        return (compressed, .compressed)
    }

    /// The payload and flags of a MESSAGE frame carrying `message`, refusing one
    /// the peer would reject as over its size limit.
    /// - Throws: ``RPCError`` RESOURCE_EXHAUSTED.
    func encodeWithinLimit(_ message: some WireMessage, compress: Bool, what: @autoclosure () -> String) throws(RPCError) -> (ByteBuffer, FrameFlags) {
        let (payload, flags) = encode(message, compress: compress)
        guard payload.readableBytes <= maximumMessageSize else {
            throw RPCError(.resourceExhausted, "\(what()) of \(payload.readableBytes) bytes exceeds the message size limit of \(maximumMessageSize) bytes", source: .local)
        }
        return (payload, flags)
    }

    /// Decodes a MESSAGE payload as `M`, inflating it first when flagged.
    func decode<M: WireMessage>(_ type: M.Type, payload: ByteBuffer, flags: FrameFlags) throws(WireError) -> M {
        if flags.contains(.compressed) {
            let inflated = try Zlib.decompress(payload, limit: maximumMessageSize, allocator: allocator)
            return try M(serializedBytes: inflated)
        }
        return try M(serializedBytes: payload)
    }
}
