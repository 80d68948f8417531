import KioskAPI
import KioskRPC
import KioskWire

/// The content service's calls to the store: keys, the revocation feed, and
/// who a caller's token belongs to.
struct StoreLink: Sendable {
    let client: RPCClient
    let token: String

    init(host: String, port: Int, token: String) {
        // Short keepalive: a store that stops answering is noticed within seconds.
        let configuration = ClientConfiguration(
            connectTimeout: .seconds(2),
            backoff: ConnectionBackoff(initial: .milliseconds(50), maximum: .milliseconds(500), multiplier: 2, jitter: 0.2, maximumAttempts: 2),
            keepalive: Keepalive(interval: .seconds(2), timeout: .seconds(2)))
        self.client = RPCClient(host: host, port: port, configuration: configuration)
        self.token = token
    }

    private func options(token: String, timeout: Duration? = .seconds(5)) -> CallOptions {
        var metadata = Metadata()
        metadata.add("authorization", "Bearer \(token)")
        return CallOptions(timeout: timeout, metadata: metadata)
    }

    func publicKeys() async throws -> [ReceiptPublicKey] {
        let response = try await client.unary(
            "/kiosk.store.v1.Store/PublicKeys", request: StoreV1.PublicKeysRequest(), response: StoreV1.PublicKeysResponse.self,
            options: options(token: token))
        return response.keys.map { ReceiptPublicKey(id: $0.keyID, rawRepresentation: $0.ed25519PublicKey, notBeforeMs: $0.notBeforeMs) }
    }

    /// The account id a caller's bearer token belongs to.
    func accountID(forCallerToken callerToken: String) async throws -> String {
        try await client.unary(
            "/kiosk.store.v1.Store/GetAccount", request: StoreV1.GetAccountRequest(), response: StoreV1.Account.self,
            options: options(token: callerToken)
        ).accountID
    }

    func revocations(since cursor: UInt64) -> ResponseStream<StoreV1.Revocation> {
        client.serverStreaming(
            "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(since: cursor),
            response: StoreV1.Revocation.self, options: options(token: token, timeout: nil))
    }
}
