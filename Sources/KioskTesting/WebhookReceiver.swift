import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A webhook receiver for tests: an HTTP server on 127.0.0.1 that records every
/// POST (headers and body) and answers 200, or a chosen status for the next
/// requests (``failNext(_:status:)``), as a receiver that is having trouble.
public final class WebhookReceiver: Sendable {
    /// One request as received.
    public struct Request: Sendable {
        /// The request's path (its URI as sent, with any query), e.g. `/kiosk`.
        public var path: String
        /// The request's headers, by lower-cased name (the last value of a repeated name).
        public var headers: [String: String]
        /// The request's body; one over 1 MiB is cut short.
        public var body: [UInt8]
        /// The status it was answered with.
        public var status: Int
    }

    private let group: any EventLoopGroup
    private let state = NIOLockedValueBox<(channel: (any Channel)?, port: Int, requests: [Request], failures: [Int])>(
        (nil, 0, [], []))
    private let connections = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    /// Creates a receiver on `group`'s event loops; ``start(port:)`` starts listening.
    public init(group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        self.group = group
    }

    /// Listens on 127.0.0.1:`port` (0: a port the system picks; see ``port``).
    public func start(port: Int = 0) async throws {
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [weak self] channel in
                self?.track(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(
                        WebhookReceiverHandler { request in self?.answer(request) ?? 503 })
                }
            }
            .bind(host: "127.0.0.1", port: port).get()
        state.withLockedValue {
            $0.channel = channel
            $0.port = channel.localAddress?.port ?? 0
        }
    }

    /// Stops listening and closes the open connections (connections to the port are refused from now on).
    public func shutdown() async throws {
        let channel = state.withLockedValue { state -> (any Channel)? in
            defer { state.channel = nil }
            return state.channel
        }
        try await channel?.close().get()
        for connection in connections.withLockedValue({ Array($0.values) }) { try? await connection.close().get() }
    }

    private func track(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        connections.withLockedValue { $0[id] = channel }
        channel.closeFuture.whenComplete { [weak self] _ in
            _ = self?.connections.withLockedValue { $0.removeValue(forKey: id) }
        }
    }

    /// The port listened on (kept after ``shutdown()``, to start again on it).
    public var port: Int { state.withLockedValue { $0.port } }

    /// Answers the next `count` requests with `status` instead of 200.
    public func failNext(_ count: Int, status: Int = 500) {
        state.withLockedValue { $0.failures += Array(repeating: status, count: count) }
    }

    /// Every request so far, in the order they arrived.
    public var requests: [Request] { state.withLockedValue { $0.requests } }

    private func answer(_ request: Request) -> Int {
        state.withLockedValue { state in
            var request = request
            request.status = state.failures.isEmpty ? 200 : state.failures.removeFirst()
            state.requests.append(request)
            return request.status
        }
    }
}

private final class WebhookReceiverHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let answer: (WebhookReceiver.Request) -> Int
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []

    init(answer: @escaping (WebhookReceiver.Request) -> Int) {
        self.answer = answer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
        case .body(let chunk):
            if body.count < 1 << 20 { body += chunk.readableBytesView }
        case .end:
            guard let head else { return }
            self.head = nil
            var headers: [String: String] = [:]
            for (name, value) in head.headers { headers[name.lowercased()] = value }
            let status = answer(WebhookReceiver.Request(path: head.uri, headers: headers, body: body, status: 0))
            var responseHeaders = HTTPHeaders()
            responseHeaders.add(name: "Content-Length", value: "0")
            context.write(
                wrapOutboundOut(
                    .head(
                        HTTPResponseHead(
                            version: head.version, status: HTTPResponseStatus(statusCode: status),
                            headers: responseHeaders))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
