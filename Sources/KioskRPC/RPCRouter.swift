import KioskWire
import NIOConcurrencyHelpers
import NIOCore

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
        let (payload, flags) = try call.codec.encodeWithinLimit(response, compress: call.compressResponses, what: "response")
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
        var run: @Sendable (_ payload: ByteBuffer, _ flags: FrameFlags, _ call: ServerCall, _ context: ServerContext) async throws -> Void
        /// Calls opened on this method (shared by every copy of the router).
        let calls = CallCounter()
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
    /// - Parameter authenticator: checks the caller before the request is decoded; nil leaves the method open.
    public mutating func registerUnary<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request.Type = Request.self, response: Response.Type = Response.self,
        authenticator: (any RPCAuthenticator)? = nil,
        handler: @escaping @Sendable (Request, ServerContext) async throws -> Response
    ) {
        methods[method] = Method(kind: .unary, authenticator: authenticator) { payload, flags, call, context in
            let request = try call.codec.decode(Request.self, payload: payload, flags: flags)
            let response = try await handler(request, context)
            let (bytes, outFlags) = try call.codec.encodeWithinLimit(response, compress: call.compressResponses, what: "response")
            call.complete(withResponse: bytes, flags: outFlags)
        }
    }

    /// Registers a server-streaming method: one request, any number of responses.
    /// - Parameter authenticator: checks the caller before the request is decoded; nil leaves the method open.
    public mutating func registerServerStreaming<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request.Type = Request.self, response: Response.Type = Response.self,
        authenticator: (any RPCAuthenticator)? = nil,
        handler: @escaping @Sendable (Request, ServerStreamWriter<Response>, ServerContext) async throws -> Void
    ) {
        methods[method] = Method(kind: .serverStreaming, authenticator: authenticator) { payload, flags, call, context in
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
            let count = method.calls.value
            return count > 0 ? count : nil
        }
    }
}

/// Counts the calls one method has opened.
final class CallCounter: Sendable {
    private let count = NIOLockedValueBox<UInt64>(0)
    func increment() { count.withLockedValue { $0 += 1 } }
    var value: UInt64 { count.withLockedValue { $0 } }
}
