import KioskWire
import Logging
import NIOCore

/// Runs the calls of one client connection. Holds one
/// ``ClientConnectionStateMachine`` and executes its actions: sending
/// HEADERS, requests, CANCEL and WINDOW_UPDATE, handing responses and ends to
/// the callers, arming deadlines, closing. Reads the frames from the bytes
/// the connection reads (a ``FrameReader``); PONG frames go on to the
/// ``KeepaliveHandler`` behind it.
final class ClientConnectionHandler: ChannelDuplexHandler, GatheringFrameWriter {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = Frame
    typealias OutboundIn = Frame
    typealias OutboundOut = ByteBuffer
    typealias StateMachine = ClientConnectionStateMachine<ClientCall>

    private var machine: StateMachine
    private var reader: FrameReader
    /// The frames written since the last flush, as one buffer (what a ``FrameWriter`` would do, without a handler hop per frame).
    var gatherer = FrameGatherer()
    private let target: String
    private let logger: Logger
    /// Called once when the connection stops taking new calls (GOAWAY, ids spent, or closed).
    private let onUnusable: @Sendable () -> Void
    private(set) var context: ChannelHandlerContext?
    private var loopBoundSelf: NIOLoopBound<ClientConnectionHandler>?
    private var deadlines: CallDeadlines?
    /// Why the connection is failing, when known before it closes (keepalive, a bad frame).
    private var failure: RPCError?
    private var reportedUnusable = false
    /// The last HEADERS sent and their encoding.
    private var lastHeaders: (headers: CallHeaders, payload: ByteBuffer)?
    /// A flush is queued on the event loop (``flushSoon()``).
    private var flushScheduled = false
    /// True between channelRead and channelReadComplete: calls opened then (from the completion handlers of
    /// ``RPCClient/unary(_:request:response:options:completion:)`` a response ran) go out with one flush: at
    /// once when the read holds no more frames, else at the end of the read.
    private var reading = false
    private var flushAfterRead = false
    /// The first call opened since the last flush: it and the calls after it never reached the socket
    /// (NIO writes only on a flush), so if the connection dies now they were not sent and may be retried.
    private var firstUnflushedCallID: UInt32?

    init(
        target: String, logger: Logger, maximumMessageSize: Int = Frame.defaultMaximumPayloadSize,
        onUnusable: @escaping @Sendable () -> Void
    ) {
        self.machine = StateMachine(target: target)
        self.reader = FrameReader(expectPreface: false, limits: FrameLimits(maximumMessageSize: maximumMessageSize))
        self.target = target
        self.logger = logger
        self.onUnusable = onUnusable
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.loopBoundSelf = NIOLoopBound(self, eventLoop: context.eventLoop)
        // A strong reference, released in handlerRemoved: a weak one would give the handler a side table,
        // and every retain and release of it (several a call) the slow path.
        self.deadlines = CallDeadlines(eventLoop: context.eventLoop) { id in self.deadlinePassed(id) }
    }

    private func deadlinePassed(_ id: UInt32) {
        guard let call = machine.call(id), let timeout = call.timeout else { return }
        perform(
            machine.abandon(
                callID: id,
                error: RPCError(
                    .deadlineExceeded, "deadline of \(timeout) exceeded calling \(call.method)", source: .local)))
    }

    // MARK: From callers (on the event loop)

    /// Opens `call`: HEADERS, then the request MESSAGE with END_STREAM.
    func open(_ call: ClientCall, headers: CallHeaders, request: ByteBuffer, flags: FrameFlags, timeout: CallTimeout?) {
        guard case .pending = call.phase else { return }  // cancelled before it was sent
        switch machine.openCall(call, method: call.method) {
        case .fail(let error):
            call.phase = .done
            call.finish(throwing: error)
        case .send(let id, let retire):
            call.phase = .opened(id)
            guard let context else { return }
            // The deadline first: a write that fails closes the channel, which clears the deadlines.
            if let timeout {
                call.timeout = timeout.duration
                deadlines?.add(id, at: context.eventLoop.now + timeout.amount)
            }
            if firstUnflushedCallID == nil { firstUnflushedCallID = id }
            writeFrame(
                Frame(type: .headers, callID: id, payload: encoded(headers, allocator: context.channel.allocator)),
                promise: nil)
            writeFrame(
                Frame(type: .message, flags: flags.union(.endStream), callID: id, payload: request), promise: nil)
            if !reading {
                flushSoon()
            } else if reader.bufferedBytes == 0 {
                // Opened from a response this read brought, and the read holds no more: sent at once, not after
                // the rest of the read's handling (one flush per read still, as this was its last frame).
                flushAfterRead = false
                flushWrites()
            } else {
                flushAfterRead = true
            }
            if retire { markUnusable() }
        }
    }

    /// The encoding of `headers`: the previous call's bytes when they are the
    /// same HEADERS (a client's calls to one method usually are).
    private func encoded(_ headers: CallHeaders, allocator: ByteBufferAllocator) -> ByteBuffer {
        if let last = lastHeaders, last.headers == headers { return last.payload }
        var payload = allocator.buffer(capacity: 0)
        headers.serialize(into: &payload)
        lastHeaders = (headers, payload)
        return payload
    }

    /// Flushes once the event loop has run what is queued now: the calls
    /// opened by callers that one read's responses woke go out in one write,
    /// as a server flushes once per read.
    private func flushSoon() {
        guard !flushScheduled, let context, let loopBoundSelf else { return }
        flushScheduled = true
        context.eventLoop.execute {
            let handler = loopBoundSelf.value
            handler.flushScheduled = false
            handler.flushWrites()
        }
    }

    /// The caller gave up on call `callID`.
    func abandon(callID: UInt32, error: RPCError) {
        perform(machine.abandon(callID: callID, error: error))
    }

    /// The caller consumed `increment` bytes of call `callID`.
    func grant(callID: UInt32, increment: UInt32) {
        perform(machine.granted(callID: callID, increment: increment))
    }

    // MARK: Frames from the server

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reading = true
        reader.append(unwrapInboundIn(data))
        do {
            // A client's reader expects no preface: frames only.
            while case .frame(let frame)? = try reader.next() {
                received(frame, context: context)
            }
        } catch {
            framingFailed(error)
        }
    }

    private func received(_ frame: Frame, context: ChannelHandlerContext) {
        switch frame.type {
        case .message:
            let action = machine.receivedMessage(callID: frame.callID, bytes: frame.payload.readableBytes)
            if case .deliver(let call) = action {
                call.received(frame)
            } else {
                perform(action)
            }
        case .trailers:
            // A plain OK's TRAILERS carry no payload (an empty message is the default status): nothing to decode.
            let status = frame.payload.readableBytes == 0 ? CallStatus(code: 0) : try? frame.decode(CallStatus.self)
            perform(machine.receivedTrailers(callID: frame.callID, status: status))
        case .goAway:
            perform(machine.receivedGoAway(try? frame.decode(GoAway.self)))
        case .ping:
            // The payload is bounded by the decoder's control-frame limit.
            writeFrame(Frame(type: .pong, callID: 0, payload: frame.payload), promise: nil)
            flushWrites()
        case .pong:
            // Answers our keepalive PING: the KeepaliveHandler behind us takes it.
            context.fireChannelRead(wrapInboundOut(frame))
        case .headers, .cancel:
            perform(machine.protocolError("a server may not send \(frame.type) (call \(frame.callID))"))
        default:
            // WINDOW_UPDATEs need no action (a client sends one message per call);
            // unknown TYPEs are ignored.
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        if flushAfterRead {
            flushAfterRead = false
            flushWrites()
        }
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        switch error {
        case let error as KeepaliveTimeoutError:
            failure = RPCError(.unavailable, "server \(target) stopped answering: \(error)", source: .connection)
            context.close(promise: nil)
        case let error as WireError:
            framingFailed(error)
        default:
            logger.debug("connection to \(target) failing: \(error)")
            failure = failure ?? RPCError(.unavailable, "connection to \(target) failed: \(error)", source: .connection)
            context.close(promise: nil)
        }
    }

    /// The bytes read cannot be framed (a frame too short, or too large).
    private func framingFailed(_ error: WireError) {
        perform(
            machine.protocolError(error.message, code: error.code == .frameTooLarge ? .resourceExhausted : .internal))
    }

    func channelInactive(context: ChannelHandlerContext) {
        reading = false
        flushAfterRead = false
        // Retired before the calls fail: one retried at once must not be routed here again.
        markUnusable()
        perform(machine.channelInactive(reason: failure, unsentFrom: firstUnflushedCallID))
        deadlines?.removeAll()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        gatherer.discard()
        self.context = nil
        // The handler refers to itself through this box and its deadlines' callback: let them go.
        self.loopBoundSelf = nil
        deadlines?.removeAll()
        deadlines = nil
    }

    // MARK: Writing

    /// Writes what was gathered and flushes the channel; the calls opened so far are sent from here on.
    private func flushWrites() {
        guard context != nil else { return }
        firstUnflushedCallID = nil
        flushGathered()
    }

    /// Frames written by the KeepaliveHandler behind us (PINGs) join ours.
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        writeFrame(unwrapOutboundIn(data), promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        flushWrites()
    }

    // MARK: Executing actions

    private func perform(_ action: StateMachine.Action) {
        switch action {
        case .none:
            break
        case .deliver:
            // Delivered by channelRead, which holds the frame.
            break
        case .finish(let call, let status, let close):
            stopDeadline(of: call)
            call.finish(status: status)
            if close { context?.close(promise: nil) }
        case .abandon(let callID, let call, let error, let close):
            stopDeadline(of: call)
            writeFrame(Frame(type: .cancel, callID: callID), promise: nil)
            flushWrites()
            call.finish(throwing: error)
            if close { context?.close(promise: nil) }
        case .sendWindowUpdate(let callID, let increment):
            guard let context else { return }
            writeFrame(
                Frame(
                    type: .windowUpdate, callID: callID, message: WindowUpdate(increment: increment),
                    allocator: context.channel.allocator), promise: nil)
            flushWrites()
        case .retire(let failing, let error, let close):
            markUnusable()
            for call in failing { fail(call, error) }
            if close { context?.close(promise: nil) }
        case .closeWithError(let failing, let error):
            logger.debug("connection to \(target) failing: \(error.message)")
            failure = error
            markUnusable()
            for call in failing { fail(call, error) }
            context?.close(promise: nil)
        case .failAll(let calls, let error, let unsent, let unsentError):
            for call in calls { fail(call, error) }
            for call in unsent { fail(call, unsentError) }
        }
    }

    private func fail(_ call: ClientCall, _ error: RPCError) {
        stopDeadline(of: call)
        var error = error
        error.message += " while calling \(call.method)"
        call.finish(throwing: error)
    }

    private func stopDeadline(of call: ClientCall) {
        guard case .opened(let id) = call.phase else { return }
        deadlines?.remove(id)
    }

    private func markUnusable() {
        guard !reportedUnusable else { return }
        reportedUnusable = true
        onUnusable()
    }
}
