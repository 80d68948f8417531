import NIOCore

/// Splits a byte stream into ``Frame``s, checking the preface first when it
/// decodes a server's inbound side.
///
/// A LENGTH above the limit throws ``WireError/Code/frameTooLarge`` as soon as
/// the 4 LENGTH bytes are read: no buffer of that size is ever allocated. The
/// handler that sees the error answers GOAWAY(8) and closes.
public struct FrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = Frame

    private enum State {
        case awaitingPreface
        case frames
    }

    private var state: State
    /// The largest payload accepted, in bytes.
    public let maximumPayloadSize: Int

    /// Creates a decoder.
    /// - Parameters:
    ///   - expectPreface: true on a server: the first 8 bytes must be `KIOSK/1\n`.
    ///   - maximumPayloadSize: the largest payload accepted.
    public init(expectPreface: Bool, maximumPayloadSize: Int = Frame.defaultMaximumPayloadSize) {
        self.state = expectPreface ? .awaitingPreface : .frames
        self.maximumPayloadSize = maximumPayloadSize
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        switch state {
        case .awaitingPreface:
            let needed = Frame.preface.count
            let available = min(buffer.readableBytes, needed)
            // Reject as soon as a byte differs, not only once all 8 arrived.
            guard buffer.readableBytesView.prefix(available).elementsEqual(Frame.preface.prefix(available)) else {
                throw WireError(.badPreface, "connection did not start with the preface KIOSK/1\\n")
            }
            guard available == needed else { return .needMoreData }
            buffer.moveReaderIndex(forwardBy: needed)
            state = .frames
            return .continue
        case .frames:
            guard let frame = try Self.readFrame(from: &buffer, maximumPayloadSize: maximumPayloadSize) else {
                return .needMoreData
            }
            context.fireChannelRead(Self.wrapInboundOut(frame))
            return .continue
        }
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        // Leftover bytes at EOF are a truncated frame; the connection is gone anyway.
        return .needMoreData
    }

    /// Reads one frame from `buffer` if it is complete; validates LENGTH before waiting for the payload.
    public static func readFrame(from buffer: inout ByteBuffer, maximumPayloadSize: Int) throws(WireError) -> Frame? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, endianness: .big, as: UInt32.self) else {
            return nil
        }
        guard length >= Frame.lengthOverhead else {
            throw WireError(.frameTooShort, "frame LENGTH \(length) is below the minimum of \(Frame.lengthOverhead)")
        }
        let payloadSize = Int(length) - Frame.lengthOverhead
        guard payloadSize <= maximumPayloadSize else {
            throw WireError(.frameTooLarge, "frame payload of \(payloadSize) bytes exceeds the limit of \(maximumPayloadSize) bytes")
        }
        guard buffer.readableBytes >= 4 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 4)
        // The guards above make these reads infallible.
        let type = buffer.readInteger(as: UInt8.self) ?? 0
        let flags = buffer.readInteger(as: UInt8.self) ?? 0
        let callID = buffer.readInteger(endianness: .big, as: UInt32.self) ?? 0
        let payload = buffer.readSlice(length: payloadSize) ?? ByteBuffer()
        return Frame(type: FrameType(rawValue: type), flags: FrameFlags(rawValue: flags), callID: callID, payload: payload)
    }
}
