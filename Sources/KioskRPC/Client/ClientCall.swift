import KioskWire
import NIOCore

/// What a caller waits on for one call: the responses and the end.
///
/// Received MESSAGEs flow to the caller through an `AsyncThrowingStream`
/// (streaming calls) or a single continuation resumed at TRAILERS (unary
/// calls). Whether the call is open is the connection's
/// ``ClientConnectionStateMachine``'s business; this object only remembers,
/// until the call is opened, whether the caller already gave up.
final class ClientCall: @unchecked Sendable {
    /// A received MESSAGE, as on the wire.
    struct Received: Sendable {
        var payload: ByteBuffer
        var flags: FrameFlags
    }

    /// The one response of a unary call, handed over at TRAILERS.
    final class UnarySlot: @unchecked Sendable {
        /// Who waits for the response: a suspended task, or a callback run on the event loop.
        enum Waiter {
            case continuation(UnsafeContinuation<Received, Error>)
            case callback(@Sendable (Result<Received, Error>) -> Void)

            func resume(with result: Result<Received, Error>) {
                switch self {
                case .continuation(let continuation): continuation.resume(with: result)
                case .callback(let callback): callback(result)
                }
            }
        }

        private var waiter: Waiter?
        private var message: Received?
        private var extraMessages = false
        private var outcome: Result<Received, Error>?

        /// A slot whose waiter comes later, through ``wait(with:)``.
        init() {}

        /// A slot whose waiter is known from the start.
        init(_ waiter: Waiter) {
            self.waiter = waiter
        }

        /// Installs the waiting caller (on the event loop); resumes at once if the call already ended.
        func wait(with waiter: Waiter) {
            if let outcome {
                waiter.resume(with: outcome)
            } else {
                self.waiter = waiter
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
                result = .failure(
                    RPCError(.internal, "server sent more than one response to unary call \(method)", source: .remote))
            } else if let message {
                result = .success(message)
            } else {
                result = .failure(
                    RPCError(
                        .internal, "server ended unary call \(method) with OK but sent no response", source: .remote))
            }
            if let waiter {
                self.waiter = nil
                waiter.resume(with: result)
            } else {
                outcome = result
            }
        }
    }

    enum Sink {
        case stream(AsyncThrowingStream<Received, Error>.Continuation)
        case unary(UnarySlot)
    }

    /// Where the call is, as far as the caller's side knows (event loop only).
    enum Phase {
        /// Not yet handed to the connection.
        case pending
        /// Opened on the connection as call `id`: the connection's state machine owns it.
        case opened(UInt32)
        /// Ended before it was opened (cancelled first, or the connection refused it).
        case done
    }

    let eventLoop: EventLoop
    let method: String
    private let connection: NIOLoopBound<ClientConnectionHandler>
    private let sink: Sink
    /// Event loop only.
    var phase = Phase.pending
    /// The call's timeout, once opened with one (event loop only): for the DEADLINE_EXCEEDED message.
    var timeout: Duration?

    init(method: String, connection: NIOLoopBound<ClientConnectionHandler>, sink: Sink) {
        self.method = method
        self.connection = connection
        self.eventLoop = connection.eventLoop
        self.sink = sink
    }

    // MARK: Event loop side (called by the connection handler's actions)

    func received(_ frame: Frame) {
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
            finish(
                throwing: RPCError(
                    StatusCode(rawValue: status.code), status.message, metadata: status.metadata, source: .remote))
        }
    }

    func finish(throwing error: RPCError?) {
        switch sink {
        case .stream(let continuation): continuation.finish(throwing: error)
        case .unary(let slot): slot.finish(method: method, error: error)
        }
    }

    // MARK: Caller side

    /// The caller stopped listening (task cancelled, iterator dropped): send CANCEL.
    func cancel() {
        eventLoop.execute { [self] in
            let error = RPCError(.cancelled, "call to \(method) was cancelled", source: .local)
            switch phase {
            case .pending:
                phase = .done
                finish(throwing: error)
            case .opened(let id):
                connection.value.abandon(callID: id, error: error)
            case .done:
                break
            }
        }
    }

    /// The caller consumed `increment` bytes: grant them back to the server.
    func grant(_ increment: UInt32) {
        eventLoop.execute { [self] in
            guard case .opened(let id) = phase else { return }
            connection.value.grant(callID: id, increment: increment)
        }
    }
}
