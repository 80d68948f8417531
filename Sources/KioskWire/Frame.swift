import NIOCore

/// The TYPE byte of a frame. Open: unknown types are carried, and ignored by peers.
public struct FrameType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Client opens a call; payload ``CallHeaders``.
    public static let headers = FrameType(rawValue: 1)
    /// A request or response message.
    public static let message = FrameType(rawValue: 2)
    /// Server ends a call; payload ``CallStatus``.
    public static let trailers = FrameType(rawValue: 3)
    /// Client abandons a call; empty payload.
    public static let cancel = FrameType(rawValue: 4)
    /// Keepalive probe on call 0; payload ``Ping``.
    public static let ping = FrameType(rawValue: 5)
    /// Echo of a PING; payload ``Ping``.
    public static let pong = FrameType(rawValue: 6)
    /// No new calls above a call id; payload ``GoAway``.
    public static let goAway = FrameType(rawValue: 7)
    /// More MESSAGE payload bytes for a call; payload ``WindowUpdate``.
    public static let windowUpdate = FrameType(rawValue: 8)

    public var description: String {
        switch self {
        case .headers: "HEADERS"
        case .message: "MESSAGE"
        case .trailers: "TRAILERS"
        case .cancel: "CANCEL"
        case .ping: "PING"
        case .pong: "PONG"
        case .goAway: "GOAWAY"
        case .windowUpdate: "WINDOW_UPDATE"
        default: "TYPE(\(rawValue))"
        }
    }
}

/// The FLAGS byte of a frame.
public struct FrameFlags: OptionSet, Hashable, Sendable {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// On MESSAGE: the sender's last message on this call.
    public static let endStream = FrameFlags(rawValue: 0x01)
    /// On MESSAGE: the payload is a zlib stream of the message.
    public static let compressed = FrameFlags(rawValue: 0x02)
}

/// One frame of the Kiosk wire protocol.
///
/// ```
/// offset 0   u32 big-endian  LENGTH   bytes that follow this field (= 6 + payload)
/// offset 4   u8              TYPE
/// offset 5   u8              FLAGS
/// offset 6   u32 big-endian  CALL_ID  0 = the connection itself
/// offset 10  payload
/// ```
public struct Frame: Sendable, Hashable {
    /// Bytes in the header before the payload.
    public static let headerSize = 10
    /// Bytes counted by LENGTH besides the payload (TYPE, FLAGS, CALL_ID).
    public static let lengthOverhead = 6
    /// The connection preface a client sends first: `KIOSK/1\n`.
    public static let preface: [UInt8] = Array("KIOSK/1\n".utf8)
    /// The default largest payload: 4 MiB.
    public static let defaultMaximumPayloadSize = 4 * 1024 * 1024

    /// The frame type.
    public var type: FrameType
    /// The flags.
    public var flags: FrameFlags
    /// The call the frame belongs to; 0 is the connection itself.
    public var callID: UInt32
    /// The payload bytes, exactly as on the wire.
    public var payload: ByteBuffer

    /// Creates a frame.
    public init(type: FrameType, flags: FrameFlags = [], callID: UInt32, payload: ByteBuffer = ByteBuffer()) {
        self.type = type
        self.flags = flags
        self.callID = callID
        self.payload = payload
    }

    /// Creates a frame whose payload is the encoding of `message`.
    @inlinable
    public init(
        type: FrameType, flags: FrameFlags = [], callID: UInt32, message: some WireMessage,
        allocator: ByteBufferAllocator = ByteBufferAllocator()
    ) {
        var buffer = allocator.buffer(capacity: 0)
        message.serialize(into: &buffer)
        self.init(type: type, flags: flags, callID: callID, payload: buffer)
    }

    /// Decodes the payload as `M`.
    @inlinable
    public func decode<M: WireMessage>(_ type: M.Type) throws(WireError) -> M {
        try M(serializedBytes: payload)
    }

    /// Appends the frame's wire bytes to `buffer`.
    public func write(to buffer: inout ByteBuffer) {
        buffer.reserveCapacity(minimumWritableBytes: Frame.headerSize + payload.readableBytes)
        writeHeader(to: &buffer)
        buffer.writeImmutableBuffer(payload)
    }

    /// Appends the frame's header (the 10 bytes before the payload) to `buffer`.
    public func writeHeader(to buffer: inout ByteBuffer) {
        buffer.writeMultipleIntegers(
            UInt32(Frame.lengthOverhead + payload.readableBytes), type.rawValue, flags.rawValue, callID,
            endianness: .big)
    }
}
