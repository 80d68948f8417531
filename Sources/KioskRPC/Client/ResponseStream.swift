import KioskWire

/// The responses of a server-streaming call, as an `AsyncSequence`.
///
/// The call starts when iteration starts and ends with the server's TRAILERS:
/// OK ends the sequence, any other status is thrown as an ``RPCError``.
/// Stopping early (break, or a cancelled task) sends CANCEL to the server.
public struct ResponseStream<Response: WireMessage>: AsyncSequence, Sendable {
    /// A response message.
    public typealias Element = Response

    private let start:
        @Sendable () async throws -> (AsyncThrowingStream<ClientCall.Received, Error>, ClientCall, MessageCodec)

    init<Request: WireMessage>(client: RPCClient, method: String, request: Request, options: CallOptions) {
        self.start = { try await client.startCall(method: method, request: request, options: options) }
    }

    /// An iterator whose first ``ResponseStream/AsyncIterator/next()`` starts the call.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(start: start)
    }

    /// Iterates the responses of a call.
    public struct AsyncIterator: AsyncIteratorProtocol {
        private var start:
            (@Sendable () async throws -> (AsyncThrowingStream<ClientCall.Received, Error>, ClientCall, MessageCodec))?
        private var frames: AsyncThrowingStream<ClientCall.Received, Error>.AsyncIterator?
        private var call: ClientCall?
        private var codec: MessageCodec?
        private var window = InboundFlowWindow()
        private var done = false

        init(
            start:
                @escaping @Sendable () async throws -> (
                    AsyncThrowingStream<ClientCall.Received, Error>, ClientCall, MessageCodec
                )
        ) {
            self.start = start
        }

        /// The next response, or nil once the server ended the call with OK.
        /// - Throws: ``RPCError``.
        public mutating func next() async throws -> Response? {
            guard !done else { return nil }
            if let start {
                self.start = nil
                do {
                    let (stream, call, codec) = try await start()
                    self.frames = stream.makeAsyncIterator()
                    self.call = call
                    self.codec = codec
                } catch {
                    done = true
                    throw error
                }
            }
            guard var frames, let call, let codec else { return nil }
            defer { self.frames = frames }
            let received: ClientCall.Received?
            do {
                received = try await frames.next()
            } catch {
                done = true
                throw error
            }
            guard let received else {
                done = true
                if Task.isCancelled {
                    throw RPCError(.cancelled, "call to \(call.method) was cancelled", source: .local)
                }
                return nil
            }
            if let increment = window.didConsume(bytes: received.payload.readableBytes) {
                call.grant(increment)
            }
            do {
                return try codec.decode(Response.self, payload: received.payload, flags: received.flags)
            } catch {
                done = true
                call.cancel()
                throw RPCError(
                    .internal, "response to \(call.method) is not a valid \(Response.self): \(error.message)",
                    source: .remote)
            }
        }
    }
}
