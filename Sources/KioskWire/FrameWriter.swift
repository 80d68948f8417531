import NIOCore

/// Writes ``Frame``s as wire bytes, gathering the frames written between two
/// flushes into one buffer: one write per flush (one iovec for `writev`, one
/// record for TLS to seal) instead of a buffer, a pending write and an iovec
/// per frame. A unary call is two frames each way, so this is most of what
/// a call costs NIO's write path.
///
/// A payload larger than ``passThroughSize`` (a download chunk) is not
/// copied: what was gathered before it and its header are written, then the
/// payload's own buffer (under TLS, a record of its own: sealing is per
/// write).
public final class FrameWriter: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = Frame
    public typealias OutboundOut = ByteBuffer

    /// Payloads larger than this go out in their own buffer instead of being copied.
    public static let passThroughSize = 16 * 1024
    /// The first capacity of a gathering buffer (it grows as frames come).
    static let initialCapacity = 1024

    private var pending: ByteBuffer?
    private var promise: EventLoopPromise<Void>?
    /// The last gathering buffer written: once the channel has written and released it (as a flush
    /// usually does at once), the next frames are gathered into it again instead of a new allocation.
    private var spare: ByteBuffer?
    /// A spare larger than this is let go (a burst's buffer is not kept for the connection's life).
    static let spareLimit = 8 * 1024

    /// Creates a writer.
    public init() {}

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = unwrapOutboundIn(data)
        var buffer: ByteBuffer
        if let gathering = pending {
            buffer = gathering
        } else if var reused = spare {
            spare = nil
            // Unique again once the channel let it go: clear() keeps its storage; else it allocates, as a new buffer would.
            reused.clear()
            buffer = reused
        } else {
            buffer = context.channel.allocator.buffer(capacity: Self.initialCapacity)
        }
        pending = nil  // `buffer` is the only reference: appending does not copy it
        if frame.payload.readableBytes > Self.passThroughSize {
            frame.writeHeader(to: &buffer)
            pending = buffer
            writePending(context: context)
            context.write(wrapOutboundOut(frame.payload), promise: promise)
            return
        }
        frame.write(to: &buffer)
        pending = buffer
        if let promise {
            if let existing = self.promise { existing.futureResult.cascade(to: promise) } else { self.promise = promise }
        }
    }

    public func flush(context: ChannelHandlerContext) {
        writePending(context: context)
        context.flush()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        // Removed with the channel: what was never flushed is not written.
        promise?.fail(ChannelError.ioOnClosedChannel)
        pending = nil
        promise = nil
        spare = nil
    }

    private func writePending(context: ChannelHandlerContext) {
        guard let buffer = pending else { return }
        let promise = self.promise
        pending = nil
        self.promise = nil
        context.write(wrapOutboundOut(buffer), promise: promise)
        if buffer.capacity <= Self.spareLimit { spare = buffer }
    }
}
