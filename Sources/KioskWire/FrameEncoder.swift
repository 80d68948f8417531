import NIOCore

/// Writes ``Frame``s as wire bytes.
public struct FrameEncoder: MessageToByteEncoder {
    public typealias OutboundIn = Frame

    /// Creates an encoder.
    public init() {}

    public func encode(data: Frame, out: inout ByteBuffer) throws {
        data.write(to: &out)
    }
}
