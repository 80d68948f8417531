import Crypto
import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskWire
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import Tracing

/// How webhooks are delivered (``StoreConfiguration/webhooks``).
public struct WebhookPolicy: Sendable {
    /// The wait after the first failed attempt; it doubles with each failure…
    public var initialBackoff: Duration = .seconds(1)
    /// … up to this.
    public var maximumBackoff: Duration = .seconds(3600)
    /// A delivery still failing this long after its first attempt is marked failed (visible, re-drivable).
    public var retryFor: Duration = .seconds(3 * 24 * 3600)
    /// One POST's time limit.
    public var requestTimeout: Duration = .seconds(10)
    /// Deliveries in flight at once (each to a different account, so each account's events stay in order).
    public var concurrency = 8
    /// How often a serving store looks for deliveries that are due (it also looks after each of its writes).
    public var pollInterval: Duration = .milliseconds(500)

    public init() {}

    /// The wait before attempt `attempts + 1` after `attempts` failures.
    func backoffMs(afterAttempts attempts: Int) -> Int64 {
        let initial = max(initialBackoff.wholeMilliseconds, 1)
        let doubled = initial.multipliedReportingOverflow(by: Int64(1) << Int64(min(max(attempts - 1, 0), 40)))
        return min(doubled.overflow ? Int64.max : doubled.partialValue, maximumBackoff.wholeMilliseconds)
    }
}

extension Store {
    // MARK: Managing webhooks

    /// Adds a webhook: events recorded from now on (or after `since`) are POSTed to `url`, signed with `secret`.
    /// - Throws: ``StoreError`` 3 for a URL that is not http(s) or a secret shorter than 16 bytes.
    public func addWebhook(url: String, secret: [UInt8], since: UInt64? = nil) async throws -> WebhookRecord {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(),
            scheme == "https" || scheme == "http", parsed.host != nil
        else {
            throw StoreError.invalid("webhook URL \(url) is not an http:// or https:// URL")
        }
        guard secret.count >= 16 else {
            throw StoreError.invalid("a webhook secret must be at least 16 bytes (it has \(secret.count))")
        }
        let id = "wh_" + Self.randomHex(bytes: 8)
        let nowMs = now
        return try await ledger.write { db in
            let webhook = WebhookRecord(
                id: id, url: url, enqueuedThrough: try since ?? db.latestEventID(), createdMs: nowMs)
            try db.insertWebhook(webhook, secret: secret)
            try db.recordOperatorAction("added webhook \(id)", nowMs: nowMs)
            return webhook
        }
    }

    /// Removes a webhook and its deliveries.
    public func removeWebhook(id: String) async throws {
        let nowMs = now
        let removed = try await ledger.write { db in
            let removed = try db.removeWebhook(id: id)
            if removed { try db.recordOperatorAction("removed webhook \(id)", nowMs: nowMs) }
            return removed
        }
        guard removed else { throw StoreError.notFound("no webhook \(id)") }
    }

    /// The webhooks, oldest first.
    public func webhooks() throws -> [WebhookRecord] {
        try ledger.backend.read { db in try db.webhooksWithSecrets().map(\.webhook) }
    }

    /// Deliveries, newest first: of one webhook or all, in one state or any.
    public func webhookDeliveries(
        webhookID: String? = nil, state: WebhookDelivery.State? = nil, limit: Int = 100
    ) throws -> [WebhookDelivery] {
        try ledger.backend.read { db in try db.webhookDeliveries(webhookID: webhookID, state: state, limit: limit) }
    }

    /// Queues failed deliveries again (all of them, or one event's), to be tried at once; returns how many.
    @discardableResult
    public func redriveWebhookDeliveries(webhookID: String? = nil, eventID: UInt64? = nil) async throws -> Int {
        let nowMs = now
        return try await ledger.write { db in
            let count = try db.redriveWebhookDeliveries(webhookID: webhookID, eventID: eventID, nowMs: nowMs)
            let scope = [webhookID.map { "webhook \($0)" }, eventID.map { "event \($0)" }].compactMap { $0 }
            // Nothing redriven, nothing done: no record.
            if count > 0 {
                try db.recordOperatorAction(
                    "redrove \(count) failed webhook deliver\(count == 1 ? "y" : "ies")"
                        + (scope.isEmpty ? "" : " (\(scope.joined(separator: ", ")))"), nowMs: nowMs)
            }
            return count
        }
    }

    // MARK: Delivering

    /// What one delivery pass did.
    public struct WebhookReport: Sendable {
        public var delivered = 0
        public var failedAttempts = 0
        public var givenUp = 0
        /// Webhooks configured at the pass (0: nothing to deliver until one is added).
        public var webhooks = 0
    }

    /// One pass of the delivery loop: takes the lease (one store process delivers at a time), queues the
    /// deliveries of new events, and POSTs the due ones — each account's in event order, one in flight per
    /// account, up to ``WebhookPolicy/concurrency`` accounts at once. A serving store runs it continuously;
    /// its position is in the ledger, so a restart resumes it. Nil when another process holds the lease.
    ///
    /// Each pass that has something to send opens a transport of its own (``StoreConfiguration/webhookTransport``,
    /// or `transport` when given, which the caller closes): a receiver that was down is tried afresh at each due
    /// time, on the policy's backoff, not on a shared pool's.
    @discardableResult
    public func deliverWebhooks(transport given: (any WebhookTransport)? = nil) async throws -> WebhookReport? {
        let policy = configuration.webhooks
        let nowMs = now
        let owner = instance.id
        let instance = self.instance
        let leaseMs = max(policy.requestTimeout.wholeMilliseconds * 3, 30_000)
        // A read first: an idle store (no webhook, nothing new, its lease fresh) writes nothing.
        let (count, leaseOK, behind) = try await ledger.backend.read { db -> (Int, Bool?, Bool) in
            guard let least = try db.leastEnqueuedThrough() else { return (0, nil, false) }
            let lease = try db.webhookLease()
            if let lease, lease.owner != owner, lease.untilMs > nowMs, instance.isAlive(lease.owner, db) {
                return (1, false, false)
            }
            let fresh = lease?.owner == owner && (lease?.untilMs ?? 0) - nowMs > leaseMs / 2
            return (1, fresh, least < (try db.latestEventID()))
        }
        if count == 0 { return WebhookReport() }
        guard let leaseFresh = leaseOK else { return nil }
        // The dispatcher's own writes do not wake the loops that follow this process's writes (they would wake it again).
        let hooks = try await ledger.backend.groupWrite(serializingOn: nil) {
            db -> [(id: String, url: String, secret: [UInt8])]? in
            if leaseFresh, !behind {
                return try db.webhooksWithSecrets().map { ($0.webhook.id, $0.webhook.url, $0.secret) }
            }
            if let lease = try db.webhookLease(), lease.owner != owner, lease.untilMs > nowMs,
                instance.isAlive(lease.owner, db)
            {
                return nil
            }
            try db.takeWebhookLease(owner: owner, untilMs: nowMs + leaseMs)
            var hooks: [(id: String, url: String, secret: [UInt8])] = []
            for (hook, secret) in try db.webhooksWithSecrets() {
                hooks.append((hook.id, hook.url, secret))
                let events = try db.events(after: hook.enqueuedThrough, limit: 1000, accountID: nil, types: [])
                for event in events {
                    try db.queueWebhookDelivery(
                        webhookID: hook.id, eventID: event.id, accountID: event.accountID, nowMs: nowMs)
                }
                if let last = events.last { try db.setEnqueuedThrough(webhookID: hook.id, eventID: last.id) }
            }
            return hooks
        }
        guard let hooks else { return nil }
        var report = WebhookReport(webhooks: hooks.count)
        var ownTransport: (any WebhookTransport)?
        defer { if let ownTransport { Task { await ownTransport.close() } } }
        for hook in hooks {
            // The lease, renewed before each hook's batch: a pass that outlasts it stops rather than send beside another process.
            let renewedMs = now
            let held = try await ledger.backend.groupWrite(serializingOn: nil) { db in
                try db.renewWebhookLease(owner: owner, untilMs: renewedMs + leaseMs)
            }
            guard held else { break }
            // The head of each account's queue, when it is due.
            let due = try await ledger.backend.read { db in
                try db.dueWebhookDeliveries(webhookID: hook.id, nowMs: nowMs, limit: max(policy.concurrency, 1))
            }
            guard !due.isEmpty else { continue }
            let transport =
                given ?? ownTransport
                ?? {
                    let opened = configuration.webhookTransport(policy.requestTimeout)
                    ownTransport = opened
                    return opened
                }()
            let results = await withTaskGroup(of: (WebhookDelivery, String?).self) { group in
                for delivery in due {
                    group.addTask {
                        let start = ContinuousClock.now
                        let failure = await self.post(
                            delivery, url: hook.url, secret: hook.secret, transport: transport,
                            timeout: policy.requestTimeout)
                        self.webhookMeter.latency.record(since: start)
                        return (delivery, failure)
                    }
                }
                var results: [(WebhookDelivery, String?)] = []
                for await result in group { results.append(result) }
                return results
            }
            let finishedMs = now
            for (delivery, failure) in results {
                var attempted = delivery
                attempted.attempts += 1
                attempted.firstAttemptMs = delivery.firstAttemptMs == 0 ? finishedMs : delivery.firstAttemptMs
                if let failure {
                    attempted.state =
                        finishedMs - attempted.firstAttemptMs >= policy.retryFor.wholeMilliseconds ? .failed : .pending
                    attempted.nextAttemptMs = finishedMs + policy.backoffMs(afterAttempts: attempted.attempts)
                    attempted.lastError = failure
                } else {
                    attempted.state = .delivered
                    attempted.deliveredMs = finishedMs
                    attempted.lastError = ""
                }
                let recorded = attempted
                try await ledger.backend.groupWrite(serializingOn: nil) { db in
                    try db.recordWebhookAttempt(recorded, leaseOwner: owner)
                }
                let outcome = attempted.state
                switch outcome {
                case .delivered: report.delivered += 1
                case .pending: report.failedAttempts += 1
                case .failed: report.givenUp += 1
                }
                webhookMeter.count(outcome)
            }
        }
        return report
    }

    /// Gives up the delivery lease (a store shutting down), so another process takes over at once.
    public func releaseWebhookLease() async {
        let owner = instance.id
        _ = try? await ledger.backend.groupWrite(serializingOn: nil) { db in try db.releaseWebhookLease(owner: owner) }
    }

    /// The JSON body of an event's POST: its fields (as `kiosk-store events` prints them) and `signed_event`,
    /// the base64 of the encoded ``StoreV1/SignedEvent`` for offline verification with the store's public keys.
    public func webhookBody(_ event: EventRecord) throws -> [UInt8] {
        let body = WebhookBody(
            event: EventDocument(event, environment: configuration.environment),
            signedEvent: Data(try signed(event).serializedBytes()).base64EncodedString())
        return Array(JSONLine.encode(body).utf8)
    }

    /// POSTs one delivery; nil on a 2xx answer, else what went wrong.
    private func post(
        _ delivery: WebhookDelivery, url: String, secret: [UInt8], transport: any WebhookTransport, timeout: Duration
    ) async -> String? {
        let event: EventRecord
        let body: [UInt8]
        do {
            guard let found = try await ledger.events(after: max(delivery.eventID, 1) - 1, limit: 1).first,
                found.id == delivery.eventID
            else {
                return "event \(delivery.eventID) is not in the ledger"
            }
            event = found
            // Signing may read the key list from the ledger (blocking): off the concurrency pool, whose few threads
            // every delivery in flight would otherwise block on readers that need those threads to be let go.
            body = try await ledger.blocking { try self.webhookBody(found) }
        } catch {
            return "\(error)"
        }
        // The wall clock, not the store's (a test store's clock may be driven ahead): receivers compare `t` with theirs.
        let wallMs = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        var headers: [(name: String, value: String)] = [
            ("Content-Type", "application/json"), ("User-Agent", "kiosk-store"), ("Kiosk-Event-Id", "\(event.id)"),
            ("Kiosk-Event-Type", event.type.shortName),
            (WebhookSignature.header, WebhookSignature.value(body: body, secret: secret, timestampMs: wallMs)),
        ]
        // The call that recorded the event: its request id for the receiver's logs and ours, its trace joined.
        if !event.requestID.isEmpty { headers.append((RequestScope.metadataKey, event.requestID)) }
        let scope = event.requestID.isEmpty ? nil : RequestScope.Call(requestID: event.requestID, method: "webhook")
        return await RequestScope.$current.withValue(scope) {
            let tracer = InstrumentationSystem.tracer
            guard !(tracer is NoOpTracer) else {
                // Not traced here: the receiver still joins the trace of the call that recorded the event.
                if !event.traceParent.isEmpty { headers.append((TraceParent.headerName, event.traceParent)) }
                return await transport.post(url: url, headers: headers, body: body, timeout: timeout)
            }
            var context = ServiceContext.topLevel
            if !event.traceParent.isEmpty {
                tracer.extract(
                    Metadata([MetadataEntry(key: TraceParent.headerName, value: event.traceParent)]), into: &context,
                    using: MetadataExtractor())
            }
            let span = tracer.startSpan("webhook.deliver", context: context, ofKind: .client)
            span.updateAttributes { attributes in
                attributes["kiosk.event_id"] = Int64(clamping: event.id)
                attributes["kiosk.event_type"] = event.type.shortName
                attributes["kiosk.webhook_attempt"] = Int64(delivery.attempts + 1)
                if let host = URL(string: url)?.host { attributes["server.address"] = host }
            }
            var carrier = Metadata()
            tracer.inject(span.context, into: &carrier, using: MetadataInjector())
            if let traceParent = carrier[TraceParent.headerName] {
                headers.append((TraceParent.headerName, traceParent))
            }
            let failure = await transport.post(url: url, headers: headers, body: body, timeout: timeout)
            if let failure { span.setStatus(SpanStatus(code: .error, message: String(failure.prefix(200)))) }
            span.end()
            return failure
        }
    }
}

/// What this process's webhook deliveries did: attempts by outcome and how long each POST took.
public struct WebhookDeliveryStatistics: Hashable, Sendable {
    /// Attempts answered 2xx.
    public var delivered: UInt64
    /// Attempts that failed and will be tried again.
    public var retrying: UInt64
    /// Attempts that failed for the last time (the delivery is marked failed).
    public var givenUp: UInt64
    /// How long each POST took, answered or not.
    public var latency: LatencyHistogram.Reading
}

/// Counts webhook attempts as the delivery loop records them.
final class WebhookMeter: Sendable {
    let latency = LatencyHistogram()
    private let counts = NIOLockedValueBox<(delivered: UInt64, retrying: UInt64, givenUp: UInt64)>((0, 0, 0))

    func count(_ outcome: WebhookDelivery.State) {
        counts.withLockedValue { counts in
            switch outcome {
            case .delivered: counts.delivered += 1
            case .pending: counts.retrying += 1
            case .failed: counts.givenUp += 1
            }
        }
    }

    var statistics: WebhookDeliveryStatistics {
        let (delivered, retrying, givenUp) = counts.withLockedValue { $0 }
        return WebhookDeliveryStatistics(
            delivered: delivered, retrying: retrying, givenUp: givenUp, latency: latency.reading)
    }
}

extension Store {
    /// What this process's webhook deliveries did since it started (``WebhookDeliveryStatistics``).
    public var webhookDeliveryStatistics: WebhookDeliveryStatistics { webhookMeter.statistics }
}
