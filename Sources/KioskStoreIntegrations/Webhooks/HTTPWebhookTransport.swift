import AsyncHTTPClient
import KioskStoreCore
import NIOCore

/// Webhook deliveries over HTTP(S) with async-http-client: a client of its own per delivery pass.
public struct HTTPWebhookTransport: WebhookTransport {
    private let client: HTTPClient
    private let ownsClient: Bool

    /// A transport on a client of its own, with `timeout` for connecting and for each read: the deadline
    /// of a POST covers only the response head, and a receiver that stalls in its body must not hold
    /// every delivery.
    ///
    /// The client makes no spans of its own: the store traces each delivery (`webhook.deliver`) and sends its
    /// `traceparent`; a span of the client's would record the receiver's full URL, query and all, which can hold
    /// a secret.
    public init(timeout: Duration) {
        var configuration = HTTPClient.Configuration(
            timeout: .init(connect: TimeAmount(timeout), read: TimeAmount(timeout)))
        configuration.tracing.tracer = nil
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        ownsClient = true
    }

    /// A transport on `client`, which the caller keeps and shuts down.
    public init(client: HTTPClient) {
        self.client = client
        ownsClient = false
    }

    public func post(
        url: String, headers: [(name: String, value: String)], body: [UInt8], timeout: Duration
    ) async -> String? {
        do {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            for header in headers { request.headers.add(name: header.name, value: header.value) }
            request.body = .bytes(ByteBuffer(bytes: body))
            let response = try await client.execute(request, deadline: .now() + TimeAmount(timeout))
            _ = try? await response.body.collect(upTo: 64 * 1024)
            return (200..<300).contains(response.status.code) ? nil : "HTTP \(response.status.code)"
        } catch {
            return "\(error)"
        }
    }

    public func close() async {
        if ownsClient { try? await client.shutdown() }
    }
}
