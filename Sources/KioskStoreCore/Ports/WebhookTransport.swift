/// The webhook port: how the store's deliveries reach a receiver. The store decides what to send,
/// when, and what an answer means (the lease, the queue per account, the backoff); a transport only
/// carries one POST and says how it went. Each delivery pass opens a transport of its own and closes
/// it, so a receiver that was down is tried afresh at each due time.
public protocol WebhookTransport: Sendable {
    /// POSTs `body` with `headers` to `url`, waiting at most `timeout` for the answer.
    /// - Returns: nil on a 2xx answer, otherwise what went wrong (`HTTP 503`, a connection error).
    func post(url: String, headers: [(name: String, value: String)], body: [UInt8], timeout: Duration) async -> String?
    /// Closes what the pass opened.
    func close() async
}
