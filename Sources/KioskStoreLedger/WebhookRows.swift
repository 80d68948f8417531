import Foundation
import KioskStoreCore

extension WebhookRecord {
    init(row: LedgerRow) throws {
        self.init(
            id: try row["id"], url: try row["url"],
            enqueuedThrough: UInt64(clamping: try row["enqueued_through"] as Int64),
            createdMs: try row["created_ms"])
    }
}

extension WebhookDelivery {
    init(row: LedgerRow) throws {
        let stateName: String = try row["state"]
        guard let state = State(rawValue: stateName) else {
            throw LedgerError(.schema, "webhook delivery in state \(stateName)")
        }
        self.init(
            webhookID: try row["webhook_id"], eventID: UInt64(clamping: try row["event_id"] as Int64),
            accountID: try row["account_id"],
            state: state, attempts: Int(try row["attempts"] as Int64), nextAttemptMs: try row["next_attempt_ms"],
            firstAttemptMs: try row["first_attempt_ms"], lastError: try row["last_error"],
            deliveredMs: try row["delivered_ms"])
    }
}

// The ledger adapter: the domain's repository ports on SQL (SQLite and PostgreSQL alike).
extension LedgerDatabase {
    public func insertWebhook(_ webhook: WebhookRecord, secret: [UInt8]) throws {
        do {
            try execute(
                "INSERT INTO webhooks (id, url, secret, enqueued_through, created_ms) VALUES (?, ?, ?, ?, ?)",
                [webhook.id, webhook.url, secret, Int64(clamping: webhook.enqueuedThrough), webhook.createdMs])
        } catch let error as LedgerError where error.kind == .uniqueViolation {
            throw StoreError(.conflict, "webhook \(webhook.id) exists already")
        }
    }

    public func webhooksWithSecrets() throws -> [(webhook: WebhookRecord, secret: [UInt8])] {
        try fetchAll("SELECT * FROM webhooks ORDER BY created_ms, id").map {
            (try WebhookRecord(row: $0), try $0["secret"] as [UInt8])
        }
    }

    public func removeWebhook(id: String) throws -> Bool {
        try execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?", [id])
        return try execute("DELETE FROM webhooks WHERE id = ?", [id]) > 0
    }

    public func webhookDeliveries(
        webhookID: String?, state: WebhookDelivery.State?, limit: Int
    ) throws -> [WebhookDelivery] {
        var sql = "SELECT * FROM webhook_deliveries WHERE 1 = 1"
        var arguments: [any LedgerArgument] = []
        if let webhookID {
            sql += " AND webhook_id = ?"
            arguments.append(webhookID)
        }
        if let state {
            sql += " AND state = ?"
            arguments.append(state.rawValue)
        }
        sql += " ORDER BY event_id DESC, webhook_id LIMIT ?"
        arguments.append(Int64(max(limit, 0)))
        return try fetchAll(sql, arguments).map(WebhookDelivery.init)
    }

    public func redriveWebhookDeliveries(webhookID: String?, eventID: UInt64?, nowMs: Int64) throws -> Int {
        var sql =
            "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, first_attempt_ms = 0, next_attempt_ms = ? WHERE state = 'failed'"
        var arguments: [any LedgerArgument] = [nowMs]
        if let webhookID {
            sql += " AND webhook_id = ?"
            arguments.append(webhookID)
        }
        if let eventID {
            sql += " AND event_id = ?"
            arguments.append(Int64(clamping: eventID))
        }
        return try execute(sql, arguments)
    }

    public func leastEnqueuedThrough() throws -> UInt64? {
        try value(Int64.self, "SELECT MIN(enqueued_through) FROM webhooks").map { UInt64(clamping: $0) }
    }

    public func queueWebhookDelivery(webhookID: String, eventID: UInt64, accountID: String, nowMs: Int64) throws {
        try execute(
            """
            INSERT INTO webhook_deliveries (webhook_id, event_id, account_id, state, next_attempt_ms)
            VALUES (?, ?, ?, 'pending', ?) ON CONFLICT DO NOTHING
            """, [webhookID, Int64(clamping: eventID), accountID, nowMs])
    }

    public func setEnqueuedThrough(webhookID: String, eventID: UInt64) throws {
        try execute("UPDATE webhooks SET enqueued_through = ? WHERE id = ?", [Int64(clamping: eventID), webhookID])
    }

    public func dueWebhookDeliveries(webhookID: String, nowMs: Int64, limit: Int) throws -> [WebhookDelivery] {
        try fetchAll(
            """
            SELECT d.* FROM webhook_deliveries d
            WHERE d.webhook_id = ? AND d.state = 'pending' AND d.next_attempt_ms <= ? AND NOT EXISTS (
              SELECT 1 FROM webhook_deliveries e WHERE e.webhook_id = d.webhook_id AND e.account_id = d.account_id
                AND e.state = 'pending' AND e.event_id < d.event_id)
            ORDER BY d.event_id LIMIT ?
            """, [webhookID, nowMs, Int64(max(limit, 0))]
        ).map(WebhookDelivery.init)
    }

    public func recordWebhookAttempt(_ delivery: WebhookDelivery, leaseOwner: String) throws {
        if delivery.state == .delivered {
            try execute(
                """
                UPDATE webhook_deliveries SET state = 'delivered', attempts = ?, first_attempt_ms = ?, delivered_ms = ?, last_error = ''
                WHERE webhook_id = ? AND event_id = ?
                """,
                [
                    Int64(delivery.attempts), delivery.firstAttemptMs, delivery.deliveredMs, delivery.webhookID,
                    Int64(clamping: delivery.eventID),
                ])
        } else {
            try execute(
                """
                UPDATE webhook_deliveries SET state = ?, attempts = ?, first_attempt_ms = ?, next_attempt_ms = ?, last_error = ?
                WHERE webhook_id = ? AND event_id = ? AND state = 'pending'
                  AND EXISTS (SELECT 1 FROM webhook_lease WHERE id = 1 AND owner = ?)
                """,
                [
                    delivery.state.rawValue, Int64(delivery.attempts), delivery.firstAttemptMs, delivery.nextAttemptMs,
                    String(delivery.lastError.prefix(500)), delivery.webhookID, Int64(clamping: delivery.eventID),
                    leaseOwner,
                ])
        }
    }

    public func webhookLease() throws -> (owner: String, untilMs: Int64)? {
        guard let row = try fetchOne("SELECT owner, until_ms FROM webhook_lease WHERE id = 1") else { return nil }
        return (try row["owner"], try row["until_ms"])
    }

    public func takeWebhookLease(owner: String, untilMs: Int64) throws {
        try execute(
            """
            INSERT INTO webhook_lease (id, owner, until_ms) VALUES (1, ?, ?)
            ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, until_ms = excluded.until_ms
            """, [owner, untilMs])
    }

    public func renewWebhookLease(owner: String, untilMs: Int64) throws -> Bool {
        try execute("UPDATE webhook_lease SET until_ms = ? WHERE id = 1 AND owner = ?", [untilMs, owner])
        return try value(String.self, "SELECT owner FROM webhook_lease WHERE id = 1") == owner
    }

    public func releaseWebhookLease(owner: String) throws {
        try execute("DELETE FROM webhook_lease WHERE id = 1 AND owner = ?", [owner])
    }
}
