import KioskWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Tracing

/// A Kiosk RPC client: one TCP connection to one server, multiplexing any
/// number of concurrent calls.
///
/// The connection is made on the first call and made again, with exponential
/// backoff and jitter, after it is lost or the server sends GOAWAY. A call that
/// cannot get a connection throws an ``RPCError`` with code UNAVAILABLE and
/// ``RPCError/Source/connect``; one that fails on the server throws the
/// server's status with ``RPCError/Source/remote``.
///
/// Given several endpoints (replicas of one service), the client picks the
/// first that connects, as gRPC's `pick_first` does: it stays on it while the
/// connection lives (keepalive PINGs notice a server that stopped answering),
/// and when the connection is lost the next call connects again, trying the
/// endpoint that last worked first and then the others in order. One attempt of
/// ``ConnectionBackoff`` is one pass over every endpoint. Calls in flight on a
/// lost connection fail with ``RPCError/Source/connection``; retrying them
/// (with the same idempotency key) is the caller's choice, as the SDK does.
///
/// ```swift
/// let client = RPCClient(host: "127.0.0.1", port: 7301)
/// let health = try await client.unary("/kiosk.rpc.v1.Health/Check",
///                                     request: HealthCheckRequest(), response: HealthCheckResponse.self)
/// ```
public final class RPCClient: Sendable {
    private enum State {
        case idle
        case connecting(Task<ClientConnection, Error>)
        case ready(ClientConnection)
        case closed
    }

    /// The servers this client connects to, in the order it tries them.
    public let endpoints: [Endpoint]
    /// The first endpoint's host.
    public var host: String { endpoints[0].host }
    /// The first endpoint's port.
    public var port: Int { endpoints[0].port }
    /// The client's configuration.
    public let configuration: ClientConfiguration
    /// The tracer, resolved once (``ClientConfiguration/tracer``); nil: calls are not traced.
    let tracer: (any Tracer)?
    /// `configuration.defaultTimeout`, converted once.
    private let defaultTimeout: CallTimeout?
    /// The event loop of this client's connections. Callers that make many calls
    /// can run on it (`withTaskExecutorPreference(EventLoopTaskExecutor(client.eventLoop))`)
    /// to save a thread hop per call.
    public let eventLoop: EventLoop
    private let logger: Logger
    private let state = NIOLockedValueBox(State.idle)
    /// The index in ``endpoints`` that connected last: the next connection tries it first.
    private let preferred: NIOLockedValueBox<Int>

    /// Creates a client of one server; no connection is made until the first call.
    public convenience init(
        host: String, port: Int, configuration: ClientConfiguration = .defaults,
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "kiosk.rpc.client", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        self.init(
            endpoints: [Endpoint(host: host, port: port)], configuration: configuration, group: group, logger: logger)
    }

    /// Creates a client of the replicas at `endpoints` (at least one); no
    /// connection is made until the first call. The first connection tries
    /// them in order (from a random one with
    /// ``ClientConfiguration/startsAtRandomEndpoint``).
    public init(
        endpoints: [Endpoint], configuration: ClientConfiguration = .defaults,
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "kiosk.rpc.client", factory: { _ in SwiftLogNoOpLogHandler() })
    ) {
        precondition(!endpoints.isEmpty, "an RPCClient needs at least one endpoint")
        self.endpoints = endpoints
        self.configuration = configuration
        self.defaultTimeout = configuration.defaultTimeout.map(CallTimeout.init)
        self.tracer = CallTracing.resolve(configuration.tracer)
        self.eventLoop = group.next()
        self.logger = logger
        self.preferred = NIOLockedValueBox(
            configuration.startsAtRandomEndpoint ? Int.random(in: 0..<endpoints.count) : 0)
    }

    private var target: String { endpoints.map(\.description).joined(separator: ",") }

    /// How many times a caller may send a call again after its connection was lost: one per
    /// endpoint when there are several (a new connection can still land on the replica that is
    /// dying, which accepts for a moment after its connections dropped), none with one endpoint.
    public var lostConnectionRetries: Int { endpoints.count > 1 ? endpoints.count : 0 }

    /// The endpoint of the connection calls go to now; nil while there is none.
    public var connectedEndpoint: Endpoint? { readyConnection()?.endpoint }

    // MARK: Calls

    /// Makes a unary call: one request, one response.
    /// - Throws: ``RPCError``: the server's status, a deadline, a cancellation or a connection failure.
    @inlinable
    public func unary<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request, response: Response.Type = Response.self,
        options: CallOptions = CallOptions()
    ) async throws -> Response {
        // Inlinable, so that encoding and decoding are specialised for the caller's types: generic
        // protobuf-c bridging costs runtime metadata lookups and value-witness copies on every call.
        let payload = try await unaryCall(method, options: options) { request.serialize(into: &$0) }
        return try Self.decode(payload, as: Response.self, method: method).get()
    }

    /// Makes a unary call with a request encoded beforehand (sent as is, not encoded again), as
    /// ``unary(_:request:response:options:)`` does.
    @inlinable
    public func unary<Request: WireMessage, Response: WireMessage>(
        _ method: String, encoded request: EncodedMessage<Request>, response: Response.Type = Response.self,
        options: CallOptions = CallOptions()
    ) async throws -> Response {
        let payload = try await unaryCall(method, options: options) { $0.writeImmutableBuffer(request.bytes) }
        return try Self.decode(payload, as: Response.self, method: method).get()
    }

    /// A response's message, or why it is not one.
    @inlinable
    static func decode<Response: WireMessage>(
        _ payload: ByteBuffer, as type: Response.Type, method: String
    ) -> Result<Response, RPCError> {
        do throws(WireError) {
            return .success(try Response(serializedBytes: payload))
        } catch {
            return .failure(
                RPCError(
                    .internal, "response to \(method) is not a valid \(Response.self): \(error.message)",
                    source: .remote))
        }
    }

    /// A unary call's untyped part: sends the request `serialize` writes and
    /// returns the response's bytes (inflated when they came compressed).
    /// - Parameter retries: how many times a call the server never started is sent again (default: one per endpoint).
    @usableFromInline
    func unaryCall(
        _ method: String, options: CallOptions, retries: Int? = nil, serialize: (inout ByteBuffer) -> Void
    ) async throws -> ByteBuffer {
        if let tracer {
            // One span for the call, its transparent retries included; the metadata carries it to the server.
            let span = CallTracing.startClientSpan(tracer, method: method)
            do {
                let response = try await ServiceContext.$current.withValue(span.context) {
                    try await unaryCallRetrying(method, options: options, retries: retries, serialize: serialize)
                }
                CallTracing.end(span, code: 0)
                return response
            } catch {
                let failure = error as? RPCError
                CallTracing.end(
                    span, code: failure?.code.rawValue ?? StatusCode.unknown.rawValue, message: failure?.message ?? "")
                throw error
            }
        }
        return try await unaryCallRetrying(method, options: options, retries: retries, serialize: serialize)
    }

    private func unaryCallRetrying(
        _ method: String, options: CallOptions, retries: Int?, serialize: (inout ByteBuffer) -> Void
    ) async throws -> ByteBuffer {
        // A call the server never started (its connection was going away) is sent again on a new
        // connection, as gRPC's transparent retry does: up to `retries` times (once per endpoint).
        var retries = retries ?? endpoints.count
        while true {
            do {
                return try await unaryCallOnce(method, options: options, serialize: serialize)
            } catch let error as RPCError where error.source == .unprocessed && retries > 0 && !Task.isCancelled {
                retries -= 1
                logger.debug("sending \(method) again: \(error.message)")
            }
        }
    }

    private func unaryCallOnce(
        _ method: String, options: CallOptions, serialize: (inout ByteBuffer) -> Void
    ) async throws -> ByteBuffer {
        let prepared = try await prepare(method, options, serialize)
        let slot = ClientCall.UnarySlot()
        let call = ClientCall(method: method, connection: prepared.connection.handler, sink: .unary(slot))
        let handler = prepared.connection.handler
        // One continuation, resumed at TRAILERS: no stream for a call with one answer. Unsafe rather than
        // checked (which allocates a canary per call): UnarySlot resumes it exactly once.
        let received = try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<ClientCall.Received, Error>) in
                handler.eventLoop.runOnLoop {
                    slot.wait(with: .continuation(continuation))
                    prepared.open(call)
                }
            }
        } onCancel: {
            call.cancel()
        }
        do {
            return try prepared.codec.inflated(received.payload, flags: received.flags)
        } catch {
            throw RPCError(.internal, "response to \(method) cannot be inflated: \(error.message)", source: .remote)
        }
    }

    /// Makes a unary call without a Swift task, a continuation or a future:
    /// `completion` runs on ``eventLoop`` with the response or the error,
    /// inside the read that brought the response, so a call made from it goes
    /// out with that read's one flush (as a bare SwiftNIO client chains its
    /// requests). For callers that live on the event loop (a NIO handler, a
    /// load generator); there is no cancellation (use ``CallOptions/timeout``).
    /// Before the first connection, while reconnecting, and to send again a call
    /// the server never started, it takes the path of
    /// ``unary(_:request:response:options:)``, and `completion` runs from a task,
    /// still on ``eventLoop``.
    @inlinable
    public func unary<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request, response: Response.Type = Response.self,
        options: CallOptions = CallOptions(),
        completion: @escaping @Sendable (Result<Response, RPCError>) -> Void
    ) {
        var encoded = ByteBuffer()
        request.serialize(into: &encoded)
        unaryCall(method, options: options, request: encoded) { result in
            completion(result.flatMap { Self.decode($0, as: Response.self, method: method) })
        }
    }

    /// Makes a unary call with a request encoded beforehand (sent as is, not encoded again), as
    /// ``unary(_:request:response:options:completion:)`` does: a caller that sends the same
    /// requests again and again (a load generator) encodes each once.
    @inlinable
    public func unary<Request: WireMessage, Response: WireMessage>(
        _ method: String, encoded request: EncodedMessage<Request>, response: Response.Type = Response.self,
        options: CallOptions = CallOptions(),
        completion: @escaping @Sendable (Result<Response, RPCError>) -> Void
    ) {
        unaryCall(method, options: options, request: request.bytes) { result in
            completion(result.flatMap { Self.decode($0, as: Response.self, method: method) })
        }
    }

    /// Makes a unary call with a request encoded beforehand, as the completion-handler `unary` with `encoded:` does,
    /// but hands over the response still encoded (``EncodedMessage/decoded()`` decodes it): for a caller that times
    /// the call to the response's arrival, as a bare load generator does, or passes the bytes on.
    @inlinable
    public func unary<Request: WireMessage, Response: WireMessage>(
        _ method: String, encoded request: EncodedMessage<Request>, response: EncodedMessage<Response>.Type,
        options: CallOptions = CallOptions(),
        completion: @escaping @Sendable (Result<EncodedMessage<Response>, RPCError>) -> Void
    ) {
        unaryCall(method, options: options, request: request.bytes) { result in
            completion(result.map { EncodedMessage(bytes: $0) })
        }
    }

    /// A failed call's error as an ``RPCError`` (the calls throw nothing else).
    private static func callError(_ error: any Error) -> RPCError {
        error as? RPCError ?? RPCError(.unknown, "call failed: \(error)", source: .local)
    }

    /// Makes the call the awaited way, from a task on ``eventLoop``, and hands its outcome to `completion`.
    private func awaitedUnaryCall(
        _ method: String, options: CallOptions, request: ByteBuffer, retries: Int?,
        completion: @escaping @Sendable (Result<ByteBuffer, RPCError>) -> Void
    ) {
        Task(executorPreference: EventLoopTaskExecutor(eventLoop)) {
            do {
                completion(
                    .success(
                        // Without a client span: calls made with a completion handler carry the context only.
                        try await self.unaryCallRetrying(method, options: options, retries: retries) {
                            $0.writeImmutableBuffer(request)
                        }))
            } catch {
                completion(.failure(Self.callError(error)))
            }
        }
    }

    /// The untyped part of the unary call with a completion handler: `request` is the encoded request.
    @usableFromInline
    func unaryCall(
        _ method: String, options: CallOptions, request: ByteBuffer,
        completion: @escaping @Sendable (Result<ByteBuffer, RPCError>) -> Void
    ) {
        let loop = eventLoop
        guard let connection = readyConnection() else {
            // No connection yet (or it is going away): connecting takes a task.
            return awaitedUnaryCall(method, options: options, request: request, retries: nil, completion: completion)
        }
        let codec = MessageCodec(
            maximumMessageSize: configuration.maximumMessageSize, allocator: connection.channel.allocator)
        let prepared: PreparedCall
        do {
            prepared = try prepare(method, options, on: connection, codec: codec, request: request)
        } catch {
            return loop.runOnLoop { completion(.failure(error)) }
        }
        let slot = ClientCall.UnarySlot(
            .callback { result in
                switch result {
                case .success(let received):
                    do throws(WireError) {
                        completion(.success(try codec.inflated(received.payload, flags: received.flags)))
                    } catch {
                        completion(
                            .failure(
                                RPCError(
                                    .internal, "response to \(method) cannot be inflated: \(error.message)",
                                    source: .remote)))
                    }
                case .failure(let error as RPCError) where error.source == .unprocessed:
                    // Never started by the server (its connection was going away): sent again, as unary's transparent retry
                    // does (this was the first of its attempts).
                    self.awaitedUnaryCall(
                        method, options: options, request: request, retries: self.endpoints.count - 1,
                        completion: completion)
                case .failure(let error):
                    completion(.failure(Self.callError(error)))
                }
            })
        let call = ClientCall(method: method, connection: connection.handler, sink: .unary(slot))
        // Opened at once on the loop (a call chained from a completion is): no closure to allocate and copy the prepared call into.
        if loop.inEventLoop { prepared.open(call) } else { loop.execute { prepared.open(call) } }
    }

    /// Makes a server-streaming call: one request, a sequence of responses.
    ///
    /// The call starts when iteration starts. Breaking out of the loop, or
    /// cancelling the iterating task, sends CANCEL. Responses are granted back
    /// to the server's flow-control window as they are consumed, so a slow
    /// reader holds the server to about one window of buffered bytes.
    public func serverStreaming<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request, response: Response.Type = Response.self,
        options: CallOptions = CallOptions()
    ) -> ResponseStream<Response> {
        ResponseStream(client: self, method: method, request: request, options: options)
    }

    /// Opens a call on the current connection, connecting first if needed.
    func startCall(
        method: String, request: some WireMessage, options: CallOptions
    ) async throws -> (AsyncThrowingStream<ClientCall.Received, Error>, ClientCall, MessageCodec) {
        let prepared = try await prepare(method, options) { request.serialize(into: &$0) }
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: ClientCall.Received.self)
        let call = ClientCall(method: method, connection: prepared.connection.handler, sink: .stream(continuation))
        continuation.onTermination = { reason in
            if case .cancelled = reason { call.cancel() }
        }
        prepared.connection.handler.eventLoop.runOnLoop { prepared.open(call) }
        return (stream, call, prepared.codec)
    }

    /// A call ready to open: its connection, codec, encoded request and HEADERS.
    private struct PreparedCall: Sendable {
        var connection: ClientConnection
        var codec: MessageCodec
        var payload: ByteBuffer
        var flags: FrameFlags
        var headers: CallHeaders
        var timeout: CallTimeout?

        /// Sends HEADERS and the request for `call` (on the connection's event loop).
        func open(_ call: ClientCall) {
            connection.handler.value.open(call, headers: headers, request: payload, flags: flags, timeout: timeout)
        }
    }

    /// Connects if needed and encodes the request, refusing one over the size limit.
    private func prepare(
        _ method: String, _ options: CallOptions, _ serialize: (inout ByteBuffer) -> Void
    ) async throws -> PreparedCall {
        if Task.isCancelled {
            throw RPCError(.cancelled, "call to \(method) was cancelled before it started", source: .local)
        }
        let connection = try await self.connection()
        let codec = MessageCodec(
            maximumMessageSize: configuration.maximumMessageSize, allocator: connection.channel.allocator)
        return try prepare(method, options, on: connection, codec: codec, request: codec.encoding(serialize))
    }

    /// Frames the encoded `request` for `connection`, refusing one over the size limit.
    private func prepare(
        _ method: String, _ options: CallOptions, on connection: ClientConnection, codec: MessageCodec,
        request: ByteBuffer
    ) throws(RPCError) -> PreparedCall {
        let (payload, flags) = try codec.framed(request, compress: options.compress, what: "request to \(method)")
        let timeout = options.resolvedTimeout ?? defaultTimeout
        let metadata = tracer.map { CallTracing.inject($0, into: options.metadata) } ?? options.metadata
        let headers = CallHeaders(method: method, timeoutMs: timeout?.milliseconds ?? 0, metadata: metadata)
        return PreparedCall(
            connection: connection, codec: codec, payload: payload, flags: flags, headers: headers, timeout: timeout)
    }

    // MARK: Connection

    /// Closes the connection; calls in flight fail with UNAVAILABLE and later calls throw.
    public func close() async {
        let previous = state.withLockedValue { state -> State in
            defer { state = .closed }
            return state
        }
        switch previous {
        case .ready(let connection):
            try? await connection.channel.close()
        case .connecting(let task):
            if let connection = try? await task.value { try? await connection.channel.close() }
        case .idle, .closed:
            break
        }
    }

    private enum Next {
        case use(ClientConnection)
        case await(Task<ClientConnection, Error>)
    }

    /// The connection calls go to now, without waiting; nil while there is none (or it is going away).
    private func readyConnection() -> ClientConnection? {
        state.withLockedValue { state in
            if case .ready(let connection) = state, !connection.isRetired { return connection }
            return nil
        }
    }

    private func connection() async throws -> ClientConnection {
        let next: Next = try state.withLockedValue { state in
            switch state {
            case .ready(let connection) where !connection.isRetired:
                return .use(connection)
            case .connecting(let task):
                return .await(task)
            case .idle, .ready:
                let task = Task { try await self.connectWithBackoff() }
                state = .connecting(task)
                return .await(task)
            case .closed:
                throw RPCError(.unavailable, "client for \(target) is closed", source: .local)
            }
        }
        switch next {
        case .use(let connection):
            return connection
        case .await(let task):
            return try await task.value
        }
    }

    private func connectWithBackoff() async throws -> ClientConnection {
        var attempt = 0
        while true {
            attempt += 1
            let start = preferred.withLockedValue { $0 }
            var failures: [String] = []
            var refusals: [RPCError] = []
            var connected: (ClientConnection, Int)?
            // One attempt is one pass over the endpoints, from the one that worked last.
            for offset in 0..<endpoints.count {
                let index = (start + offset) % endpoints.count
                let endpoint = endpoints[index]
                do {
                    connected = (try await connectOnce(to: endpoint), index)
                    break
                } catch let error as RPCError {
                    // Refused for good (TLS trust, plaintext off loopback): not retried with backoff.
                    refusals.append(error)
                    failures.append(endpoints.count > 1 ? "\(endpoint): \(error.message)" : error.message)
                } catch {
                    logger.debug("connection attempt \(attempt) to \(endpoint) failed: \(error)")
                    failures.append(endpoints.count > 1 ? "\(endpoint): \(error)" : "\(error)")
                }
            }
            if let (connection, index) = connected {
                let usable = state.withLockedValue { state -> Bool in
                    guard case .connecting = state else { return false }
                    state = .ready(connection)
                    return true
                }
                if !usable {
                    try? await connection.channel.close()
                    throw RPCError(.unavailable, "client for \(target) is closed", source: .local)
                }
                preferred.withLockedValue { $0 = index }
                return connection
            }
            let refused = refusals.count == endpoints.count
            if refused || attempt >= max(configuration.backoff.maximumAttempts, 1) {
                // The next call must try again rather than await this failed attempt forever.
                state.withLockedValue { state in
                    if case .connecting = state { state = .idle }
                }
                if refused, refusals.count == 1 { throw refusals[0] }
                let what = refused ? "every endpoint refused" : "after \(attempt) attempt(s)"
                throw RPCError(
                    .unavailable, "cannot connect to \(target) \(what): \(failures.joined(separator: "; "))",
                    source: .connect)
            }
            try? await Task.sleep(for: configuration.backoff.delay(afterAttempt: attempt))
        }
    }

    private func connectOnce(to endpoint: Endpoint) async throws -> ClientConnection {
        let configuration = self.configuration
        let target = endpoint.description
        let host = endpoint.host
        if configuration.tls == nil, !configuration.allowsPlaintextOffLoopback, !Loopback.contains(host: host) {
            throw RPCError(
                .unavailable,
                "refusing to send calls in plaintext to \(target), which is not a loopback address: configure TLS trust roots, or allow insecure plaintext",
                source: .connect)
        }
        let handshake = NIOLockedValueBox<EventLoopFuture<Void>?>(nil)
        let logger = self.logger
        let state = self.state
        let installed = NIOLockedValueBox<ClientConnection?>(nil)
        let bootstrap = ClientBootstrap(group: eventLoop)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                if let tls = configuration.tls {
                    let promise = channel.eventLoop.makePromise(of: Void.self)
                    handshake.withLockedValue { $0 = promise.futureResult }
                    // The handshake gets the connect timeout too: a peer that accepts TCP and never answers is given up on.
                    let deadline = channel.eventLoop.scheduleTask(in: TimeAmount(configuration.connectTimeout)) {
                        promise.fail(TransportSecurityError.handshakeTimedOut)
                        channel.close(promise: nil)
                    }
                    promise.futureResult.whenComplete { _ in deadline.cancel() }
                    do {
                        try channel.pipeline.syncOperations.addHandlers([
                            try tls.makeHandler(host: host), TLSHandshakeHandler(handshake: promise),
                        ])
                    } catch {
                        promise.fail(error)
                        return channel.eventLoop.makeFailedFuture(error)
                    }
                }
                let transport =
                    configuration.transportConfigurator?(channel) ?? channel.eventLoop.makeSucceededVoidFuture()
                return transport.flatMapThrowing {
                    let channelID = ObjectIdentifier(channel)
                    let retired = NIOLockedValueBox(false)
                    let handler = ClientConnectionHandler(
                        target: target, logger: logger, maximumMessageSize: configuration.maximumMessageSize
                    ) {
                        // Stop routing new calls here; the next call reconnects.
                        retired.withLockedValue { $0 = true }
                        state.withLockedValue { state in
                            if case .ready(let current) = state, ObjectIdentifier(current.channel) == channelID {
                                state = .idle
                            }
                        }
                    }
                    // The handler reads and writes the frames itself; PONGs go on to the keepalive behind it, whose PINGs go out through it.
                    try channel.pipeline.syncOperations.addHandlers([
                        PrefaceHandler(),
                        handler,
                        KeepaliveHandler(configuration: configuration.keepalive),
                    ])
                    let connection = ClientConnection(
                        channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop),
                        retired: retired, endpoint: endpoint)
                    installed.withLockedValue { $0 = connection }
                }
            }
        let channel = try await bootstrap.connect(host: host, port: endpoint.port).get()
        if let handshake = handshake.withLockedValue({ $0 }) {
            do {
                try await handshake.get()
            } catch let error as TransportSecurityError {
                // Closed or silent before the handshake (a server at its connection cap closes at once): retried with backoff.
                try? await channel.close()
                throw error
            } catch {
                try? await channel.close()
                // Not retried: a certificate that does not verify will not start to in the next second.
                if TransportSecurityError.isCertificateRefusal(error) {
                    throw RPCError(.unavailable, "TLS handshake with \(target) failed: \(error)", source: .connect)
                }
                // The peer went away mid-handshake (EOF, reset: a server at its connection cap): retried with backoff.
                throw TransportSecurityError("the TLS handshake with \(target) did not complete: \(error)")
            }
        }
        guard let connection = installed.withLockedValue({ $0 }) else {
            try? await channel.close()
            throw RPCError(.internal, "connection to \(target) was set up without its handler", source: .connect)
        }
        return connection
    }
}

/// A connected channel and its connection handler. A class: every call takes the connection out of
/// the client's lock, and a struct's copy would retain the channel, the handler, its loop, the flag and
/// the endpoint's strings each time.
final class ClientConnection: Sendable {
    let channel: Channel
    let handler: NIOLoopBound<ClientConnectionHandler>
    /// Set once the connection takes no new calls (GOAWAY received, or closed).
    let retired: NIOLockedValueBox<Bool>
    /// The server it is connected to.
    let endpoint: Endpoint

    init(
        channel: Channel, handler: NIOLoopBound<ClientConnectionHandler>, retired: NIOLockedValueBox<Bool>,
        endpoint: Endpoint
    ) {
        self.channel = channel
        self.handler = handler
        self.retired = retired
        self.endpoint = endpoint
    }

    var isRetired: Bool { retired.withLockedValue { $0 } }
}
