/// Webhooks: receivers of the event log, and the delivery of each event to each of them.

/// A receiver of the event log: every event is POSTed to `url` as JSON, signed with its secret.
public struct WebhookRecord: Hashable, Sendable {
    public var id: String
    public var url: String
    /// Events with an id up to this one have their deliveries queued.
    public var enqueuedThrough: UInt64
    public var createdMs: Int64

    public init(id: String, url: String, enqueuedThrough: UInt64, createdMs: Int64) {
        self.id = id
        self.url = url
        self.enqueuedThrough = enqueuedThrough
        self.createdMs = createdMs
    }
}

/// One event's delivery to one webhook.
public struct WebhookDelivery: Hashable, Sendable {
    public enum State: String, Sendable, CaseIterable {
        /// Not yet answered with 2xx; tried again at ``nextAttemptMs``.
        case pending
        /// Answered with 2xx.
        case delivered
        /// Still failing when the retry period ran out; `kiosk-store webhook redrive` queues it again.
        case failed
    }

    public var webhookID: String
    public var eventID: UInt64
    public var accountID: String
    public var state: State
    public var attempts: Int
    public var nextAttemptMs: Int64
    /// When it was first tried (0: not yet).
    public var firstAttemptMs: Int64
    public var lastError: String
    public var deliveredMs: Int64

    public init(
        webhookID: String, eventID: UInt64, accountID: String, state: State = .pending, attempts: Int = 0,
        nextAttemptMs: Int64,
        firstAttemptMs: Int64 = 0, lastError: String = "", deliveredMs: Int64 = 0
    ) {
        self.webhookID = webhookID
        self.eventID = eventID
        self.accountID = accountID
        self.state = state
        self.attempts = attempts
        self.nextAttemptMs = nextAttemptMs
        self.firstAttemptMs = firstAttemptMs
        self.lastError = lastError
        self.deliveredMs = deliveredMs
    }
}

/// Webhooks and their deliveries, and the lease that lets one store process deliver at a time.
public protocol WebhookRepository {
    /// Adds a webhook with its signing secret.
    func insertWebhook(_ webhook: WebhookRecord, secret: [UInt8]) throws
    /// The webhooks, oldest first (then by id), each with its secret.
    func webhooksWithSecrets() throws -> [(webhook: WebhookRecord, secret: [UInt8])]
    /// Removes a webhook and its deliveries; false when there is none by that id.
    func removeWebhook(id: String) throws -> Bool
    /// Deliveries, newest event first: of one webhook or all, in one state or any, at most `limit`.
    func webhookDeliveries(webhookID: String?, state: WebhookDelivery.State?, limit: Int) throws -> [WebhookDelivery]
    /// Failed deliveries (of one webhook or all, of one event or all) become pending, due at `nowMs`, with no attempts.
    /// - Returns: how many deliveries are now pending, due at `nowMs`, untried.
    func redriveWebhookDeliveries(webhookID: String?, eventID: UInt64?, nowMs: Int64) throws -> Int
    /// The lowest event id every webhook has queued through (nil: no webhook).
    func leastEnqueuedThrough() throws -> UInt64?
    /// Queues `eventID`'s delivery to a webhook, due at `nowMs` (nothing when it is queued already).
    func queueWebhookDelivery(webhookID: String, eventID: UInt64, accountID: String, nowMs: Int64) throws
    /// Marks a webhook's events up to `eventID` queued.
    func setEnqueuedThrough(webhookID: String, eventID: UInt64) throws
    /// The head of each account's pending queue for a webhook, when due at `nowMs`, oldest event first, at most `limit`.
    func dueWebhookDeliveries(webhookID: String, nowMs: Int64, limit: Int) throws -> [WebhookDelivery]
    /// Records a delivery's outcome: delivered, or failed again (still pending, or given up); a failure is written only
    /// while `leaseOwner` holds the lease and the delivery is still pending.
    func recordWebhookAttempt(_ delivery: WebhookDelivery, leaseOwner: String) throws
    /// The delivery lease's holder and its end, if anyone has taken it.
    func webhookLease() throws -> (owner: String, untilMs: Int64)?
    /// Takes (or keeps) the lease for `owner` until `untilMs`.
    func takeWebhookLease(owner: String, untilMs: Int64) throws
    /// Extends the lease when `owner` holds it; true when it does.
    func renewWebhookLease(owner: String, untilMs: Int64) throws -> Bool
    /// Gives the lease up when `owner` holds it.
    func releaseWebhookLease(owner: String) throws
}
