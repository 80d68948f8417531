import KioskWire
import NIOCore

/// A connection handler that writes its frames itself, through a
/// ``FrameGatherer``: the frames written between two flushes leave as one
/// buffer, without a handler hop per frame.
protocol GatheringFrameWriter: AnyObject {
    /// The frames written since the last flush.
    var gatherer: FrameGatherer { get set }
    /// The handler's context while it is in a pipeline.
    var context: ChannelHandlerContext? { get }
}

extension GatheringFrameWriter {
    /// Gathers `frame` for the next flush (a payload over 16 KiB goes to the channel at once, uncopied).
    func writeFrame(_ frame: Frame, promise: EventLoopPromise<Void>?) {
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
    func flushGathered() {
        guard let context else { return }
        handOut(context)
        context.flush()
    }

    /// Gives the channel what was gathered (outside the gatherer's access: NIO may call us back from `write`).
    private func handOut(_ context: ChannelHandlerContext) {
        guard let (bytes, promise) = gatherer.take() else { return }
        context.write(NIOAny(bytes), promise: promise)
    }
}
