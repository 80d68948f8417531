import Crypto
import Foundation
import KioskAPI
import NIOCore
import NIOHTTP1

/// A receiver of the event log: every event is POSTed to `url` as JSON, signed with `secret`.
public struct WebhookRecord: Hashable, Sendable {
    public var id: String
    public var url: String
    /// Events with an id up to this one have their deliveries queued.
    public var enqueuedThrough: UInt64
    public var createdMs: Int64

    init(row: LedgerRow) throws {
        id = try row["id"]
        url = try row["url"]
        enqueuedThrough = UInt64(clamping: try row["enqueued_through"] as Int64)
        createdMs = try row["created_ms"]
    }
}

/// One event's delivery to one webhook.
public struct WebhookDelivery: Hashable, Sendable {
    public enum State: String, Sendable {
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

    init(row: LedgerRow) throws {
        webhookID = try row["webhook_id"]
        eventID = UInt64(clamping: try row["event_id"] as Int64)
        accountID = try row["account_id"]
        state = State(rawValue: try row["state"]) ?? .pending
        attempts = Int(try row["attempts"] as Int64)
        nextAttemptMs = try row["next_attempt_ms"]
        firstAttemptMs = try row["first_attempt_ms"]
        lastError = try row["last_error"]
        deliveredMs = try row["delivered_ms"]
    }
}

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

/// The signature header of a webhook POST: `t=<ms since 1970>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`.
public enum WebhookSignature {
    public static let header = "Kiosk-Signature"

    /// The header's value for `body` sent at `timestampMs`.
    public static func value(body: [UInt8], secret: [UInt8], timestampMs: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array("\(timestampMs).".utf8) + body, using: SymmetricKey(data: secret))
        return "t=\(timestampMs),v1=\(Array(mac).hexString)"
    }

    /// True when `headerValue` signs `body` with `secret` and its time is within `toleranceMs` of `nowMs`.
    public static func isValid(_ headerValue: String, body: [UInt8], secret: [UInt8], nowMs: Int64, toleranceMs: Int64 = 300_000) -> Bool {
        var timestamp: Int64?
        var signatures: [String] = []
        for part in headerValue.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map(String.init)
            guard pair.count == 2 else { continue }
            if pair[0] == "t" { timestamp = Int64(pair[1]) } else if pair[0] == "v1" { signatures.append(pair[1]) }
        }
        // Compared without subtracting: a forged `t` near Int64's limits must not overflow.
        guard let timestamp, timestamp >= nowMs.subtractingReportingOverflow(toleranceMs).partialValue,
              timestamp <= nowMs.addingReportingOverflow(toleranceMs).partialValue else { return false }
        let expected = value(body: body, secret: secret, timestampMs: timestamp).split(separator: "=").last.map(String.init) ?? ""
        // Compared in constant time over the hex digits.
        return signatures.contains { candidate in
            candidate.utf8.count == expected.utf8.count && zip(candidate.utf8, expected.utf8).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }
}

extension Ledger {
}

extension Store {
    // MARK: Managing webhooks

    /// Adds a webhook: events recorded from now on (or after `since`) are POSTed to `url`, signed with `secret`.
    /// - Throws: ``StoreError`` 3 for a URL that is not http(s) or a secret shorter than 16 bytes.
    public func addWebhook(url: String, secret: [UInt8], since: UInt64? = nil) async throws -> WebhookRecord {
        guard let parsed = URL(string: url), let scheme = parsed.scheme?.lowercased(), scheme == "https" || scheme == "http", parsed.host != nil else {
            throw StoreError.invalid("webhook URL \(url) is not an http:// or https:// URL")
        }
        guard secret.count >= 16 else { throw StoreError.invalid("a webhook secret must be at least 16 bytes (it has \(secret.count))") }
        let id = "wh_" + Self.randomHex(bytes: 8)
        let nowMs = now
        return try await ledger.write { db in
            let through = try since ?? db.latestEventID()
            try db.execute("INSERT INTO webhooks (id, url, secret, enqueued_through, created_ms) VALUES (?, ?, ?, ?, ?)",
                           [id, url, secret, Int64(clamping: through), nowMs])
            guard let row = try db.fetchOne("SELECT * FROM webhooks WHERE id = ?", [id]) else {
                throw StoreError(.internalFailure, "webhook \(id) vanished in its own write")
            }
            return try WebhookRecord(row: row)
        }
    }

    /// Removes a webhook and its deliveries.
    public func removeWebhook(id: String) async throws {
        let removed = try await ledger.write { db -> Bool in
            let found = try db.value(String.self, "SELECT id FROM webhooks WHERE id = ?", [id]) != nil
            try db.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?", [id])
            try db.execute("DELETE FROM webhooks WHERE id = ?", [id])
            return found
        }
        guard removed else { throw StoreError.notFound("no webhook \(id)") }
    }

    /// The webhooks, oldest first.
    public func webhooks() throws -> [WebhookRecord] {
        try ledger.backend.read { db in try db.fetchAll("SELECT * FROM webhooks ORDER BY created_ms, id").map(WebhookRecord.init) }
    }

    /// Deliveries, newest first: of one webhook or all, in one state or any.
    public func webhookDeliveries(webhookID: String? = nil, state: WebhookDelivery.State? = nil, limit: Int = 100) throws -> [WebhookDelivery] {
        var sql = "SELECT * FROM webhook_deliveries WHERE 1 = 1"
        var arguments: [any LedgerArgument] = []
        if let webhookID { sql += " AND webhook_id = ?"; arguments.append(webhookID) }
        if let state { sql += " AND state = ?"; arguments.append(state.rawValue) }
        sql += " ORDER BY event_id DESC LIMIT ?"
        arguments.append(Int64(limit))
        let (query, values) = (sql, arguments)
        return try ledger.backend.read { db in try db.fetchAll(query, values).map(WebhookDelivery.init) }
    }

    /// Queues failed deliveries again (all of them, or one event's), to be tried at once; returns how many.
    @discardableResult
    public func redriveWebhookDeliveries(webhookID: String? = nil, eventID: UInt64? = nil) async throws -> Int {
        let nowMs = now
        return try await ledger.write { db in
            var sql = "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, first_attempt_ms = 0, next_attempt_ms = ? WHERE state = 'failed'"
            var arguments: [any LedgerArgument] = [nowMs]
            if let webhookID { sql += " AND webhook_id = ?"; arguments.append(webhookID) }
            if let eventID { sql += " AND event_id = ?"; arguments.append(Int64(clamping: eventID)) }
            try db.execute(sql, arguments)
            return try db.value(Int64.self, "SELECT COUNT(*) FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_ms = ? AND attempts = 0",
                                [nowMs]).map(Int.init) ?? 0
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
        let (count, leaseOK, behind) = try await ledger.backend.read { db -> (Int64, Bool?, Bool) in
            let count = try db.value(Int64.self, "SELECT COUNT(*) FROM webhooks") ?? 0
            guard count > 0 else { return (0, nil, false) }
            let lease = try db.fetchOne("SELECT owner, until_ms FROM webhook_lease WHERE id = 1")
            let leaseOwner: String? = try lease?["owner"]
            let leaseUntil: Int64 = try lease?["until_ms"] ?? 0
            if let leaseOwner, leaseOwner != owner, leaseUntil > nowMs, instance.isAlive(leaseOwner, db) { return (count, false, false) }
            let fresh = leaseOwner == owner && leaseUntil - nowMs > leaseMs / 2
            let behind = try db.value(Int64.self, "SELECT MIN(enqueued_through) FROM webhooks") ?? 0 < Int64(clamping: try db.latestEventID())
            return (count, fresh, behind)
        }
        if count == 0 { return WebhookReport() }
        guard let leaseFresh = leaseOK else { return nil }
        // The dispatcher's own writes do not wake the loops that follow this process's writes (they would wake it again).
        let hooks = try await ledger.backend.groupWrite(serializingOn: nil) { db -> [(id: String, url: String, secret: [UInt8])]? in
            if leaseFresh, !behind {
                return try db.fetchAll("SELECT * FROM webhooks ORDER BY created_ms, id").map { ((try $0["id"] as String), (try $0["url"] as String), (try $0["secret"] as [UInt8])) }
            }
            let lease = try db.fetchOne("SELECT owner, until_ms FROM webhook_lease WHERE id = 1")
            if let lease, case let holder = try lease["owner"] as String, holder != owner, (try lease["until_ms"] as Int64) > nowMs,
               instance.isAlive(holder, db) { return nil }
            try db.execute("""
                INSERT INTO webhook_lease (id, owner, until_ms) VALUES (1, ?, ?)
                ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, until_ms = excluded.until_ms
                """, [owner, nowMs + leaseMs])
            var hooks: [(id: String, url: String, secret: [UInt8])] = []
            for row in try db.fetchAll("SELECT * FROM webhooks ORDER BY created_ms, id") {
                let hook = try WebhookRecord(row: row)
                hooks.append((hook.id, hook.url, try row["secret"]))
                let events = try db.events(after: hook.enqueuedThrough, limit: 1000, accountID: nil, types: [])
                for event in events {
                    try db.execute("""
                        INSERT INTO webhook_deliveries (webhook_id, event_id, account_id, state, next_attempt_ms)
                        VALUES (?, ?, ?, 'pending', ?) ON CONFLICT DO NOTHING
                        """, [hook.id, Int64(clamping: event.id), event.accountID, nowMs])
                }
                if let last = events.last {
                    try db.execute("UPDATE webhooks SET enqueued_through = ? WHERE id = ?", [Int64(clamping: last.id), hook.id])
                }
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
            let held = try await ledger.backend.groupWrite(serializingOn: nil) { db -> Bool in
                try db.execute("UPDATE webhook_lease SET until_ms = ? WHERE id = 1 AND owner = ?", [renewedMs + leaseMs, owner])
                return try db.value(String.self, "SELECT owner FROM webhook_lease WHERE id = 1") == owner
            }
            guard held else { break }
            // The head of each account's queue, when it is due.
            let due = try await ledger.backend.read { db in
                try db.fetchAll("""
                    SELECT d.* FROM webhook_deliveries d
                    WHERE d.webhook_id = ? AND d.state = 'pending' AND d.next_attempt_ms <= ? AND NOT EXISTS (
                      SELECT 1 FROM webhook_deliveries e WHERE e.webhook_id = d.webhook_id AND e.account_id = d.account_id
                        AND e.state = 'pending' AND e.event_id < d.event_id)
                    ORDER BY d.event_id LIMIT ?
                    """, [hook.id, nowMs, Int64(max(policy.concurrency, 1))]).map(WebhookDelivery.init)
            }
            guard !due.isEmpty else { continue }
            let transport = given ?? ownTransport ?? {
                let opened = configuration.webhookTransport(policy.requestTimeout)
                ownTransport = opened
                return opened
            }()
            let results = await withTaskGroup(of: (WebhookDelivery, String?).self) { group in
                for delivery in due {
                    group.addTask {
                        (delivery, await self.post(delivery, url: hook.url, secret: hook.secret, transport: transport, timeout: policy.requestTimeout))
                    }
                }
                var results: [(WebhookDelivery, String?)] = []
                for await result in group { results.append(result) }
                return results
            }
            let finishedMs = now
            for (delivery, failure) in results {
                let outcome = try await ledger.backend.groupWrite(serializingOn: nil) { db -> WebhookDelivery.State in
                    let first = delivery.firstAttemptMs == 0 ? finishedMs : delivery.firstAttemptMs
                    if let failure {
                        let attempts = delivery.attempts + 1
                        let givenUp = finishedMs - first >= policy.retryFor.wholeMilliseconds
                        try db.execute("""
                            UPDATE webhook_deliveries SET state = ?, attempts = ?, first_attempt_ms = ?, next_attempt_ms = ?, last_error = ?
                            WHERE webhook_id = ? AND event_id = ? AND state = 'pending'
                              AND EXISTS (SELECT 1 FROM webhook_lease WHERE id = 1 AND owner = ?)
                            """, [givenUp ? "failed" : "pending", Int64(attempts), first, finishedMs + policy.backoffMs(afterAttempts: attempts),
                                  String(failure.prefix(500)), delivery.webhookID, Int64(clamping: delivery.eventID), owner])
                        return givenUp ? .failed : .pending
                    }
                    try db.execute("""
                        UPDATE webhook_deliveries SET state = 'delivered', attempts = ?, first_attempt_ms = ?, delivered_ms = ?, last_error = ''
                        WHERE webhook_id = ? AND event_id = ?
                        """, [Int64(delivery.attempts + 1), first, finishedMs, delivery.webhookID, Int64(clamping: delivery.eventID)])
                    return .delivered
                }
                switch outcome {
                case .delivered: report.delivered += 1
                case .pending: report.failedAttempts += 1
                case .failed: report.givenUp += 1
                }
            }
        }
        return report
    }

    /// Gives up the delivery lease (a store shutting down), so another process takes over at once.
    public func releaseWebhookLease() async {
        let owner = instance.id
        _ = try? await ledger.backend.groupWrite(serializingOn: nil) { db in
            try db.execute("DELETE FROM webhook_lease WHERE id = 1 AND owner = ?", [owner])
        }
    }

    /// The JSON body of an event's POST: its fields (as `kiosk-store events` prints them) and `signed_event`,
    /// the base64 of the encoded ``StoreV1/SignedEvent`` for offline verification with the store's public keys.
    public func webhookBody(_ event: EventRecord) throws -> [UInt8] {
        var object = EventJSON.object(event, environment: configuration.environment)
        object["signed_event"] = Data(try signed(event).serializedBytes()).base64EncodedString()
        return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    /// POSTs one delivery; nil on a 2xx answer, else what went wrong.
    private func post(_ delivery: WebhookDelivery, url: String, secret: [UInt8], transport: any WebhookTransport, timeout: Duration) async -> String? {
        let event: EventRecord
        let body: [UInt8]
        do {
            guard let found = try await ledger.events(after: max(delivery.eventID, 1) - 1, limit: 1).first, found.id == delivery.eventID else {
                return "event \(delivery.eventID) is not in the ledger"
            }
            event = found
            body = try webhookBody(event)
        } catch {
            return "\(error)"
        }
        // The wall clock, not the store's (a test store's clock may be driven ahead): receivers compare `t` with theirs.
        let wallMs = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "application/json"), ("User-Agent", "kiosk-store"), ("Kiosk-Event-Id", "\(event.id)"),
            ("Kiosk-Event-Type", event.type.shortName),
            (WebhookSignature.header, WebhookSignature.value(body: body, secret: secret, timestampMs: wallMs)),
        ]
        return await transport.post(url: url, headers: headers, body: body, timeout: timeout)
    }
}
