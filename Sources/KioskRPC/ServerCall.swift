import KioskWire
import NIOCore

/// One call on a server connection: its handler task, its send window and its end.
///
/// Every mutable field is touched only on the connection's event loop; methods
/// called from the handler's task hop there first. A call ends once (TRAILERS
/// sent, or cancelled by the client): later responses of its handler are dropped.
final class ServerCall: @unchecked Sendable {
    private enum Phase {
        case awaitingRequest
        case running
        case closed
    }

    let id: UInt32
    let context: ServerContext
    let eventLoop: EventLoop
    /// True when the client sent its request compressed: responses are compressed too.
    private(set) var compressResponses = false

    private let connection: NIOLoopBound<ServerConnectionHandler>
    private let method: RPCRouter.Method
    private var phase = Phase.awaitingRequest
    private var window: OutboundFlowWindow
    private var waitingSends: [(payload: ByteBuffer, flags: FrameFlags, continuation: CheckedContinuation<Void, Error>)] = []
    private var task: Task<Void, Never>?
    private var deadlineTimer: Scheduled<Void>?

    /// Where the handler runs: the connection's event loop, or (nil) the global pool.
    private let executor: EventLoopTaskExecutor?

    init(id: UInt32, context: ServerContext, method: RPCRouter.Method, connection: NIOLoopBound<ServerConnectionHandler>,
         initialWindow: Int, executor: EventLoopTaskExecutor?) {
        self.executor = executor
        self.id = id
        self.context = context
        self.method = method
        self.connection = connection
        self.eventLoop = connection.eventLoop
        self.window = OutboundFlowWindow(initial: initialWindow)
    }

    // MARK: Event loop side

    /// Arms the deadline timer for a call whose client set `timeout_ms`.
    func armDeadline(milliseconds: UInt32) {
        deadlineTimer = eventLoop.scheduleTask(in: .milliseconds(Int64(milliseconds))) { [self] in
            guard phase != .closed else { return }
            end(status: CallStatus(code: StatusCode.deadlineExceeded.rawValue, message: "deadline of \(milliseconds) ms exceeded"))
        }
    }

    /// The request MESSAGE arrived: start the handler.
    func requestReceived(payload: ByteBuffer, flags: FrameFlags, codec: MessageCodec) {
        eventLoop.assertInEventLoop()
        switch phase {
        case .awaitingRequest:
            phase = .running
            compressResponses = flags.contains(.compressed)
            let method = self.method
            let body: @Sendable () async -> Void = { [self] in
                do {
                    try await method.run(payload, flags, self, codec)
                } catch {
                    fail(RPCError.from(handlerError: error))
                }
            }
            if let executor {
                task = Task(executorPreference: executor, operation: body)
            } else {
                task = Task(operation: body)
            }
        case .running:
            end(status: CallStatus(code: StatusCode.invalidArgument.rawValue, message: "a \(method.kind) call takes exactly one request message"))
        case .closed:
            break
        }
    }

    /// The client granted more window.
    func windowUpdated(increment: UInt32) {
        guard phase != .closed, window.didReceiveUpdate(increment: increment) else { return }
        flushWaitingSends()
    }

    /// The client sent CANCEL: stop the handler and send nothing more.
    func cancelledByClient() {
        guard phase != .closed else { return }
        close()
    }

    /// Ends the call now with `status` (deadline, shutdown, …), cancelling its handler.
    func end(status: CallStatus) {
        guard phase != .closed else { return }
        connection.value.write(Frame(type: .trailers, callID: id, message: status), flush: true)
        close()
    }

    /// The connection is gone: stop the handler; nothing can be sent.
    func connectionClosed() {
        guard phase != .closed else { return }
        close()
    }

    private func close() {
        phase = .closed
        deadlineTimer?.cancel()
        deadlineTimer = nil
        task?.cancel()
        task = nil
        let waiting = waitingSends
        waitingSends.removeAll()
        for send in waiting { send.continuation.resume(throwing: CancellationError()) }
        connection.value.callClosed(id: id)
    }

    private func flushWaitingSends() {
        var wrote = false
        while window.isOpen, !waitingSends.isEmpty {
            let send = waitingSends.removeFirst()
            writeMessage(send.payload, flags: send.flags, flush: false)
            send.continuation.resume()
            wrote = true
        }
        if wrote { connection.value.flush() }
    }

    private func writeMessage(_ payload: ByteBuffer, flags: FrameFlags, flush: Bool) {
        window.didSend(bytes: payload.readableBytes)
        connection.value.write(Frame(type: .message, flags: flags, callID: id, payload: payload), flush: flush)
    }

    // MARK: Handler task side

    /// Sends one streamed response, waiting while the window is spent.
    func send(payload: ByteBuffer, flags: FrameFlags) async throws {
        try Task.checkCancellation()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            eventLoop.runOnLoop { [self] in
                guard phase == .running else {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                if waitingSends.isEmpty, window.isOpen {
                    writeMessage(payload, flags: flags, flush: true)
                    continuation.resume()
                } else {
                    waitingSends.append((payload, flags, continuation))
                }
            }
        }
    }

    /// The handler succeeded: send its response (unary) and TRAILERS with OK.
    func complete(withResponse payload: ByteBuffer?, flags: FrameFlags) {
        eventLoop.runOnLoop { [self] in
            guard phase == .running else { return }
            if let payload {
                writeMessage(payload, flags: flags, flush: false)
            }
            end(status: CallStatus(code: StatusCode.ok.rawValue))
        }
    }

    /// The handler failed: send TRAILERS with its status.
    func fail(_ error: RPCError) {
        eventLoop.runOnLoop { [self] in
            end(status: CallStatus(code: error.code.rawValue, message: error.message, metadata: error.metadata))
        }
    }
}

extension RPCRouter.Method.Kind: CustomStringConvertible {
    var description: String {
        switch self {
        case .unary: "unary"
        case .serverStreaming: "server-streaming"
        }
    }
}
