import KioskWire
import NIOCore

/// Thrown into the pipeline when the peer stops answering PINGs.
struct KeepaliveTimeoutError: Error, CustomStringConvertible {
    var timeout: Duration
    var description: String { "peer did not answer PING within \(timeout)" }
}

/// When configured, pings the peer and closes the connection if it stops
/// answering.
///
/// Sits behind the connection handler, which passes it the PONG frames it
/// reads (and answers PINGs itself, so its state machine can police them);
/// its PINGs go out through the connection handler's writer.
final class KeepaliveHandler: ChannelDuplexHandler {
    typealias InboundIn = Frame
    typealias InboundOut = Frame
    typealias OutboundIn = Frame
    typealias OutboundOut = Frame

    private let configuration: Keepalive?
    private var state = KeepaliveState()
    private var intervalTask: RepeatedTask?
    private var timeoutTask: Scheduled<Void>?

    init(configuration: Keepalive?) {
        self.configuration = configuration
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    private func start(context: ChannelHandlerContext) {
        guard let configuration, intervalTask == nil else { return }
        let interval = TimeAmount(configuration.interval)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        intervalTask = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            let (handler, context) = loopBound.value
            handler.intervalElapsed(context: context)
        }
    }

    private func stop() {
        intervalTask?.cancel()
        intervalTask = nil
        timeoutTask?.cancel()
        timeoutTask = nil
    }

    private func intervalElapsed(context: ChannelHandlerContext) {
        guard let configuration, case .sendPing(let opaque) = state.intervalElapsed() else { return }
        let frame = Frame(type: .ping, callID: 0, message: Ping(opaque: opaque), allocator: context.channel.allocator)
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timeoutTask = context.eventLoop.scheduleTask(in: TimeAmount(configuration.timeout)) {
            let (handler, context) = loopBound.value
            guard handler.state.timeoutElapsed(opaque: opaque) == .peerUnresponsive else { return }
            handler.stop()
            // From the pipeline's head, so that the connection handler in front of this one sees it.
            context.pipeline.fireErrorCaught(KeepaliveTimeoutError(timeout: configuration.timeout))
            context.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.type {
        case .pong:
            if let ping = try? frame.decode(Ping.self), state.pongReceived(opaque: ping.opaque) {
                timeoutTask?.cancel()
                timeoutTask = nil
            }
        default:
            context.fireChannelRead(data)
        }
    }
}
