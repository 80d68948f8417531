import KioskWire
import NIOCore

/// A service: a set of methods registered on an ``RPCRouter``.
public protocol RPCService: Sendable {
    /// The service's full name, "package.Service" (e.g. `kiosk.store.v1.Store`).
    var serviceName: String { get }
    /// Registers the service's methods.
    func register(in router: inout RPCRouter)
}

/// Sends the messages of a server-streaming call.
///
/// ``send(_:)`` waits while the call's flow-control window is closed, so a slow
/// reader makes the handler wait instead of the server buffering.
public struct ServerStreamWriter<Response: WireMessage>: Sendable {
    let call: ServerCall
    let codec: MessageCodec

    /// Sends one response message; waits for the client's window when it is spent.
    /// - Throws: `CancellationError` once the call has ended (cancelled, deadline, connection lost).
    public func send(_ response: Response) async throws {
        let (payload, flags) = try codec.encodeWithinLimit(response, compress: call.compressResponses, what: "response")
        try await call.send(payload: payload, flags: flags)
    }
}

/// The methods a server serves, by full method name ("/package.Service/Method").
public struct RPCRouter: Sendable {
    /// A type-erased method: decodes the request, runs the handler, sends responses.
    struct Method: Sendable {
        enum Kind: Sendable { case unary, serverStreaming }
        var kind: Kind
        var run: @Sendable (_ payload: ByteBuffer, _ flags: FrameFlags, _ call: ServerCall, _ codec: MessageCodec) async throws -> Void
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
    public mutating func registerUnary<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request.Type = Request.self, response: Response.Type = Response.self,
        handler: @escaping @Sendable (Request, ServerContext) async throws -> Response
    ) {
        methods[method] = Method(kind: .unary) { payload, flags, call, codec in
            let request = try codec.decode(Request.self, payload: payload, flags: flags)
            let response = try await handler(request, call.context)
            let (bytes, outFlags) = try codec.encodeWithinLimit(response, compress: call.compressResponses, what: "response")
            call.complete(withResponse: bytes, flags: outFlags)
        }
    }

    /// Registers a server-streaming method: one request, any number of responses.
    public mutating func registerServerStreaming<Request: WireMessage, Response: WireMessage>(
        _ method: String, request: Request.Type = Request.self, response: Response.Type = Response.self,
        handler: @escaping @Sendable (Request, ServerStreamWriter<Response>, ServerContext) async throws -> Void
    ) {
        methods[method] = Method(kind: .serverStreaming) { payload, flags, call, codec in
            let request = try codec.decode(Request.self, payload: payload, flags: flags)
            try await handler(request, ServerStreamWriter(call: call, codec: codec), call.context)
            call.complete(withResponse: nil, flags: [])
        }
    }

    func method(named name: String) -> Method? {
        methods[name]
    }
}
