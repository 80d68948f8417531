import KioskWire
import Logging
import NIOCore

/// Runs the calls of one client connection: assigns call ids, sends HEADERS
/// and requests, routes MESSAGE and TRAILERS to their calls, and fails every
/// open call with UNAVAILABLE when the connection is lost.
final class ClientConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = Frame
    typealias OutboundOut = Frame

    private enum State {
        case active
        /// The server sent GOAWAY: calls up to `lastCallID` finish; no new calls here.
        case draining(lastCallID: UInt32)
        case closed
    }

    private let target: String
    private let logger: Logger
    /// Called once when the connection stops taking new calls (GOAWAY or close).
    private let onUnusable: @Sendable () -> Void
    private var context: ChannelHandlerContext?
    private var calls: [UInt32: ClientCall] = [:]
    private var nextCallID: UInt32 = 1
    private var state = State.active
    private var closeReason: RPCError?
    private var reportedUnusable = false

    init(target: String, logger: Logger, onUnusable: @escaping @Sendable () -> Void) {
        self.target = target
        self.logger = logger
        self.onUnusable = onUnusable
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    /// Opens `call`: HEADERS, then the request MESSAGE with END_STREAM.
    func open(_ call: ClientCall, headers: CallHeaders, request: ByteBuffer, flags: FrameFlags, timeout: Duration?) {
        guard !call.isClosed else { return }  // cancelled before it was sent
        guard case .active = state, let context, nextCallID < UInt32.max else {
            let reason = closeReason?.message ?? "connection to \(target) is closing"
            call.finish(throwing: RPCError(.unavailable, "\(reason); the call to \(call.method) was not sent", source: .connection))
            return
        }
        let id = nextCallID
        nextCallID += 1
        calls[id] = call
        call.opened(id: id, timeout: timeout)
        context.write(wrapOutboundOut(Frame(type: .headers, callID: id, message: headers, allocator: context.channel.allocator)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(Frame(type: .message, flags: flags.union(.endStream), callID: id, payload: request)), promise: nil)
        if nextCallID == UInt32.max {
            // Call ids are spent: no new calls here; close once the open ones end.
            state = .draining(lastCallID: id)
            markUnusable()
        }
    }

    /// Abandons `call`: CANCEL to the server; later frames for it are ignored.
    func cancel(_ call: ClientCall) {
        guard calls.removeValue(forKey: call.id) != nil else { return }
        write(Frame(type: .cancel, callID: call.id), flush: true)
        closeIfDrained()
    }

    func write(_ frame: Frame, flush: Bool) {
        guard let context else { return }
        if flush {
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        } else {
            context.write(wrapOutboundOut(frame), promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.type {
        case .message:
            calls[frame.callID]?.received(frame)
        case .trailers:
            guard let status = try? frame.decode(CallStatus.self) else {
                return connectionError("undecodable TRAILERS for call \(frame.callID)")
            }
            calls.removeValue(forKey: frame.callID)?.finish(status: status)
            closeIfDrained()
        case .goAway:
            guard let goAway = try? frame.decode(GoAway.self) else {
                return connectionError("undecodable GOAWAY")
            }
            receivedGoAway(goAway)
        default:
            // WINDOW_UPDATEs need no action (a client sends one message per call);
            // unknown TYPEs are ignored.
            break
        }
    }

    private func receivedGoAway(_ goAway: GoAway) {
        let code = StatusCode(rawValue: goAway.code)
        let reason = code == .ok
            ? "server \(target) is shutting down"
            : "server \(target) closed the connection: \(goAway.message) (\(code.name))"
        closeReason = RPCError(code == .ok ? .unavailable : code, reason, source: .connection)
        state = .draining(lastCallID: goAway.lastCallID)
        markUnusable()
        for (id, call) in calls where id > goAway.lastCallID {
            calls.removeValue(forKey: id)
            call.finish(throwing: RPCError(.unavailable, "\(reason); the call to \(call.method) was not started", source: .connection))
        }
        closeIfDrained()
    }

    private func closeIfDrained() {
        guard case .draining = state, calls.isEmpty else { return }
        state = .closed
        context?.close(promise: nil)
    }

    private func connectionError(_ message: String) {
        closeReason = RPCError(.internal, "protocol error from \(target): \(message)", source: .connection)
        context?.close(promise: nil)
    }

    private func markUnusable() {
        guard !reportedUnusable else { return }
        reportedUnusable = true
        onUnusable()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        switch error {
        case let error as KeepaliveTimeoutError:
            closeReason = RPCError(.unavailable, "server \(target) stopped answering: \(error)", source: .connection)
        case let error as WireError:
            closeReason = RPCError(error.code == .frameTooLarge ? .resourceExhausted : .internal,
                                   "protocol error from \(target): \(error.message)", source: .connection)
        default:
            closeReason = closeReason ?? RPCError(.unavailable, "connection to \(target) failed: \(error)", source: .connection)
        }
        logger.debug("connection to \(target) failing: \(error)")
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        state = .closed
        markUnusable()
        let reason = closeReason ?? RPCError(.unavailable, "connection to \(target) closed", source: .connection)
        let open = calls
        calls.removeAll()
        for call in open.values {
            var error = reason
            error.message += " while calling \(call.method)"
            call.finish(throwing: error)
        }
        context.fireChannelInactive()
    }
}
