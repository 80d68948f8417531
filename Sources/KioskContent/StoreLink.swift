import KioskAPI
import KioskRPC
import KioskSigning
import KioskWire

/// The content service's calls to the store: keys and the refunds in its event log,
/// with the service's own credential (role `content`). Callers' tokens never
/// go to the store: they are access tokens, checked offline.
struct StoreLink: Sendable {
    let client: RPCClient
    let token: String

    init(endpoints: [Endpoint], credential: String, tls: ClientTLS?) {
        // Short keepalive: a store that stops answering is noticed within seconds.
        let configuration = ClientConfiguration(
            connectTimeout: .seconds(2),
            backoff: ConnectionBackoff(
                initial: .milliseconds(50), maximum: .milliseconds(500), multiplier: 2, jitter: 0.2, maximumAttempts: 2),
            keepalive: Keepalive(interval: .seconds(2), timeout: .seconds(2)), tls: tls)
        self.client = RPCClient(endpoints: endpoints, configuration: configuration)
        self.token = credential
    }

    private func options(token: String, timeout: Duration? = .seconds(5)) -> CallOptions {
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        return CallOptions(timeout: timeout, metadata: metadata)
    }

    func publicKeys() async throws -> [ReceiptPublicKey] {
        let response = try await client.unary(
            "/kiosk.store.v1.Store/PublicKeys", request: StoreV1.PublicKeysRequest(),
            response: StoreV1.PublicKeysResponse.self,
            options: options(token: token))
        return response.keys.map {
            ReceiptPublicKey(
                id: $0.keyID, rawRepresentation: $0.ed25519PublicKey, notBeforeMs: $0.notBeforeMs,
                notAfterMs: $0.notAfterMs)
        }
    }

    /// The store's REFUNDED and REFUND_REVERSED events after `cursor`, then heartbeats and each new one (WatchEvents).
    func refunds(since cursor: UInt64) -> ResponseStream<StoreV1.WatchEventsResponse> {
        client.serverStreaming(
            "/kiosk.store.v1.Store/WatchEvents",
            request: StoreV1.WatchEventsRequest(since: cursor, types: [.refunded, .refundReversed]),
            response: StoreV1.WatchEventsResponse.self, options: options(token: token, timeout: nil))
    }
}
