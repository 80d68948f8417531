import NIOCore

/// Splits the bytes a connection reads into ``Frame``s inside the handler
/// that serves them: the same checks as ``FrameDecoder`` (the preface first
/// on a server's side, every LENGTH against its TYPE's limit before the
/// payload is waited for), without a `ByteToMessageHandler` in front of the
/// handler — no generic decoding loop, no `NIOAny` box and no pipeline hop
/// per frame (a unary call is two frames each way).
///
/// A frame's payload is a slice of the bytes read (never copied); bytes of an
/// incomplete frame are kept until the rest arrives.
public struct FrameReader {
    /// What ``next()`` found.
    public enum Event: Equatable {
        /// The 8-byte preface (a server's side only), once.
        case preface
        /// A complete frame.
        case frame(Frame)
    }

    private var buffer = Self.empty
    /// One shared empty buffer: an idle reader holds no storage of its own.
    private static let empty = ByteBuffer()
    private var awaitingPreface: Bool
    /// Set once a read failed: the stream cannot be framed any more, later bytes are dropped.
    private var failed = false
    /// The largest payload accepted for each frame type.
    public let limits: FrameLimits

    /// Creates a reader.
    /// - Parameters:
    ///   - expectPreface: true on a server: the first 8 bytes must be `KIOSK/1\n`.
    ///   - limits: the largest payload accepted per frame type.
    public init(expectPreface: Bool, limits: FrameLimits) {
        self.awaitingPreface = expectPreface
        self.limits = limits
    }

    /// Bytes read and not yet returned as frames (an incomplete frame).
    public var bufferedBytes: Int { buffer.readableBytes }

    /// The capacity of the storage the reader holds: 0 once every byte read was framed.
    public var heldCapacity: Int { buffer.capacity }

    /// Adds bytes read from the connection.
    public mutating func append(_ bytes: ByteBuffer) {
        guard !failed else { return }
        if buffer.readableBytes == 0 {
            // The usual case (a read ends on a frame boundary): no copy at all.
            buffer = bytes
        } else {
            // Keeps only the incomplete frame's bytes, not those of the frames already returned.
            buffer.discardReadBytes()
            buffer.writeImmutableBuffer(bytes)
        }
    }

    /// The next preface or complete frame, nil until more bytes arrive.
    /// Throws ``WireError`` (bad preface, a frame too short or too large for
    /// its type); after a throw it returns nil for good.
    public mutating func next() throws(WireError) -> Event? {
        guard !failed else { return nil }
        do {
            if awaitingPreface {
                guard try FrameDecoder.readPreface(from: &buffer) else { return nil }
                awaitingPreface = false
                return .preface
            }
            guard let frame = try FrameDecoder.readFrame(from: &buffer, limits: limits) else {
                // Every byte read was framed: let the read's buffer go (up to 64 KiB, and the
                // connection may stay idle for minutes) instead of holding it until the next read.
                if buffer.readableBytes == 0 { buffer = Self.empty }
                return nil
            }
            return .frame(frame)
        } catch {
            failed = true
            buffer = Self.empty
            throw error
        }
    }
}
