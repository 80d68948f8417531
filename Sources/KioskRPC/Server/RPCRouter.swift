import KioskWire
import NIOCore
import Synchronization

/// A service: a set of methods registered on an ``RPCRouter``.
public protocol RPCService: Sendable {
    /// The service's full name, "package.Service" (e.g. `kiosk.store.v1.Store`).
    var serviceName: String { get }
    /// Registers the service's methods.
    func register(in router: inout RPCRouter)
}

/// Checks a call's credentials from its HEADERS metadata, before the request
/// is decompressed or decoded.
///
/// A method registered with an authenticator is refused with UNAUTHENTICATED
/// (16) at once when its HEADERS carry no `authorization` metadata; otherwise
/// ``authenticate(_:)`` runs when the request has arrived, and only if it
/// returns is the request decoded and the handler run.
public protocol RPCAuthenticator: Sendable {
    /// Returns the caller (an account, a service identity…), which the handler
    /// reads as ``ServerContext/principal``; throws to refuse the call (an
    /// ``RPCError`` or ``RPCErrorConvertible`` with code 16, 7 or 14).
    func authenticate(_ context: ServerContext) async throws -> (any Sendable)?

    /// Checks the credentials without suspending, for a method registered with
    /// ``RPCRouter/registerInlineUnary(_:request:response:authenticator:handler:)``,
    /// which then runs on the event loop that read the request, with no task.
    /// Returns ``InlineAuthentication/suspend`` (the default) when the check
    /// has to wait: the call then runs as a task, through ``authenticate(_:)``.
    func authenticateInline(_ context: ServerContext) throws -> InlineAuthentication

    /// Whether `principal`, which ``authenticateInline(_:)`` returned for an
    /// earlier call on the same connection, still stands for a call whose
    /// HEADERS are byte for byte the same (the same credentials, the same
    /// method): the server then skips the check. Return true only while what
    /// made the check pass still holds (the credential has not expired, the
    /// keys it was checked against are still trusted); the default, false,
    /// checks every call.
    func stillHolds(_ principal: (any Sendable)?) -> Bool
}

extension RPCAuthenticator {
    /// The default: ``InlineAuthentication/suspend``, so the call runs as a task and is checked by
    /// ``RPCAuthenticator/authenticate(_:)``.
    public func authenticateInline(_ context: ServerContext) throws -> InlineAuthentication { .suspend }
    /// The default: false, so every call is checked.
    public func stillHolds(_ principal: (any Sendable)?) -> Bool { false }
}

/// What ``RPCAuthenticator/authenticateInline(_:)`` found.
public enum InlineAuthentication: Sendable {
    /// The caller (``ServerContext/principal``), checked.
    case principal((any Sendable)?)
    /// The check has to wait (a lookup, a fetch): run it as a task.
    case suspend
}

/// What an inline unary handler answers.
public enum InlineAnswer<Response: WireMessage>: Sendable {
    /// The response, at once: written from the event loop, flushed with the
    /// other responses of the same read.
    case response(Response)
    /// A response encoded ahead of time, as a constant answer can be: no encoding per call.
    case encoded(EncodedMessage<Response>)
    /// The answer needs to wait for something (I/O, a fetch): `body` runs as
    /// a task, like a ``RPCRouter/registerUnary(_:request:response:authenticator:handler:)`` handler.
    case suspend(@Sendable () async throws -> Response)
}

/// Sends the messages of a server-streaming call.
///
/// ``send(_:)`` waits while the call's flow-control window is closed or the
/// connection's outbound buffer is over its high-water mark, so a slow reader
/// makes the handler wait instead of the server buffering.
public struct ServerStreamWriter<Response: WireMessage>: Sendable {
    let call: ServerCall

    /// Sends one response message; waits for the client's window and the connection's writability.
    /// - Throws: `CancellationError` once the call has ended (cancelled, deadline, connection lost).
    public func send(_ response: Response) async throws {
        let (payload, flags) = try call.codec.encodeWithinLimit(
            response, compress: call.compressResponses, what: "response")
        try await call.send(payload: payload, flags: flags)
    }

    /// Runs `body` once the call has ended (however it ends) and its last
    /// frame has been written to the socket, or the connection is gone: a
    /// resource held for the call (a download slot) is held until its bytes
    /// have left, not only until they were queued.
    public func whenFinished(_ body: @escaping @Sendable () -> Void) {
        call.whenWritten(body)
    }
}

/// The methods a server serves, by full method name ("/package.Service/Method").
public struct RPCRouter: Sendable {
    /// A type-erased method: decodes the request, runs the handler, sends responses.
    struct Method: Sendable {
        enum Kind: Sendable { case unary, serverStreaming }
        var kind: Kind
        /// Checks credentials before the request is decoded; nil: the method is open to anyone.
        var authenticator: (any RPCAuthenticator)?
        var run:
            @Sendable (_ payload: ByteBuffer, _ flags: FrameFlags, _ call: ServerCall, _ context: ServerContext)
                async throws -> Void
        /// For inline unary methods: decodes, runs the handler and encodes on the event loop.
        var inline: InlineRun?
        /// Calls opened, ended by code, their latency and bytes (shared by every copy of the router).
        let meter = MethodMeter()
    }

    typealias InlineRun =
        @Sendable (
            _ payload: ByteBuffer, _ flags: FrameFlags, _ codec: MessageCodec, _ compress: Bool,
            _ context: ServerContext
        ) throws -> InlineOutcome

    /// What an inline method's run gave.
    enum InlineOutcome: Sendable {
        case finished(ByteBuffer, FrameFlags)
        /// The rest runs as a task; it completes or fails the call itself.
        case suspended(@Sendable (ServerCall) async throws -> Void)
    }

    private(set) var methods: [String: Method] = [:]
    /// The names of the registered services.
    public private(set) var serviceNames: Set<String> = []

    /// An empty router.
    public init() {}

    /// Registers every method of `service`.
    public mutating func add(_ service: some RPCService) {
        serviceNames.insert(service.serviceName)
        service.register(in: &self)
    }

    /// The full method names registered, sorted.
    public var methodNames: [String] { methods.keys.sorted() }

    /// Registers a unary method: one request, one response.
    /// - Parameters:
    ///   - method: the full method name, "/package.Service/Method".
    ///   - request: the request message's type.
    ///   - response: the response message's type.
    ///   - authenticator: checks the caller before the request is decoded; nil leaves the method open.
    ///   - handler: answers a request, given the call's ``ServerContext``; what it throws becomes the call's status.
    public mutating func registerUnary<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request.Type = Request.self, response: Response.Type = Response.self,
        authenticator: (any RPCAuthenticator)? = nil,
        handler: @escaping @Sendable (Request, ServerContext) async throws -> Response
    ) {
        methods[method] = Method(kind: .unary, authenticator: authenticator) { payload, flags, call, context in
            let request = try call.codec.decode(Request.self, payload: payload, flags: flags)
            let response = try await handler(request, context)
            let (bytes, outFlags) = try call.codec.encodeWithinLimit(
                response, compress: call.compressResponses, what: "response")
            call.complete(withResponse: bytes, flags: outFlags)
        }
    }

    /// Registers a unary method whose handler answers without suspending (or
    /// says it has to: ``InlineAnswer/suspend(_:)``): it runs on the event
    /// loop that read the request, with no task and no thread hop, and its
    /// response is flushed with the others of the same read, as a bare
    /// SwiftNIO server would. The handler must not block: CPU work of the
    /// order of a signature check is fine, I/O or a contended lock is not.
    /// With ``ServerConfiguration/runsHandlersOnEventLoop`` off, it runs as a task like any handler.
    /// - Parameters:
    ///   - method: the full method name, "/package.Service/Method".
    ///   - request: the request message's type.
    ///   - response: the response message's type.
    ///   - authenticator: checks the caller first, inline when its ``RPCAuthenticator/authenticateInline(_:)`` can.
    ///   - handler: answers a request without suspending, or returns ``InlineAnswer/suspend(_:)`` to go on in a task.
    @inlinable
    public mutating func registerInlineUnary<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request.Type = Request.self, response: Response.Type = Response.self,
        authenticator: (any RPCAuthenticator)? = nil,
        handler: @escaping @Sendable (Request, ServerContext) throws -> InlineAnswer<Response>
    ) {
        // Inlinable, so that decoding and encoding are specialised for the service's types (generic
        // protobuf-c bridging costs runtime metadata lookups and value-witness copies on every call);
        // the rest is untyped: bytes in, bytes out.
        registerInlineUnaryBytes(method, authenticator: authenticator) { bytes, context throws -> InlineBytes in
            switch try handler(try Request(serializedBytes: bytes), context) {
            case .response(let response):
                var encoded = ByteBuffer()
                response.serialize(into: &encoded)
                return .response(encoded)
            case .encoded(let encoded):
                return .response(encoded.bytes)
            case .suspend(let body):
                return .suspend {
                    var encoded = ByteBuffer()
                    try await body().serialize(into: &encoded)
                    return encoded
                }
            }
        }
    }

    /// What an inline method's typed part answers: the response's encoding, or the task that will give it.
    @usableFromInline
    enum InlineBytes: Sendable {
        case response(ByteBuffer)
        case suspend(@Sendable () async throws -> ByteBuffer)
    }

    /// Registers an inline unary method from its typed part `answer` (request
    /// bytes, inflated, to ``InlineBytes``).
    @usableFromInline
    mutating func registerInlineUnaryBytes(
        _ method: String, authenticator: (any RPCAuthenticator)?,
        answer: @escaping @Sendable (ByteBuffer, ServerContext) throws -> InlineBytes
    ) {
        var registered = Method(kind: .unary, authenticator: authenticator) { payload, flags, call, context in
            let encoded: ByteBuffer
            switch try answer(try call.codec.inflated(payload, flags: flags), context) {
            case .response(let bytes): encoded = bytes
            case .suspend(let body): encoded = try await body()
            }
            let (bytes, outFlags) = try call.codec.framed(encoded, compress: call.compressResponses, what: "response")
            call.complete(withResponse: bytes, flags: outFlags)
        }
        registered.inline = { payload, flags, codec, compress, context in
            switch try answer(try codec.inflated(payload, flags: flags), context) {
            case .response(let encoded):
                let (bytes, outFlags) = try codec.framed(encoded, compress: compress, what: "response")
                return .finished(bytes, outFlags)
            case .suspend(let body):
                return .suspended { call in
                    let (bytes, outFlags) = try call.codec.framed(
                        try await body(), compress: call.compressResponses, what: "response")
                    call.complete(withResponse: bytes, flags: outFlags)
                }
            }
        }
        methods[method] = registered
    }

    /// Registers a server-streaming method: one request, any number of responses.
    /// - Parameters:
    ///   - method: the full method name, "/package.Service/Method".
    ///   - request: the request message's type.
    ///   - response: the response messages' type.
    ///   - authenticator: checks the caller before the request is decoded; nil leaves the method open.
    ///   - handler: sends the responses through its ``ServerStreamWriter``; the call ends with OK when it returns,
    ///     or with the status of what it throws.
    public mutating func registerServerStreaming<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request.Type = Request.self, response: Response.Type = Response.self,
        authenticator: (any RPCAuthenticator)? = nil,
        handler: @escaping @Sendable (Request, ServerStreamWriter<Response>, ServerContext) async throws -> Void
    ) {
        methods[method] = Method(kind: .serverStreaming, authenticator: authenticator) {
            payload, flags, call, context in
            let request = try call.codec.decode(Request.self, payload: payload, flags: flags)
            try await handler(request, ServerStreamWriter(call: call), context)
            call.complete(withResponse: nil, flags: [])
        }
    }

    func method(named name: String) -> Method? {
        methods[name]
    }

    /// Calls opened so far, by full method name (methods never called are left out).
    public var callCounts: [String: UInt64] {
        methods.compactMapValues { method in
            let count = method.meter.value
            return count > 0 ? count : nil
        }
    }

    /// Calls to a method this router does not serve, refused with UNIMPLEMENTED.
    let unknownMeter = MethodMeter()

    /// Every method's meter, by name, and the unknown methods' as "unknown".
    func meterReadings(timed: Bool) -> [ServerMeter.MethodReading] {
        methods.map { $0.value.meter.reading(method: $0.key, timed: timed) }.sorted { $0.method < $1.method }
            + [unknownMeter.reading(method: "unknown", timed: timed)]
    }
}
