import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A small HTTP/1.1 server for a service's side doors, next to its RPC port: the operator endpoint (Prometheus
/// metrics, health) and the store's Stripe webhook receiver. Each request is read whole (up to
/// ``Limits-swift.struct/maxBody``) and answered by one `async` function.
///
/// Bounded as the RPC server is: at most ``Limits-swift.struct/maxConnections`` connections (more are closed on
/// accept); a connection that sends nothing for ``Limits-swift.struct/idleTimeout`` while no request of it is being
/// answered is closed; a request must arrive whole within ``Limits-swift.struct/requestDeadline`` of the connection
/// opening or of the last answer, so a sender trickling bytes cannot hold a connection; a handler that does not
/// answer within ``Limits-swift.struct/answerTimeout`` is answered 503 for, and a body announced over the limit is
/// refused 413 before it is read. A client's `Connection: close` (or HTTP/1.0 without keep-alive) closes the
/// connection after the answer. HTTPS with a ``ServerTLSIdentity``; plaintext only on loopback.
public final class SideHTTPServer: Sendable {
    /// A request, read whole.
    public struct Request: Sendable {
        /// Its method, path, query and headers.
        public var head: HTTPRequestHead
        /// Its body: empty when none was sent.
        public var body: [UInt8]
        /// The address of the peer that sent it (its IP address), when known.
        public var remoteAddress: String? = nil
        /// The path without the query.
        public var path: String { head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "" }
        /// The query string (after `?`), empty when none.
        public var query: String {
            head.uri.split(separator: "?", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
        }
    }

    /// An answer.
    public struct Response: Sendable {
        /// The HTTP status code.
        public var status: Int
        /// Its `Content-Type`.
        public var contentType: String
        /// Its body (not sent to a HEAD request; its length is).
        public var body: [UInt8]
        /// More headers (`Set-Cookie`, `Location`, …); `Content-Type` and `Content-Length` are set from the above.
        public var headers: [(String, String)]

        /// An answer with `status`, `body` of `contentType`, and more `headers`.
        public init(status: Int, contentType: String, body: [UInt8], headers: [(String, String)] = []) {
            self.status = status
            self.contentType = contentType
            self.body = body
            self.headers = headers
        }

        /// A plain-text answer: `message` and a new line.
        public static func text(_ status: Int, _ message: String) -> Response {
            Response(status: status, contentType: "text/plain; charset=utf-8", body: Array((message + "\n").utf8))
        }
    }

    /// How much the server takes.
    public struct Limits: Sendable {
        /// Connections open at once, at most; more are closed on accept.
        public var maxConnections: Int
        /// The largest request body taken; a larger one is answered 413.
        public var maxBody: Int
        /// A connection that sends nothing for this long, while nothing of it is being answered, is closed.
        public var idleTimeout: TimeAmount
        /// A request must arrive whole within this long of the connection opening or of the last answer.
        public var requestDeadline: TimeAmount
        /// A handler that has not answered within this long is answered 503 for it, and the connection closed
        /// (its late answer is dropped).
        public var answerTimeout: TimeAmount

        /// Limits with the usual timeouts unless given: idle 10 s, a whole request within 15 s, an answer
        /// within 30 s.
        public init(
            maxConnections: Int, maxBody: Int, idleTimeout: TimeAmount = .seconds(10),
            requestDeadline: TimeAmount = .seconds(15), answerTimeout: TimeAmount = .seconds(30)
        ) {
            self.maxConnections = maxConnections
            self.maxBody = maxBody
            self.idleTimeout = idleTimeout
            self.requestDeadline = requestDeadline
            self.answerTimeout = answerTimeout
        }
    }

    /// Answers one request.
    public typealias Handler = @Sendable (Request) async -> Response

    /// The limits it serves with.
    public let limits: Limits
    private let handler: Handler
    private let group: any EventLoopGroup
    private let state = NIOLockedValueBox<(channel: (any Channel)?, port: Int)>((nil, 0))
    private let connections = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    /// A server answering each request with `handler`; ``start(host:port:tls:)`` listens.
    public init(
        limits: Limits, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        handler: @escaping Handler
    ) {
        self.limits = limits
        self.handler = handler
        self.group = group
    }

    /// Listens on `host`:`port` (0: a port the system picks; see ``port``), HTTPS with `tls`.
    /// - Throws: ``SideHTTPServerError`` for plaintext on an address that is not loopback; a bind failure.
    public func start(host: String = "127.0.0.1", port: Int = 0, tls: ServerTLSIdentity? = nil) async throws {
        guard tls != nil || Loopback.contains(host: host) else {
            throw SideHTTPServerError("plaintext HTTP is served on loopback only (\(host) is not)")
        }
        let handler = self.handler
        let limits = self.limits
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [weak self] channel in
                guard let self, self.track(channel) else { return channel.close() }
                return channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(tls.makeServerHandler()) }
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: limits.idleTimeout))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(SideHTTPHandler(limits: limits, handler: handler))
                }
            }
            .bind(host: host, port: port).get()
        state.withLockedValue {
            $0.channel = channel
            $0.port = channel.localAddress?.port ?? 0
        }
    }

    /// The port listened on.
    public var port: Int { state.withLockedValue { $0.port } }

    /// Connections open now.
    public var openConnections: Int { connections.withLockedValue { $0.count } }

    /// Stops listening and closes open connections.
    public func shutdown() async {
        let channel = state.withLockedValue { state -> (any Channel)? in
            defer { state.channel = nil }
            return state.channel
        }
        try? await channel?.close().get()
        for connection in connections.withLockedValue({ Array($0.values) }) { try? await connection.close().get() }
    }

    /// Counts the connection in; false (not counted) when ``Limits-swift.struct/maxConnections`` are open.
    private func track(_ channel: any Channel) -> Bool {
        let id = ObjectIdentifier(channel)
        let taken = connections.withLockedValue { open -> Bool in
            guard open.count < limits.maxConnections else { return false }
            open[id] = channel
            return true
        }
        guard taken else { return false }
        channel.closeFuture.whenComplete { [weak self] _ in
            _ = self?.connections.withLockedValue { $0.removeValue(forKey: id) }
        }
        return true
    }
}

/// Why a side server cannot start.
public struct SideHTTPServerError: Error, CustomStringConvertible, Sendable {
    /// Why, in words.
    public var description: String
    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

private final class SideHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let limits: SideHTTPServer.Limits
    private let handler: SideHTTPServer.Handler
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false
    /// A request is being answered: the idle timer does not close the connection under it.
    private var answering = false
    private var deadline: Scheduled<Void>?
    /// Fires when the handler took too long (``SideHTTPServer/Limits-swift.struct/answerTimeout``).
    private var answerTimer: Scheduled<Void>?
    /// Counts requests answered, so that a late answer knows it was given up on.
    private var answered: UInt64 = 0
    /// The handler's task while it answers: cancelled when it is given up on or the connection goes.
    private var task: Task<Void, Never>?
    /// A closing answer was written: nothing more is read (a pipelined request is not run).
    private var closing = false

    init(limits: SideHTTPServer.Limits, handler: @escaping SideHTTPServer.Handler) {
        self.limits = limits
        self.handler = handler
    }

    func channelActive(context: ChannelHandlerContext) {
        armDeadline(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        answerTimer?.cancel()
        answerTimer = nil
        task?.cancel()
        task = nil
    }

    private func armDeadline(_ context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        // An answer that comes after the connection closed arms nothing: no task outlives the channel.
        guard context.channel.isActive else { return }
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: limits.requestDeadline) { channel.close(promise: nil) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
            tooLarge = false
            // A body announced over the limit is refused before it is read; the connection then closes, since
            // what follows is that body.
            if let length = head.headers.first(name: "Content-Length").flatMap({ Int($0) }), length > limits.maxBody {
                self.head = nil
                deadline?.cancel()
                deadline = nil
                return respond(
                    context, head, .text(413, "the body is over \(limits.maxBody) bytes"), closing: true)
            }
        case .body(let chunk):
            if tooLarge || body.count + chunk.readableBytes > limits.maxBody {
                tooLarge = true
                body = []
            } else {
                body += chunk.readableBytesView
            }
        case .end:
            // Nil after an early refusal: the rest of that request is ignored until the connection closes.
            guard let head else { return }
            self.head = nil
            deadline?.cancel()
            deadline = nil
            let request = SideHTTPServer.Request(
                head: head, body: body, remoteAddress: context.channel.remoteAddress?.ipAddress)
            body = []
            if tooLarge {
                return respond(context, head, .text(413, "the body is over \(limits.maxBody) bytes"))
            }
            answering = true
            let handler = self.handler
            let loop = context.eventLoop
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: loop)
            let number = answered
            answerTimer = loop.scheduleTask(in: limits.answerTimeout) {
                let this = bound.value.handler
                guard this.answering, this.answered == number else { return }
                this.answering = false
                // Cancelled, not left running: a hung handler must not outlive its connection's slot.
                this.task?.cancel()
                this.task = nil
                this.respond(
                    bound.value.context, head, .text(503, "the answer took too long; try again"), closing: true)
            }
            let answer = loop.makePromise(of: SideHTTPServer.Response.self)
            task = Task { answer.succeed(await handler(request)) }
            answer.futureResult.whenSuccess { response in
                let this = bound.value.handler
                // Given up on already (answered 503): the late answer is dropped.
                guard this.answering, this.answered == number else { return }
                this.answering = false
                this.task = nil
                this.respond(bound.value.context, head, response)
            }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            if !answering { context.close(promise: nil) }
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// Writes `response`; then closes the connection when `closing`, or when the client asked to (`Connection:
    /// close`, or HTTP/1.0 without keep-alive).
    private func respond(
        _ context: ChannelHandlerContext, _ head: HTTPRequestHead, _ response: SideHTTPServer.Response,
        closing: Bool = false
    ) {
        answered &+= 1
        answerTimer?.cancel()
        answerTimer = nil
        let closes = closing || !head.isKeepAlive
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: response.contentType)
        headers.add(name: "Content-Length", value: String(response.body.count))
        for (name, value) in response.headers { headers.add(name: name, value: value) }
        if closes { headers.replaceOrAdd(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(
                .head(
                    HTTPResponseHead(
                        version: head.version, status: HTTPResponseStatus(statusCode: response.status),
                        headers: headers))), promise: nil)
        if head.method != .HEAD {
            context.write(
                wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))),
                promise: nil)
        }
        if closes {
            // Set before the write: ending the answer hands over any pipelined request at once, and it is not run.
            self.closing = true
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
            deadline?.cancel()
            deadline = nil
            return
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        // The write may have handed over a pipelined request that is now being answered: no deadline under it.
        if !answering { armDeadline(context) }
    }
}
