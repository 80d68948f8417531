import KioskWire
import NIOCore

/// Sends the connection preface `KIOSK/1\n` as soon as a client connection is active.
///
/// Sits nearest the socket (after a TLS handler, if any) so the preface goes
/// out before any frame.
final class PrefaceHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive {
            sendPreface(context: context)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendPreface(context: context)
        // Pass the event on before leaving the pipeline: a removed context forwards nothing.
        context.fireChannelActive()
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    private func sendPreface(context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: Frame.preface.count)
        buffer.writeBytes(Frame.preface)
        context.writeAndFlush(NIOAny(buffer), promise: nil)
    }
}
