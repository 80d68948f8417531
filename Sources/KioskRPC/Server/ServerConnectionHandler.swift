import KioskWire
import Logging
import NIOCore
import Tracing

/// Serves the calls of one connection. Reads its frames from the bytes the
/// connection reads (a ``FrameReader``: the preface, then frames), holds one
/// ``ServerConnectionStateMachine``, hands it every frame, timer and
/// writability change, and executes the actions it returns: writing frames,
/// starting and cancelling handler tasks, arming timers, holding reads,
/// closing. It decides nothing itself. PONG frames go on to the
/// ``KeepaliveHandler`` behind it.
final class ServerConnectionHandler: ChannelDuplexHandler, GatheringFrameWriter {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = Frame
    typealias OutboundIn = Frame
    typealias OutboundOut = ByteBuffer
    typealias StateMachine = ServerConnectionStateMachine<CheckedContinuation<Void, Error>>

    /// What a call holds besides its state: its method, context, task and
    /// timers. A class, so the handler changes it in place instead of copying
    /// it in and out of the table.
    private final class CallResources {
        let method: RPCRouter.Method
        /// Until the handler starts (it then lives in the ServerCall).
        var context: ServerContext?
        var task: Task<Void, Never>?
        /// The call's timeout, when it has a deadline (watched by the connection's ``CallDeadlines``).
        var timeoutMs: UInt32 = 0
        var requestTimer: Scheduled<Void>?
        /// Run once the call's last frame has been written to the socket (or the connection is gone).
        var whenWritten: [@Sendable () -> Void] = []
        /// The generation of the remembered HEADERS this call's are (``InlineCallPath``); 0: not remembered.
        var headersGeneration: UInt64 = 0
        /// When it opened (uptime nanoseconds) if calls are timed, else 0.
        var startNanos: UInt64 = 0
        /// The call's span, when calls are traced (``ServerConfiguration/tracer``).
        var span: (any Span)?

        init(method: RPCRouter.Method, context: ServerContext) {
            self.method = method
            self.context = context
        }

        func cancel() {
            task?.cancel()
            requestTimer?.cancel()
        }
    }

    private var machine: StateMachine
    private var reader: FrameReader
    /// The frames written since the last flush, as one buffer (what a ``FrameWriter`` would do, without a handler hop per frame).
    var gatherer = FrameGatherer()
    private var resources: [UInt32: CallResources] = [:]
    private let router: RPCRouter
    private let limits: ServerLimits
    private let maximumMessageSize: Int
    private var logger: Logger { connectionInfo.logger }
    private var shutdown: ShutdownFlag { connectionInfo.shutdown }
    private let runsHandlersOnEventLoop: Bool
    private(set) var context: ChannelHandlerContext?
    private var loopBoundSelf: NIOLoopBound<ServerConnectionHandler>?
    private var codec: MessageCodec?
    private var executor: EventLoopTaskExecutor?
    private var remoteAddress: String { connectionInfo.remoteAddress }
    /// Shared by the contexts of the connection's calls (and the handler's logger and shutdown flag); its
    /// address is set when the handler is added.
    private var connectionInfo: ServerConnectionInfo
    private var handshakeTimer: Scheduled<Void>?
    private var deadlines: CallDeadlines?
    /// HEADERS as decoded and routed; a class, so that the calls sent with the same bytes share them
    /// without copying (and retaining) the method's closures and the metadata per call.
    private final class RoutedHeaders {
        let headers: CallHeaders
        let method: RPCRouter.Method?
        let route: StateMachine.Route
        /// The method's inline form, when handlers run on the event loop.
        let inline: RPCRouter.InlineRun?
        /// The method's authenticator and meter, read per call without copying the method (its closures).
        let authenticator: (any RPCAuthenticator)?
        let meter: MethodMeter?

        init(headers: CallHeaders, method: RPCRouter.Method?, route: StateMachine.Route, runsHandlersOnEventLoop: Bool)
        {
            self.headers = headers
            self.method = method
            self.route = route
            self.inline = runsHandlersOnEventLoop ? method?.inline : nil
            self.authenticator = method?.authenticator
            self.meter = method?.meter
        }
    }
    /// The inline fast path's memory (its own tested type): the last HEADERS as decoded and routed, the
    /// caller an inline authenticator found for them (a later call with the same HEADERS reuses it while the
    /// authenticator says it ``RPCAuthenticator/stillHolds(_:)``), and an inline unary call admitted by the
    /// last HEADERS of this read, not yet entered in the machine or ``resources``: when its request is the
    /// next frame (as it usually is) it is answered at once without ever being entered; any other event
    /// enters it first (``openPendingCall()``).
    private var inlinePath = InlineCallPath<RoutedHeaders>()
    private typealias PendingCall = InlineCallPath<RoutedHeaders>.PendingCall
    /// The payload of TRAILERS with a plain OK (no message, no metadata): no bytes at all.
    private let emptyPayload = ByteBuffer()
    /// Calls opened in the current read batch: their request timers are armed
    /// at its end only if the request did not come with them (it usually does).
    private var openedInBatch: [UInt32] = []
    /// True between channelRead and channelReadComplete: writes made then are flushed once, when the read's
    /// last whole frame has been handled (``flush()``), or at the end of the batch.
    private var inReadBatch = false
    private var flushPending = false
    /// Calls are timed and their bytes counted (``ServerConfiguration/metersCalls``).
    private let metersCalls: Bool
    /// Traces each call with a span; nil: no tracing, nothing spent on it.
    private let tracer: (any Tracer)?

    init(
        router: RPCRouter, limits: ServerLimits, maximumMessageSize: Int, logger: Logger, shutdown: ShutdownFlag,
        runsHandlersOnEventLoop: Bool, metersCalls: Bool = false, connectionMeter: ConnectionMeter? = nil,
        tracer: (any Tracer)? = nil
    ) {
        self.metersCalls = metersCalls
        self.tracer = tracer
        self.machine = StateMachine(limits: limits, meter: connectionMeter)
        self.reader = FrameReader(
            expectPreface: true,
            limits: FrameLimits(maximumMessageSize: maximumMessageSize, maximumHeadersSize: limits.maximumHeadersSize))
        self.router = router
        self.limits = limits
        self.maximumMessageSize = maximumMessageSize
        self.connectionInfo = ServerConnectionInfo(remoteAddress: "unknown", logger: logger, shutdown: shutdown)
        self.runsHandlersOnEventLoop = runsHandlersOnEventLoop
    }

    /// Calls open now (for tests).
    var openCalls: Int { machine.openCalls + (inlinePath.pending == nil ? 0 : 1) }

    /// Bytes of HEADERS remembered for the next call (for tests).
    var rememberedHeadersBytes: Int { inlinePath.rememberedBytes }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.loopBoundSelf = NIOLoopBound(self, eventLoop: context.eventLoop)
        self.codec = MessageCodec(maximumMessageSize: maximumMessageSize, allocator: context.channel.allocator)
        if runsHandlersOnEventLoop { executor = EventLoopTaskExecutor(context.eventLoop) }
        if let address = context.channel.remoteAddress {
            connectionInfo = ServerConnectionInfo(
                remoteAddress: "\(address.ipAddress ?? "?"):\(address.port ?? 0)", logger: logger, shutdown: shutdown,
                id: connectionInfo.id)
        }
        handshakeTimer = schedule(in: limits.handshakeTimeout) { $0.machine.handshakeTimedOut() }
        // A strong reference, released in handlerRemoved: a weak one would give the handler a side table,
        // and every retain and release of it (several a call) the slow path.
        deadlines = CallDeadlines(eventLoop: context.eventLoop) { callID in
            guard let timeoutMs = self.resources[callID]?.timeoutMs else { return }
            self.openPendingCall()
            self.perform(self.machine.deadlineExpired(callID: callID, timeoutMs: timeoutMs))
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        gatherer.discard()
        handshakeTimer?.cancel()
        self.context = nil
        // The handler refers to itself through this box (for timers and calls) and its deadlines' callback: let them go.
        self.loopBoundSelf = nil
        deadlines?.removeAll()
        deadlines = nil
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Closing (a breach, the end of a drain): what the peer still sends is neither framed nor kept.
        guard !machine.isClosed else { return }
        inReadBatch = true
        reader.append(unwrapInboundIn(data))
        readFrames(context: context)
        // The read's whole frames are handled (a part of one may wait for the next read): what they answered leaves now.
        if flushPending {
            flushPending = false
            flushGathered()
        }
    }

    /// Handles the frames read, until none is complete, the connection closes,
    /// or the peer stops reading what we write (the rest waits in the reader:
    /// one read cycle's bytes at most, as reads are held until it reads again).
    private func readFrames(context: ChannelHandlerContext) {
        do {
            while machine.takesFrames, let event = try reader.next() {
                switch event {
                case .frame(let frame):
                    received(frame, context: context)
                case .preface:
                    handshakeTimer?.cancel()
                    handshakeTimer = nil
                    perform(machine.prefaceReceived(shuttingDown: shutdown.isSet))
                }
            }
        } catch {
            framingFailed(error)
        }
    }

    /// Frames read before the peer stopped reading ours, handled once it reads
    /// again, as a read batch of their own (outside one: a read batch's loop takes them itself).
    private func readBufferedFrames() {
        guard !inReadBatch, reader.bufferedBytes > 0, let context else { return }
        inReadBatch = true
        readFrames(context: context)
        endReadBatch()
    }

    private func received(_ frame: Frame, context: ChannelHandlerContext) {
        switch inlinePath.frameRead(type: frame.type, callID: frame.callID) {
        case .none: break
        case .answer(let pending): return answerPendingCall(pending, payload: frame.payload, flags: frame.flags)
        case .open(let pending): openPendingCall(pending)
        }
        switch frame.type {
        case .headers:
            receivedHeaders(frame)
        case .message:
            perform(machine.receivedMessage(callID: frame.callID, payload: frame.payload, flags: frame.flags))
        case .cancel:
            perform(machine.receivedCancel(callID: frame.callID))
        case .windowUpdate:
            guard let update = try? frame.decode(WindowUpdate.self) else {
                return perform(
                    machine.decodingFailed(
                        WireError(.malformedMessage, "undecodable WINDOW_UPDATE for call \(frame.callID)")))
            }
            perform(machine.receivedWindowUpdate(callID: frame.callID, increment: update.increment))
        case .ping:
            perform(machine.receivedPing(payload: frame.payload, now: context.eventLoop.now))
        case .trailers:
            perform(machine.receivedForbiddenFrame(frame.type, callID: frame.callID))
        case .pong:
            // Answers our keepalive PING: the KeepaliveHandler behind us takes it.
            context.fireChannelRead(wrapInboundOut(frame))
        default:
            // GOAWAY from a client needs no action: it opens no more calls. Unknown TYPEs are ignored.
            break
        }
    }

    /// The bytes read cannot be framed (a bad preface, a frame too short or too large).
    private func framingFailed(_ error: WireError) {
        openPendingCall()
        if error.code != .badPreface { logger.info("protocol error from \(remoteAddress): \(error.message)") }
        perform(machine.decodingFailed(error))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        endReadBatch()
        context.fireChannelReadComplete()
    }

    private func endReadBatch() {
        inReadBatch = false
        openPendingCall()
        armRequestTimers()
        if flushPending {
            flushPending = false
            flushGathered()
        }
    }

    private func receivedHeaders(_ frame: Frame) {
        let routed: RoutedHeaders?
        var generation: UInt64 = 0
        if let last = inlinePath.routed(matching: frame.payload) {
            // The same HEADERS as the call before (a client's calls usually are): decoded and routed already.
            routed = last.routed
            generation = last.generation
        } else if let headers = try? frame.decode(CallHeaders.self) {
            var route = StateMachine.Route.unknown
            let method = router.method(named: headers.method)
            if let method {
                route =
                    method.authenticator != nil && (headers.metadata["authorization"] ?? "").isEmpty
                    ? .missingCredential : .found
            }
            let decoded = RoutedHeaders(
                headers: headers, method: method, route: route, runsHandlersOnEventLoop: runsHandlersOnEventLoop)
            routed = decoded
            if let context, frame.payload.readableBytes <= InlineCallPath<RoutedHeaders>.largestRememberedHeaders {
                // Kept as a copy: the frame's payload is a slice of the read buffer, which it would keep alive.
                var payload = context.channel.allocator.buffer(capacity: frame.payload.readableBytes)
                payload.writeImmutableBuffer(frame.payload)
                generation = inlinePath.remember(payload, routed: decoded)
            }
        } else {
            routed = nil
        }
        // An inline unary method's call is only admitted here: its request usually follows in the same read.
        let deferring = routed?.inline != nil && machine.acceptsDeferredCall
        let action = machine.receivedHeaders(
            callID: frame.callID, headers: routed?.headers, route: routed?.route ?? .unknown, deferOpening: deferring)
        // The method is copied (its closures retained) only for a call entered now, not for a deferred one.
        if case .openCall(let callID, let timeoutMs) = action, let routed, let meter = routed.meter {
            meter.increment()
            let startNanos = metersCalls ? NIODeadline.now().uptimeNanoseconds : 0
            if deferring {
                inlinePath.admit(
                    PendingCall(
                        callID: callID, routed: routed, timeoutMs: timeoutMs, headersGeneration: generation,
                        startNanos: startNanos))
                return
            }
            guard let method = routed.method else { return perform(action) }
            let call = CallResources(
                method: method, context: makeContext(routed.headers, callID: callID, timeoutMs: timeoutMs))
            call.headersGeneration = generation
            call.startNanos = startNanos
            if let tracer { call.span = Self.startSpan(tracer, routed.headers, context: call.context) }
            resources[callID] = call
        } else if case .refuseCall(_, let status) = action {
            (routed?.meter ?? router.unknownMeter).refused(code: status.code)
        }
        perform(action)
    }

    /// The span of a call entered now.
    private static func startSpan(
        _ tracer: any Tracer, _ headers: CallHeaders, context: ServerContext?,
        at start: DefaultTracerClock.Instant = DefaultTracerClock.now
    ) -> any Span {
        CallTracing.startServerSpan(
            tracer, method: headers.method, metadata: headers.metadata, requestID: context?.requestID ?? "", at: start)
    }

    /// Records a call answered inline without being entered: its span runs from `start` (before the handler ran)
    /// to now.
    private func traceAnswered(
        _ headers: CallHeaders, context: ServerContext, start: DefaultTracerClock.Instant?, code: UInt32,
        message: String = ""
    ) {
        guard let tracer, let start else { return }
        CallTracing.end(Self.startSpan(tracer, headers, context: context, at: start), code: code, message: message)
    }

    private func makeContext(_ headers: CallHeaders, callID: UInt32, timeoutMs: UInt32) -> ServerContext {
        ServerContext(
            method: headers.method, metadata: headers.metadata,
            deadline: timeoutMs > 0 ? .now + .milliseconds(Int(timeoutMs)) : nil,
            callID: callID, connection: connectionInfo)
    }

    /// Enters the pending call (if any) in the machine and ``resources``, as
    /// its HEADERS would have without deferring: before any event other than
    /// its request reaches the machine.
    private func openPendingCall() {
        guard let pending = inlinePath.takePending() else { return }
        openPendingCall(pending)
    }

    @discardableResult
    private func openPendingCall(
        _ pending: PendingCall, context serverContext: ServerContext? = nil,
        tracedFrom start: DefaultTracerClock.Instant? = nil
    ) -> CallResources? {
        guard let method = pending.routed.method, machine.openDeferred(callID: pending.callID) else { return nil }
        let call = CallResources(
            method: method,
            context: serverContext
                ?? makeContext(pending.routed.headers, callID: pending.callID, timeoutMs: pending.timeoutMs))
        call.headersGeneration = pending.headersGeneration
        call.startNanos = pending.startNanos
        if let tracer {
            call.span = Self.startSpan(
                tracer, pending.routed.headers, context: call.context, at: start ?? DefaultTracerClock.now)
        }
        resources[pending.callID] = call
        perform(.openCall(callID: pending.callID, timeoutMs: pending.timeoutMs))
        return call
    }

    /// The request of the pending call arrived: answered here and now, never
    /// entered in the machine, unless its authenticator or handler has to
    /// wait (it then becomes an open call running as a task).
    private func answerPendingCall(_ pending: PendingCall, payload: ByteBuffer, flags: FrameFlags) {
        guard let codec else { return assertionFailure("a call was read before the handler was added") }
        let callID = pending.callID
        guard let inline = pending.routed.inline else {
            return assertionFailure("a call without an inline form was deferred")
        }
        var serverContext = makeContext(pending.routed.headers, callID: callID, timeoutMs: pending.timeoutMs)
        // The span, if any, starts before the handler runs, though it is made only once the answer is known.
        let tracedStart = tracer == nil ? nil : DefaultTracerClock.now
        let result = runInline(
            inline, authenticator: pending.routed.authenticator, headersGeneration: pending.headersGeneration,
            context: &serverContext, payload: payload, flags: flags, codec: codec)
        // Answered here unless the connection changed meanwhile (nothing the handler can reach does that).
        if machine.acceptsDeferredCall {
            switch result {
            case .finished(let bytes, let outFlags):
                write(.message, callID: callID, flags: outFlags, payload: bytes)
                write(.trailers, callID: callID, payload: emptyPayload)
                flush()
                if let meter = pending.routed.meter {
                    if metersCalls {
                        meter.received(payload.readableBytes)
                        meter.sent(bytes.readableBytes)
                    }
                    meter.ended(code: 0, startNanos: pending.startNanos)
                }
                if tracer != nil {
                    traceAnswered(pending.routed.headers, context: serverContext, start: tracedStart, code: 0)
                }
                // Released once the answer is out, not before it (its method, metadata and principal: a few releases).
                return withExtendedLifetime(serverContext) {}
            case .failed(let status):
                write(.trailers, callID: callID, message: status.bounded)
                flush()
                if let meter = pending.routed.meter {
                    if metersCalls { meter.received(payload.readableBytes) }
                    meter.ended(code: status.code, startNanos: pending.startNanos)
                }
                if tracer != nil {
                    traceAnswered(
                        pending.routed.headers, context: serverContext, start: tracedStart, code: status.code,
                        message: status.message)
                }
                return withExtendedLifetime(serverContext) {}
            case .suspended, .needsTask:
                break
            }
        }
        // Entered and started as its HEADERS and request would have without deferring; nil: the connection is closed.
        guard let call = openPendingCall(pending, context: serverContext, tracedFrom: tracedStart),
            case .startHandler = machine.receivedMessage(callID: callID, payload: payload, flags: flags)
        else { return }
        if metersCalls { call.method.meter.received(payload.readableBytes) }
        call.context = nil
        complete(
            result, call: call, callID: callID, context: serverContext, payload: payload, flags: flags, codec: codec)
    }

    // MARK: Errors and lifecycle

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        openPendingCall()
        switch error {
        case let error as WireError:
            framingFailed(error)
        case let error as KeepaliveTimeoutError:
            logger.info("closing connection from \(remoteAddress): \(error)")
            context.close(promise: nil)
        default:
            logger.debug("closing connection from \(remoteAddress): \(error)")
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        openPendingCall()
        perform(machine.channelInactive())
        handshakeTimer?.cancel()
        deadlines?.removeAll()
        context.fireChannelInactive()
    }

    // MARK: Backpressure

    func read(context: ChannelHandlerContext) {
        openPendingCall()
        if machine.readRequested() { context.read() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        openPendingCall()
        perform(machine.writabilityChanged(writable: context.channel.isWritable))
        if context.channel.isWritable { readBufferedFrames() }
        context.fireChannelWritabilityChanged()
    }

    // MARK: Shutdown (from RPCServer)

    /// Graceful shutdown: GOAWAY, let the open calls finish, refuse new ones, close when none is left.
    func beginGracefulShutdown() {
        openPendingCall()
        perform(machine.beginGracefulShutdown())
    }

    /// The idle sweep (once every ``ServerLimits/idleTimeout``, from RPCServer):
    /// GOAWAY and close if no call was opened or ended since the last one.
    func idleCheck() {
        openPendingCall()
        perform(machine.idleCheckDue())
    }

    /// The grace period is over: end the remaining calls with UNAVAILABLE and close.
    func forceShutdown() {
        openPendingCall()
        perform(machine.forceShutdown())
    }

    // MARK: From handler tasks (on the event loop)

    func send(callID: UInt32, payload: ByteBuffer, flags: FrameFlags, waiter: CheckedContinuation<Void, Error>) {
        openPendingCall()
        switch machine.send(callID: callID, payload: payload, flags: flags, waiter: waiter) {
        case .write(let send):
            write(.message, callID: callID, flags: send.flags, payload: send.payload)
            flush()
            if metersCalls { resources[callID]?.method.meter.sent(send.payload.readableBytes) }
            send.waiter.resume()
        case .suspend:
            break
        case .fail(let waiter):
            waiter.resume(throwing: CancellationError())
        }
    }

    /// Runs `body` once call `callID` has ended and its last frame has been
    /// written to the socket; at once if it has already ended.
    func whenWritten(callID: UInt32, _ body: @escaping @Sendable () -> Void) {
        openPendingCall()
        guard let call = resources[callID] else { return body() }
        call.whenWritten.append(body)
    }

    func handlerFinished(callID: UInt32, response: (payload: ByteBuffer, flags: FrameFlags)?) {
        openPendingCall()
        perform(machine.handlerFinished(callID: callID, response: response))
    }

    func handlerFailed(callID: UInt32, status: CallStatus) {
        openPendingCall()
        perform(machine.handlerFailed(callID: callID, status: status))
    }

    // MARK: Executing actions

    private func perform(_ action: StateMachine.Action) {
        switch action {
        case .none:
            break
        case .openCall(let callID, let timeoutMs):
            // The deadline is watched at once (an entry in the connection's one deadline timer, no task scheduled).
            if timeoutMs > 0, let call = resources[callID], let context {
                call.timeoutMs = timeoutMs
                deadlines?.add(callID, at: context.eventLoop.now + .milliseconds(Int64(timeoutMs)))
            }
            if inReadBatch {
                // Armed at the end of the read for the calls still waiting for their request: it usually came in the same read.
                openedInBatch.append(callID)
            } else {
                armRequestTimer(callID)
            }
        case .startHandler(let callID, let payload, let flags):
            if metersCalls { resources[callID]?.method.meter.received(payload.readableBytes) }
            startHandler(callID: callID, payload: payload, flags: flags)
        case .refuseCall(let callID, let status):
            write(.trailers, callID: callID, message: status.bounded)
            flush()
        case .endCall(let ended):
            let written = end(ended)
            flush()
            if ended.then == .close { closeAfter(written) }
        case .writeMessages(let callID, let sends):
            for send in sends { write(.message, callID: callID, flags: send.flags, payload: send.payload) }
            if metersCalls, let meter = resources[callID]?.method.meter {
                for send in sends { meter.sent(send.payload.readableBytes) }
            }
            flush()
            for send in sends { send.waiter.resume() }
        case .sendPong(let payload):
            write(.pong, callID: 0, payload: payload)
            flush()
        case .sendGoAway(let goAway):
            write(.goAway, callID: 0, message: goAway)
            flush()
        case .closeConnection(let goAway, let endedCalls):
            for ended in endedCalls { end(ended) }
            guard let goAway, let context else {
                flushGathered()
                context?.close(promise: nil)
                return
            }
            let frame = Frame(type: .goAway, callID: 0, message: goAway, allocator: context.channel.allocator)
            if goAway.code == StatusCode.ok.rawValue {
                // Graceful (idle, shutdown): close once the GOAWAY has been written, not dropping what is queued before it.
                let written = context.eventLoop.makePromise(of: Void.self)
                writeFrame(frame, promise: written)
                flushGathered()
                closeAfter(written.futureResult)
            } else {
                logger.info("closing connection from \(remoteAddress): \(goAway.message)")
                let written = context.eventLoop.makePromise(of: Void.self)
                writeFrame(frame, promise: written)
                flushGathered()
                closeAfterGoAway(written.futureResult)
            }
        case .resumeReading(let readHeld, let writes, let endedCalls, let more):
            for (callID, sends) in writes {
                for send in sends { write(.message, callID: callID, flags: send.flags, payload: send.payload) }
                if metersCalls, let meter = resources[callID]?.method.meter {
                    for send in sends { meter.sent(send.payload.readableBytes) }
                }
            }
            var lastWritten: EventLoopFuture<Void>?
            var closes = false
            for ended in endedCalls {
                lastWritten = end(ended) ?? lastWritten
                closes = closes || ended.then == .close
            }
            flushGathered()
            for (_, sends) in writes { for send in sends { send.waiter.resume() } }
            if closes {
                closeAfter(lastWritten)
                return
            }
            if readHeld { context?.read() }
            // Released at most a high-water mark's worth: ask for more while the channel takes it.
            if more, context?.channel.isWritable == true {
                perform(machine.writabilityChanged(writable: true))
            }
        }
    }

    private func startHandler(callID: UInt32, payload: ByteBuffer, flags: FrameFlags) {
        guard let call = resources[callID], var callContext = call.context, let codec else { return }
        call.context = nil
        call.requestTimer?.cancel()
        call.requestTimer = nil
        guard runsHandlersOnEventLoop, let inline = call.method.inline else {
            return startTask(call, callID: callID, context: callContext, payload: payload, flags: flags, codec: codec)
        }
        let result = runInline(
            inline, authenticator: call.method.authenticator, headersGeneration: call.headersGeneration,
            context: &callContext, payload: payload, flags: flags, codec: codec)
        complete(result, call: call, callID: callID, context: callContext, payload: payload, flags: flags, codec: codec)
    }

    /// Ends or continues an open call after its inline method ran.
    private func complete(
        _ result: InlineResult, call: CallResources, callID: UInt32, context callContext: ServerContext,
        payload: ByteBuffer, flags: FrameFlags, codec: MessageCodec
    ) {
        switch result {
        case .finished(let bytes, let outFlags):
            perform(machine.handlerFinished(callID: callID, response: (bytes, outFlags)))
        case .failed(let status):
            perform(machine.handlerFailed(callID: callID, status: status))
        case .suspended(let answeringContext, let body):
            startInlineTask(
                call, callID: callID, context: answeringContext, codec: codec, compress: flags.contains(.compressed),
                body: body)
        case .needsTask:
            startTask(call, callID: callID, context: callContext, payload: payload, flags: flags, codec: codec)
        }
    }

    /// Runs a call's handler as a task (on the event loop's executor when handlers run there).
    private func startTask(
        _ call: CallResources, callID: UInt32, context callContext: ServerContext, payload: ByteBuffer,
        flags: FrameFlags, codec: MessageCodec
    ) {
        guard let loopBoundSelf else { return }
        let method = call.method
        let serverCall = ServerCall(
            id: callID, context: callContext, codec: codec,
            compressResponses: flags.contains(.compressed), connection: loopBoundSelf)
        let traced = call.span?.context
        let body: @Sendable () async -> Void = {
            let scope = RequestScope.Call(requestID: callContext.requestID, method: callContext.method)
            await Self.within(traced, scope) {
                do {
                    var context = serverCall.context
                    // Credentials first: an unauthenticated request is never inflated or decoded.
                    if let authenticator = method.authenticator {
                        context.principal = try await authenticator.authenticate(context)
                    }
                    try await method.run(payload, flags, serverCall, context)
                } catch {
                    serverCall.fail(RPCError.from(handlerError: error))
                }
            }
        }
        if let executor {
            call.task = Task(executorPreference: executor, operation: body)
        } else {
            call.task = Task(operation: body)
        }
    }

    /// Runs `body` with the call's scope bound for its logs, and its span's context for the spans and calls it
    /// makes (when it is traced).
    private static func within(
        _ traced: ServiceContext?, _ scope: RequestScope.Call, _ body: () async -> Void
    ) async {
        await RequestScope.$current.withValue(scope) {
            if let traced {
                await ServiceContext.$current.withValue(traced) { await body() }
            } else {
                await body()
            }
        }
    }

    /// What an inline method made of its request.
    private enum InlineResult {
        /// Answered: the response's bytes and flags (the call ends OK).
        case finished(ByteBuffer, FrameFlags)
        /// The authenticator or the handler threw: the call ends with this status.
        case failed(CallStatus)
        /// The handler has to wait: `body` answers, as a task, with the context the handler saw.
        case suspended(ServerContext, @Sendable (ServerCall) async throws -> Void)
        /// The authenticator has to wait: the call runs as a task, from the start.
        case needsTask
    }

    /// Runs an inline method here, on the event loop, inside the read that
    /// brought its request: no task, and its response goes out with the read's
    /// one flush.
    private func runInline(
        _ inline: RPCRouter.InlineRun, authenticator: (any RPCAuthenticator)?, headersGeneration generation: UInt64,
        context callContext: inout ServerContext, payload: ByteBuffer, flags: FrameFlags, codec: MessageCodec
    ) -> InlineResult {
        // The caller's context, given its principal in place (a copy would retain its method, metadata, connection).
        do {
            if let authenticator {
                if let reused = inlinePath.principal(forGeneration: generation), authenticator.stillHolds(reused) {
                    // The same credentials as the call before on this connection, checked then and still good.
                    callContext.principal = reused
                } else {
                    // Forgotten first: credentials this check refuses must not pass later on the earlier answer.
                    inlinePath.forgetPrincipal(generation: generation)
                    guard case .principal(let principal) = try authenticator.authenticateInline(callContext) else {
                        return .needsTask
                    }
                    callContext.principal = principal
                    inlinePath.authenticated(principal, generation: generation)
                }
            }
            switch try inline(payload, flags, codec, flags.contains(.compressed), callContext) {
            case .finished(let bytes, let outFlags):
                return .finished(bytes, outFlags)
            case .suspended(let body):
                return .suspended(callContext, body)
            }
        } catch {
            let failure = RPCError.from(handlerError: error)
            return .failed(
                CallStatus(code: failure.code.rawValue, message: failure.message, metadata: failure.metadata))
        }
    }

    /// Runs the rest of an inline call whose handler has to wait, as a task.
    private func startInlineTask(
        _ call: CallResources, callID: UInt32, context callContext: ServerContext, codec: MessageCodec, compress: Bool,
        body: @escaping @Sendable (ServerCall) async throws -> Void
    ) {
        guard let loopBoundSelf else { return }
        let serverCall = ServerCall(
            id: callID, context: callContext, codec: codec, compressResponses: compress, connection: loopBoundSelf)
        let scope = RequestScope.Call(requestID: callContext.requestID, method: callContext.method)
        let traced = call.span?.context
        let task: @Sendable () async -> Void = {
            await Self.within(traced, scope) {
                do { try await body(serverCall) } catch { serverCall.fail(RPCError.from(handlerError: error)) }
            }
        }
        call.task = executor.map { Task(executorPreference: $0, operation: task) } ?? Task(operation: task)
    }

    /// Closes the connection once `written` completes (at once without it):
    /// a graceful close must not drop frames queued before it.
    private func closeAfter(_ written: EventLoopFuture<Void>?) {
        guard let context else { return }
        flushGathered()
        guard let written else {
            context.close(promise: nil)
            return
        }
        let channel = context.channel
        written.whenComplete { _ in channel.close(promise: nil) }
    }

    /// How long a connection closed for an error still takes (and drops) what its peer sends, after its GOAWAY.
    static let lingerAfterGoAway = TimeAmount.seconds(1)

    /// After a connection error's GOAWAY: closes our side for writing once it
    /// is written, drops what the peer still sends, and closes when the peer
    /// does, or after ``lingerAfterGoAway``. Closing at once with the peer's
    /// bytes unread would reset the connection, and a peer still writing might
    /// never read the GOAWAY that says why (what the connection cap's refusal does too).
    private func closeAfterGoAway(_ written: EventLoopFuture<Void>) {
        guard let context else { return }
        let channel = context.channel
        let lingering = channel.eventLoop.scheduleTask(in: Self.lingerAfterGoAway) { channel.close(promise: nil) }
        channel.closeFuture.whenComplete { _ in lingering.cancel() }
        written.whenComplete { result in
            guard case .success = result else { return channel.close(promise: nil) }
            let halfClosed = channel.eventLoop.makePromise(of: Void.self)
            // A channel that cannot close only its output closes whole.
            halfClosed.futureResult.whenFailure { _ in channel.close(promise: nil) }
            channel.close(mode: .output, promise: halfClosed)
        }
    }

    /// Stops an ended call's task and timers, writes what it ends with and
    /// fails its waiting sends; returns the future of its TRAILERS' write.
    @discardableResult
    private func end(_ ended: StateMachine.CallEnded) -> EventLoopFuture<Void>? {
        let resources = self.resources.removeValue(forKey: ended.callID)
        resources?.cancel()
        if resources?.timeoutMs ?? 0 > 0 { deadlines?.remove(ended.callID) }
        if let response = ended.ending.response {
            write(.message, callID: ended.callID, flags: response.flags, payload: response.payload)
            if metersCalls { resources?.method.meter.sent(response.payload.readableBytes) }
        }
        // No status: the connection went first (the client cancelled, in effect).
        resources?.method.meter.ended(
            code: ended.ending.status?.code ?? StatusCode.cancelled.rawValue, startNanos: resources?.startNanos ?? 0)
        if let span = resources?.span {
            CallTracing.end(
                span, code: ended.ending.status?.code ?? StatusCode.cancelled.rawValue,
                message: ended.ending.status?.message ?? "the connection closed")
        }
        let whenWritten = resources?.whenWritten ?? []
        var written: EventLoopFuture<Void>?
        if let status = ended.ending.status, let context {
            let trailers =
                status.code == StatusCode.ok.rawValue && status.message.isEmpty && status.metadata.isEmpty
                ? Frame(type: .trailers, callID: ended.callID, payload: emptyPayload)
                : Frame(
                    type: .trailers, callID: ended.callID, message: status.bounded, allocator: context.channel.allocator
                )
            if whenWritten.isEmpty && ended.then != .close {
                writeFrame(trailers, promise: nil)
            } else {
                let promise = context.eventLoop.makePromise(of: Void.self)
                promise.futureResult.whenComplete { _ in for body in whenWritten { body() } }
                writeFrame(trailers, promise: promise)
                written = promise.futureResult
            }
        } else {
            for body in whenWritten { body() }
        }
        for waiter in ended.ending.waiters { waiter.resume(throwing: CancellationError()) }
        return written
    }

    private func armRequestTimers() {
        guard !openedInBatch.isEmpty else { return }
        for callID in openedInBatch { armRequestTimer(callID) }
        openedInBatch.removeAll(keepingCapacity: true)
    }

    /// Arms the request timer of a call still waiting for its request.
    private func armRequestTimer(_ callID: UInt32) {
        guard let call = resources[callID], call.task == nil, call.context != nil else { return }
        call.requestTimer = schedule(in: limits.requestTimeout) { $0.machine.requestTimedOut(callID: callID) }
    }

    /// Runs `event` on the machine after `delay` and performs its action.
    private func schedule(
        in delay: TimeAmount, _ event: @escaping (ServerConnectionHandler) -> StateMachine.Action
    ) -> Scheduled<Void>? {
        guard let context else { return nil }
        return schedule(at: context.eventLoop.now + delay, event)
    }

    /// Runs `event` on the machine at `deadline` and performs its action.
    private func schedule(
        at deadline: NIODeadline, _ event: @escaping (ServerConnectionHandler) -> StateMachine.Action
    ) -> Scheduled<Void>? {
        guard let context, let loopBoundSelf else { return nil }
        let loopBoundEvent = NIOLoopBound(event, eventLoop: context.eventLoop)
        return context.eventLoop.scheduleTask(deadline: deadline) {
            let handler = loopBoundSelf.value
            handler.openPendingCall()
            handler.perform(loopBoundEvent.value(handler))
        }
    }

    private func write(_ type: FrameType, callID: UInt32, flags: FrameFlags = [], payload: ByteBuffer) {
        writeFrame(Frame(type: type, flags: flags, callID: callID, payload: payload), promise: nil)
    }

    private func write(_ type: FrameType, callID: UInt32, message: some WireMessage) {
        guard let context else { return }
        writeFrame(
            Frame(type: type, callID: callID, message: message, allocator: context.channel.allocator), promise: nil)
    }

    // MARK: Outbound, from the KeepaliveHandler behind us

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        writeFrame(unwrapOutboundIn(data), promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        flushGathered()
    }

    /// Flushes now, or, while reading with more bytes of the read still to handle, once its whole frames
    /// are: a read's answers leave in one write, as soon as its last frame is handled (not at the end of
    /// NIO's read loop: a read that filled its buffer is followed by another channelRead, flushed in turn).
    private func flush() {
        if inReadBatch && reader.bufferedBytes > 0 {
            flushPending = true
        } else {
            flushPending = false
            flushGathered()
        }
    }
}

extension CallStatus {
    /// The longest status message the server sends, in UTF-8 bytes: a status
    /// never echoes a large request back, and stays far under a client's
    /// 16 KiB TRAILERS limit.
    static let maximumMessageBytes = 1024

    /// This status with its message cut to ``maximumMessageBytes``.
    var bounded: CallStatus {
        guard message.utf8.count > Self.maximumMessageBytes else { return self }
        var copy = self
        var cut = String(decoding: message.utf8.prefix(Self.maximumMessageBytes - 3), as: UTF8.self)
        // A character split by the cut decodes as U+FFFD: drop it.
        while cut.hasSuffix("\u{FFFD}") { cut.removeLast() }
        copy.message = cut + "…"
        return copy
    }
}
