import NIOCore

/// Splits a byte stream into ``Frame``s, checking the preface first when it
/// decodes a server's inbound side.
///
/// Every frame's LENGTH is checked against its TYPE's limit (``FrameLimits``)
/// as soon as the 4 LENGTH bytes and the TYPE byte are read, so no buffer
/// beyond the limit is ever allocated: a too-large frame throws
/// ``WireError/Code/frameTooLarge`` and the handler that sees it answers
/// GOAWAY(8) and closes.
public struct FrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = Frame

    /// Fired (as a user inbound event) once the preface has been read, on a
    /// server's side: the connection's handshake is done.
    public struct PrefaceReceived: Sendable, Hashable {
        /// Creates the event.
        public init() {}
    }

    private enum State {
        case awaitingPreface
        case frames
    }

    private var state: State
    /// The largest payload accepted for each frame type.
    public let limits: FrameLimits
    /// The largest MESSAGE payload accepted, in bytes.
    public var maximumPayloadSize: Int { limits.maximumMessageSize }

    /// Creates a decoder.
    /// - Parameters:
    ///   - expectPreface: true on a server: the first 8 bytes must be `KIOSK/1\n`.
    ///   - limits: the largest payload accepted per frame type.
    public init(expectPreface: Bool, limits: FrameLimits) {
        self.state = expectPreface ? .awaitingPreface : .frames
        self.limits = limits
    }

    /// Creates a decoder whose MESSAGE (and unknown-type) frames may carry up
    /// to `maximumPayloadSize` bytes, with the default limits for the others.
    public init(expectPreface: Bool, maximumPayloadSize: Int = Frame.defaultMaximumPayloadSize) {
        self.init(expectPreface: expectPreface, limits: FrameLimits(maximumMessageSize: maximumPayloadSize))
    }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        switch state {
        case .awaitingPreface:
            guard try Self.readPreface(from: &buffer) else { return .needMoreData }
            state = .frames
            context.fireUserInboundEventTriggered(PrefaceReceived())
            return .continue
        case .frames:
            guard let frame = try Self.readFrame(from: &buffer, limits: limits) else {
                return .needMoreData
            }
            context.fireChannelRead(Self.wrapInboundOut(frame))
            return .continue
        }
    }

    public mutating func decodeLast(
        context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool
    ) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        // Leftover bytes at EOF are a truncated frame; the connection is gone anyway.
        return .needMoreData
    }

    /// Reads the 8-byte preface from `buffer`: true once it has been read,
    /// false while it is incomplete; throws as soon as a byte differs.
    public static func readPreface(from buffer: inout ByteBuffer) throws(WireError) -> Bool {
        let needed = Frame.preface.count
        let available = min(buffer.readableBytes, needed)
        // Reject as soon as a byte differs, not only once all 8 arrived.
        guard buffer.readableBytesView.prefix(available).elementsEqual(Frame.preface.prefix(available)) else {
            throw WireError(.badPreface, "connection did not start with the preface KIOSK/1\\n")
        }
        guard available == needed else { return false }
        buffer.moveReaderIndex(forwardBy: needed)
        return true
    }

    /// Reads one frame from `buffer` if it is complete, allowing any type up
    /// to `maximumPayloadSize` bytes; validates LENGTH before waiting for the payload.
    public static func readFrame(from buffer: inout ByteBuffer, maximumPayloadSize: Int) throws(WireError) -> Frame? {
        try readFrame(from: &buffer, limits: FrameLimits(uniform: maximumPayloadSize))
    }

    /// Reads one frame from `buffer` if it is complete; validates LENGTH
    /// against the TYPE's limit before waiting for the payload.
    public static func readFrame(from buffer: inout ByteBuffer, limits: FrameLimits) throws(WireError) -> Frame? {
        let start = buffer.readerIndex
        guard let length = buffer.getInteger(at: start, endianness: .big, as: UInt32.self) else {
            return nil
        }
        guard length >= Frame.lengthOverhead else {
            throw WireError(.frameTooShort, "frame LENGTH \(length) is below the minimum of \(Frame.lengthOverhead)")
        }
        let payloadSize = Int(length) - Frame.lengthOverhead
        if payloadSize > limits.maximumMessageSize {
            throw WireError(
                .frameTooLarge,
                "frame payload of \(payloadSize) bytes exceeds the limit of \(limits.maximumMessageSize) bytes")
        }
        // The TYPE byte follows LENGTH: per-type limits are checked as soon as it is here.
        guard let typeByte = buffer.getInteger(at: start + 4, as: UInt8.self) else { return nil }
        let type = FrameType(rawValue: typeByte)
        let limit = limits.maximumPayloadSize(of: type)
        guard payloadSize <= limit else {
            throw WireError(
                .frameTooLarge, "\(type) payload of \(payloadSize) bytes exceeds the limit of \(limit) bytes")
        }
        guard buffer.readableBytes >= 4 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 5)
        // The guards above make these reads infallible.
        let flags = buffer.readInteger(as: UInt8.self) ?? 0
        let callID = buffer.readInteger(endianness: .big, as: UInt32.self) ?? 0
        let payload = buffer.readSlice(length: payloadSize) ?? ByteBuffer()
        return Frame(type: type, flags: FrameFlags(rawValue: flags), callID: callID, payload: payload)
    }
}

/// The largest payload a peer may send in each type of frame. Checked from a
/// frame's first 5 bytes, before its payload is buffered.
public struct FrameLimits: Hashable, Sendable {
    /// MESSAGE frames (and frames of unknown type): 4 MiB by default.
    public var maximumMessageSize: Int
    /// HEADERS, TRAILERS and GOAWAY: a call's method and metadata, or a status
    /// and its message. 16 KiB by default.
    public var maximumHeadersSize: Int
    /// PING, PONG, WINDOW_UPDATE and CANCEL: an encoded `Ping{opaque}` (an
    /// 8-byte value) takes at most 11 bytes, so 16 by default.
    public var maximumControlSize: Int

    /// The default HEADERS / TRAILERS / GOAWAY limit: 16 KiB.
    public static let defaultMaximumHeadersSize = 16 * 1024
    /// The default PING / PONG / WINDOW_UPDATE / CANCEL limit: 16 bytes.
    public static let defaultMaximumControlSize = 16

    /// Creates limits; see the properties for the defaults.
    public init(
        maximumMessageSize: Int = Frame.defaultMaximumPayloadSize,
        maximumHeadersSize: Int = FrameLimits.defaultMaximumHeadersSize,
        maximumControlSize: Int = FrameLimits.defaultMaximumControlSize
    ) {
        self.maximumMessageSize = maximumMessageSize
        self.maximumHeadersSize = maximumHeadersSize
        self.maximumControlSize = maximumControlSize
    }

    /// The same limit for every type (for tools that read frames of any kind).
    public init(uniform limit: Int) {
        self.init(maximumMessageSize: limit, maximumHeadersSize: limit, maximumControlSize: limit)
    }

    /// The largest payload of a frame of `type`.
    public func maximumPayloadSize(of type: FrameType) -> Int {
        switch type {
        case .headers, .trailers, .goAway: min(maximumHeadersSize, maximumMessageSize)
        case .ping, .pong, .windowUpdate, .cancel: min(maximumControlSize, maximumMessageSize)
        default: maximumMessageSize
        }
    }
}
