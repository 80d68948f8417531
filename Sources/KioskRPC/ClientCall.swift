import KioskWire
import NIOCore

/// One call on a client connection, from HEADERS to TRAILERS.
///
/// Received MESSAGEs flow to the caller through an `AsyncThrowingStream`;
/// TRAILERS finish it, with an ``RPCError`` unless the status is OK. Mutable
/// fields are touched only on the connection's event loop.
final class ClientCall: @unchecked Sendable {
    /// A received MESSAGE, as on the wire.
    struct Received: Sendable {
        var payload: ByteBuffer
        var flags: FrameFlags
    }

    let eventLoop: EventLoop
    let method: String
    private let connection: NIOLoopBound<ClientConnectionHandler>
    private let continuation: AsyncThrowingStream<Received, Error>.Continuation
    /// Set when the call is opened on its connection.
    private(set) var id: UInt32 = 0
    private var closed = false
    private var deadlineTimer: Scheduled<Void>?

    init(method: String, connection: NIOLoopBound<ClientConnectionHandler>, continuation: AsyncThrowingStream<Received, Error>.Continuation) {
        self.method = method
        self.connection = connection
        self.eventLoop = connection.eventLoop
        self.continuation = continuation
    }

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
        continuation.yield(Received(payload: frame.payload, flags: frame.flags))
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
        continuation.finish(throwing: error)
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
