import KioskWire
import Logging
import NIOCore

/// Serves the calls of one connection: opens them on HEADERS, routes MESSAGE,
/// CANCEL and WINDOW_UPDATE frames to them, and enforces the protocol's
/// connection rules (GOAWAY and close on a breach).
final class ServerConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = Frame
    typealias OutboundOut = Frame

    private enum State {
        case active
        /// GOAWAY sent: calls up to `lastCallID` finish, later ones are refused.
        case draining(lastCallID: UInt32)
        case closed
    }

    private let router: RPCRouter
    private let maximumMessageSize: Int
    private let logger: Logger
    private var context: ChannelHandlerContext?
    private var codec: MessageCodec?
    private var remoteAddress = "unknown"
    private var calls: [UInt32: ServerCall] = [:]
    private var highestCallID: UInt32 = 0
    private var state = State.active

    private let shutdown: ShutdownFlag
    private let runsHandlersOnEventLoop: Bool
    private var executor: EventLoopTaskExecutor?

    init(router: RPCRouter, maximumMessageSize: Int, logger: Logger, shutdown: ShutdownFlag, runsHandlersOnEventLoop: Bool) {
        self.shutdown = shutdown
        self.runsHandlersOnEventLoop = runsHandlersOnEventLoop
        self.router = router
        self.maximumMessageSize = maximumMessageSize
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.codec = MessageCodec(maximumMessageSize: maximumMessageSize, allocator: context.channel.allocator)
        if runsHandlersOnEventLoop { executor = EventLoopTaskExecutor(context.eventLoop) }
        if let address = context.channel.remoteAddress {
            remoteAddress = "\(address.ipAddress ?? "?"):\(address.port ?? 0)"
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        // Accepted during a graceful shutdown: tell the client at once (an active channel can write).
        if shutdown.isSet { beginGracefulShutdown() }
    }

    // MARK: Inbound frames

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.type {
        case .headers:
            openCall(frame)
        case .message:
            guard frame.callID != 0, frame.callID <= highestCallID else {
                return connectionError(.internal, "MESSAGE for call \(frame.callID), which was never opened")
            }
            // A call that already ended (or was refused) ignores late frames.
            guard let call = calls[frame.callID], let codec else { return }
            call.requestReceived(payload: frame.payload, flags: frame.flags, codec: codec)
        case .cancel:
            calls[frame.callID]?.cancelledByClient()
        case .windowUpdate:
            guard let update = try? frame.decode(WindowUpdate.self) else {
                return connectionError(.internal, "undecodable WINDOW_UPDATE for call \(frame.callID)")
            }
            calls[frame.callID]?.windowUpdated(increment: update.increment)
        case .trailers:
            connectionError(.internal, "a client may not send TRAILERS (call \(frame.callID))")
        default:
            // GOAWAY from a client needs no action: it simply opens no more calls.
            // Unknown TYPEs are ignored, leaving room to extend the protocol.
            break
        }
    }

    private func openCall(_ frame: Frame) {
        guard frame.callID != 0 else {
            return connectionError(.internal, "HEADERS on call id 0")
        }
        guard frame.callID > highestCallID else {
            return connectionError(.internal, "HEADERS reuses call id \(frame.callID) (highest so far \(highestCallID))")
        }
        guard let headers = try? frame.decode(CallHeaders.self) else {
            return connectionError(.internal, "undecodable HEADERS for call \(frame.callID)")
        }
        highestCallID = frame.callID
        switch state {
        case .active:
            break
        case .draining(let lastCallID) where frame.callID > lastCallID:
            return refuse(frame.callID, .unavailable, "server is shutting down; call \(frame.callID) was not started")
        case .draining:
            break
        case .closed:
            return
        }
        guard let method = router.method(named: headers.method), let context else {
            return refuse(frame.callID, .unimplemented, "unknown method \(headers.method)")
        }
        let serverContext = ServerContext(
            method: headers.method, metadata: headers.metadata,
            deadline: headers.timeoutMs > 0 ? .now + .milliseconds(Int(headers.timeoutMs)) : nil,
            callID: frame.callID, remoteAddress: remoteAddress, baseLogger: logger, shutdown: shutdown)
        let call = ServerCall(
            id: frame.callID, context: serverContext, method: method,
            connection: NIOLoopBound(self, eventLoop: context.eventLoop), initialWindow: OutboundFlowWindow.initialSize,
            executor: executor)
        calls[frame.callID] = call
        if headers.timeoutMs > 0 { call.armDeadline(milliseconds: headers.timeoutMs) }
    }

    private func refuse(_ callID: UInt32, _ code: StatusCode, _ message: String) {
        write(Frame(type: .trailers, callID: callID, message: CallStatus(code: code.rawValue, message: message)), flush: true)
    }

    // MARK: Connection errors and lifecycle

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        switch error {
        case let error as WireError where error.code == .frameTooLarge:
            connectionError(.resourceExhausted, error.message)
        case let error as WireError where error.code == .badPreface:
            logger.debug("closing connection from \(remoteAddress): \(error.message)")
            closeNow()
        case let error as WireError:
            connectionError(.internal, error.message)
        case let error as KeepaliveTimeoutError:
            logger.info("closing connection from \(remoteAddress): \(error)")
            closeNow()
        default:
            logger.debug("closing connection from \(remoteAddress): \(error)")
            closeNow()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        state = .closed
        let open = calls.values
        for call in open { call.connectionClosed() }
        calls.removeAll()
        context.fireChannelInactive()
    }

    /// A breach of the protocol: GOAWAY with `code`, then close.
    private func connectionError(_ code: StatusCode, _ message: String) {
        guard let context, context.channel.isActive else { return }
        logger.info("protocol error from \(remoteAddress): \(message)")
        let goAway = GoAway(lastCallID: highestCallID, code: code.rawValue, message: message)
        context.writeAndFlush(wrapOutboundOut(Frame(type: .goAway, callID: 0, message: goAway)), promise: nil)
        closeNow()
    }

    private func closeNow() {
        guard let context else { return }
        state = .closed
        let open = calls.values
        for call in open { call.connectionClosed() }
        calls.removeAll()
        context.close(promise: nil)
    }

    /// Graceful shutdown: GOAWAY, let the open calls finish, refuse new ones, close when idle.
    func beginGracefulShutdown() {
        guard case .active = state, let context else { return }
        state = .draining(lastCallID: highestCallID)
        let goAway = GoAway(lastCallID: highestCallID, code: StatusCode.ok.rawValue, message: "server is shutting down")
        context.writeAndFlush(wrapOutboundOut(Frame(type: .goAway, callID: 0, message: goAway)), promise: nil)
        if calls.isEmpty { closeNow() }
    }

    /// The grace period is over: end the remaining calls with UNAVAILABLE and close.
    func forceShutdown() {
        let open = calls.values
        for call in open {
            call.end(status: CallStatus(code: StatusCode.unavailable.rawValue, message: "server shut down before the call finished"))
        }
        closeNow()
    }

    // MARK: Used by calls

    func write(_ frame: Frame, flush: Bool) {
        guard let context else { return }
        if flush {
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        } else {
            context.write(wrapOutboundOut(frame), promise: nil)
        }
    }

    func flush() {
        context?.flush()
    }

    func callClosed(id: UInt32) {
        calls.removeValue(forKey: id)
        if case .draining = state, calls.isEmpty { closeNow() }
    }
}
