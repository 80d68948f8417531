import KioskWire
import NIOCore

/// One call on a client connection, from HEADERS to TRAILERS.
///
/// Received MESSAGEs flow to the caller through an `AsyncThrowingStream`
/// (streaming calls) or a single continuation resumed at TRAILERS (unary
/// calls); TRAILERS finish the call, with an ``RPCError`` unless the status is
/// OK. Mutable fields are touched only on the connection's event loop.
final class ClientCall: @unchecked Sendable {
    /// A received MESSAGE, as on the wire.
    struct Received: Sendable {
        var payload: ByteBuffer
        var flags: FrameFlags
    }

    /// The one response of a unary call, handed over at TRAILERS.
    final class UnarySlot: @unchecked Sendable {
        private var continuation: CheckedContinuation<Received, Error>?
        private var message: Received?
        private var extraMessages = false
        private var outcome: Result<Received, Error>?

        /// Installs the waiting caller (on the event loop); resumes at once if the call already ended.
        func wait(with continuation: CheckedContinuation<Received, Error>) {
            if let outcome {
                continuation.resume(with: outcome)
            } else {
                self.continuation = continuation
            }
        }

        func received(_ received: Received) {
            if message == nil { message = received } else { extraMessages = true }
        }

        func finish(method: String, error: RPCError?) {
            let result: Result<Received, Error>
            if let error {
                result = .failure(error)
            } else if extraMessages {
                result = .failure(RPCError(.internal, "server sent more than one response to unary call \(method)", source: .remote))
            } else if let message {
                result = .success(message)
            } else {
                result = .failure(RPCError(.internal, "server ended unary call \(method) with OK but sent no response", source: .remote))
            }
            if let continuation {
                self.continuation = nil
                continuation.resume(with: result)
            } else {
                outcome = result
            }
        }
    }

    enum Sink {
        case stream(AsyncThrowingStream<Received, Error>.Continuation)
        case unary(UnarySlot)
    }

    let eventLoop: EventLoop
    let method: String
    private let connection: NIOLoopBound<ClientConnectionHandler>
    private let sink: Sink
    /// Set when the call is opened on its connection.
    private(set) var id: UInt32 = 0
    private var closed = false
    private var deadlineTimer: Scheduled<Void>?

    init(method: String, connection: NIOLoopBound<ClientConnectionHandler>, sink: Sink) {
        self.method = method
        self.connection = connection
        self.eventLoop = connection.eventLoop
        self.sink = sink
    }

    /// True once the call ended (event loop only).
    var isClosed: Bool { closed }

    // MARK: Event loop side

    func opened(id: UInt32, timeout: Duration?) {
        self.id = id
        guard let timeout else { return }
        deadlineTimer = eventLoop.scheduleTask(in: TimeAmount(timeout)) { [self] in
            guard !closed else { return }
            connection.value.cancel(self)
            finish(throwing: RPCError(.deadlineExceeded, "deadline of \(timeout) exceeded calling \(method)", source: .local))
        }
    }

    func received(_ frame: Frame) {
        guard !closed else { return }
        let received = Received(payload: frame.payload, flags: frame.flags)
        switch sink {
        case .stream(let continuation): continuation.yield(received)
        case .unary(let slot): slot.received(received)
        }
    }

    func finish(status: CallStatus) {
        if status.code == StatusCode.ok.rawValue {
            finish(throwing: nil)
        } else {
            finish(throwing: RPCError(StatusCode(rawValue: status.code), status.message, metadata: status.metadata, source: .remote))
        }
    }

    func finish(throwing error: RPCError?) {
        guard !closed else { return }
        closed = true
        deadlineTimer?.cancel()
        deadlineTimer = nil
        switch sink {
        case .stream(let continuation): continuation.finish(throwing: error)
        case .unary(let slot): slot.finish(method: method, error: error)
        }
    }

    // MARK: Caller side

    /// The caller stopped listening (task cancelled, iterator dropped): send CANCEL.
    func cancel() {
        eventLoop.execute { [self] in
            guard !closed else { return }
            connection.value.cancel(self)
            finish(throwing: RPCError(.cancelled, "call to \(method) was cancelled", source: .local))
        }
    }

    /// The caller consumed `increment` bytes: grant them back to the server.
    func grant(_ increment: UInt32) {
        eventLoop.execute { [self] in
            guard !closed else { return }
            connection.value.write(Frame(type: .windowUpdate, callID: id, message: WindowUpdate(increment: increment)), flush: true)
        }
    }
}
