import NIOCore

/// Writes ``Frame``s as wire bytes, gathering the frames written between two
/// flushes into one buffer: one write per flush (one iovec for `writev`, one
/// record for TLS to seal) instead of a buffer, a pending write and an iovec
/// per frame. A unary call is two frames each way: each side's pair leaves
/// in one write.
///
/// A payload larger than ``passThroughSize`` (a download chunk) is not
/// copied: what was gathered before it and its header are written, then the
/// payload's own buffer (under TLS, a record of its own: sealing is per
/// write).
public final class FrameWriter: ChannelOutboundHandler, RemovableChannelHandler {
    public typealias OutboundIn = Frame
    public typealias OutboundOut = ByteBuffer

    /// Payloads larger than this go out in their own buffer instead of being copied.
    public static let passThroughSize = FrameGatherer.passThroughSize

    /// The gathering, the one the connection handlers write through.
    private final class Writer: GatheringFrameWriter {
        var gatherer = FrameGatherer()
        var context: ChannelHandlerContext?
    }

    private let writer = Writer()

    /// Creates a writer.
    public init() {}

    public func handlerAdded(context: ChannelHandlerContext) {
        writer.context = context
    }

    public func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        writer.writeFrame(unwrapOutboundIn(data), promise: promise)
    }

    public func flush(context: ChannelHandlerContext) {
        writer.flushGathered()
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        // Removed with the channel: what was never flushed is not written.
        writer.gatherer.discard()
        writer.context = nil
    }
}

/// A handler that writes its frames itself, through a ``FrameGatherer``: the
/// frames written between two flushes leave as one buffer, without a handler
/// hop per frame (the connection handlers of KioskRPC, and ``FrameWriter``).
public protocol GatheringFrameWriter: AnyObject {
    /// The frames written since the last flush.
    var gatherer: FrameGatherer { get set }
    /// The handler's context while it is in a pipeline (the frames go to the handler before it).
    var context: ChannelHandlerContext? { get }
}

// Inlinable: the per-frame path is specialised in the connection handlers' own module (KioskRPC).
extension GatheringFrameWriter {
    /// Gathers `frame` for the next flush (a payload over 16 KiB goes to the channel at once, uncopied).
    @inlinable
    public func writeFrame(_ frame: Frame, promise: EventLoopPromise<Void>?) {
        guard let context else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        if let passing = gatherer.add(frame, promise: promise, allocator: context.channel.allocator) {
            handOut(context)
            context.write(NIOAny(passing.payload), promise: passing.promise)
        } else if gatherer.isFull {
            // Many answers in one read: the channel counts them against its high-water mark from here.
            handOut(context)
        }
    }

    /// Writes what was gathered and flushes the channel.
    @inlinable
    public func flushGathered() {
        guard let context else { return }
        handOut(context)
        context.flush()
    }

    /// Gives the channel what was gathered (outside the gatherer's access: NIO may call us back from `write`).
    @inlinable
    func handOut(_ context: ChannelHandlerContext) {
        guard let (bytes, promise) = gatherer.take() else { return }
        context.write(NIOAny(bytes), promise: promise)
    }
}

/// The gathering of ``FrameWriter``, for a handler that writes its frames
/// itself: frames are encoded into one buffer until the handler takes it
/// (``take()``, at a flush, or once ``isFull``); a payload larger than
/// ``passThroughSize`` is not copied: ``add(_:promise:allocator:)`` returns
/// it, to be written after what was gathered before it (with its header).
///
/// The gatherer never calls out: the caller writes what it takes after the
/// gatherer's access ends, so a handler that NIO calls back from inside
/// `context.write` (writability, a failed promise) may gather again.
public struct FrameGatherer {
    /// Payloads larger than this go out in their own buffer instead of being copied.
    public static let passThroughSize = 16 * 1024
    /// Gathered bytes at which the buffer is best handed to the channel before the flush,
    /// so that the channel's high-water mark sees them (a peer that never reads cannot make
    /// one read's answers pile up here, out of the back-pressure's sight).
    public static let handOutSize = 8 * 1024
    /// The first capacity of a gathering buffer (it grows as frames come).
    static let initialCapacity = 1024
    /// A spare larger than this is let go (a burst's buffer is not kept for the connection's life).
    static let spareLimit = 8 * 1024

    private var pending: ByteBuffer?
    private var promise: EventLoopPromise<Void>?
    /// The last gathering buffer written: once the channel has written and released it (as a flush
    /// usually does at once), the next frames are gathered into it again instead of a new allocation.
    private var spare: ByteBuffer?

    /// Creates an empty gatherer.
    public init() {}

    /// True once ``handOutSize`` bytes or more are gathered.
    public var isFull: Bool { (pending?.readableBytes ?? 0) >= Self.handOutSize }

    /// Adds `frame` (completing `promise` once it is written). When the
    /// frame's payload passes through, only its header is gathered and the
    /// payload is returned with the promise: write what ``take()`` gives,
    /// then it. `allocator` is asked only when a new buffer is needed (a channel's allocator is behind an existential
    /// and an event-loop check: the usual frame reuses the last buffer instead).
    public mutating func add(
        _ frame: Frame, promise: EventLoopPromise<Void>?, allocator: @autoclosure () -> ByteBufferAllocator
    )
        -> (payload: ByteBuffer, promise: EventLoopPromise<Void>?)?
    {
        var buffer: ByteBuffer
        if let gathering = pending {
            buffer = gathering
        } else if var reused = spare {
            spare = nil
            // Unique again once the channel let it go: clear() keeps its storage; else it allocates, as a new buffer would.
            reused.clear()
            buffer = reused
        } else {
            buffer = allocator().buffer(capacity: Self.initialCapacity)
        }
        pending = nil  // `buffer` is the only reference: appending does not copy it
        if frame.payload.readableBytes > Self.passThroughSize {
            frame.writeHeader(to: &buffer)
            pending = buffer
            return (frame.payload, promise)
        }
        frame.write(to: &buffer)
        pending = buffer
        if let promise {
            if let existing = self.promise {
                existing.futureResult.cascade(to: promise)
            } else {
                self.promise = promise
            }
        }
        return nil
    }

    /// What was gathered, if anything, with the promise to complete once it is written.
    public mutating func take() -> (bytes: ByteBuffer, promise: EventLoopPromise<Void>?)? {
        guard let buffer = pending else { return nil }
        let promise = self.promise
        pending = nil
        self.promise = nil
        if buffer.capacity <= Self.spareLimit { spare = buffer }
        return (buffer, promise)
    }

    /// Drops what was gathered (the channel is gone): its promises fail.
    public mutating func discard() {
        promise?.fail(ChannelError.ioOnClosedChannel)
        pending = nil
        promise = nil
        spare = nil
    }
}
