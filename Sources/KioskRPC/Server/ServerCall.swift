import KioskWire
import NIOCore

/// What a call's handler task holds to talk to its connection: the call's
/// identity and codec, and the way back to the connection's event loop.
///
/// Immutable: the call's state lives in the connection's
/// ``ServerConnectionStateMachine``; every method here hops to the event loop
/// (or runs inline when already there) and hands an event to it.
final class ServerCall: Sendable {
    let id: UInt32
    let context: ServerContext
    let codec: MessageCodec
    /// True when the client sent its request compressed: responses are compressed too.
    let compressResponses: Bool
    private let connection: NIOLoopBound<ServerConnectionHandler>

    init(
        id: UInt32, context: ServerContext, codec: MessageCodec, compressResponses: Bool,
        connection: NIOLoopBound<ServerConnectionHandler>
    ) {
        self.id = id
        self.context = context
        self.codec = codec
        self.compressResponses = compressResponses
        self.connection = connection
    }

    /// Sends one streamed response, waiting while the window is spent or the connection is unwritable.
    func send(payload: ByteBuffer, flags: FrameFlags) async throws {
        try Task.checkCancellation()
        let connection = self.connection
        let id = self.id
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            connection.eventLoop.runOnLoop {
                connection.value.send(callID: id, payload: payload, flags: flags, waiter: continuation)
            }
        }
    }

    /// Runs `body` once the call has ended and its last frame has left for the socket.
    func whenWritten(_ body: @escaping @Sendable () -> Void) {
        let connection = self.connection
        let id = self.id
        connection.eventLoop.runOnLoop {
            connection.value.whenWritten(callID: id, body)
        }
    }

    /// The handler succeeded: its response (unary) and TRAILERS with OK.
    func complete(withResponse payload: ByteBuffer?, flags: FrameFlags) {
        let connection = self.connection
        let id = self.id
        connection.eventLoop.runOnLoop {
            connection.value.handlerFinished(callID: id, response: payload.map { ($0, flags) })
        }
    }

    /// The handler failed: TRAILERS with its status.
    func fail(_ error: RPCError) {
        let connection = self.connection
        let id = self.id
        let status = CallStatus(code: error.code.rawValue, message: error.message, metadata: error.metadata)
        connection.eventLoop.runOnLoop {
            connection.value.handlerFailed(callID: id, status: status)
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
