import KioskStoreCore

/// What the ledger holds, counted for the store's metrics (read at each scrape: the ledger is the truth every
/// store replica shares, so each replica reports the same numbers and none is lost to a restart).
public struct LedgerMetrics: Sendable {
    /// Transactions by state (PURCHASED, FAILED, DEFERRED), product type and whether they were revoked.
    public struct TransactionCount: Sendable {
        public var state: TransactionState
        public var productType: ProductKind
        public var revoked: Bool
        public var count: Int64
    }
    /// Money charged and kept (purchased, not revoked), by currency, in minor units.
    public var revenueMinorUnits: [String: Int64] = [:]
    /// Money given back (revoked purchases), by currency, in minor units.
    public var refundedMinorUnits: [String: Int64] = [:]
    public var transactions: [TransactionCount] = []
    /// Subscriptions by state.
    public var subscriptions: [Subscription.State: Int64] = [:]
    /// Payment attempts by kind (purchase, approval, renewal) and state: `completed` charged, `closed` declined,
    /// cancelled or not charged, `pending` not known yet.
    public var intents: [String: [String: Int64]] = [:]
    /// Payment intents still pending (a charge whose outcome is not recorded yet), and the oldest one's creation.
    public var pendingIntents: Int64 = 0
    public var oldestPendingIntentMs: Int64?
    /// Webhook deliveries by state (`pending` is the queue).
    public var webhookDeliveries: [String: Int64] = [:]
    /// The newest event's id (the event log's head).
    public var eventLogHead: UInt64 = 0
}

extension Ledger {
    /// Counts what the ledger holds, in one read.
    public func metrics() async throws -> LedgerMetrics {
        try await backend.read { db in
            var metrics = LedgerMetrics()
            for row in try db.fetchAll(
                """
                SELECT state, product_type, CASE WHEN revoked_ms <> 0 THEN 1 ELSE 0 END AS revoked, currency, price,
                  COUNT(*) AS n, CAST(SUM(quantity) AS BIGINT) AS units
                FROM transactions GROUP BY 1, 2, 3, 4, 5
                """)
            {
                let stateValue: Int64 = try row["state"]
                let typeValue: Int64 = try row["product_type"]
                let revokedValue: Int64 = try row["revoked"]
                let count: Int64 = try row["n"]
                guard let state = TransactionState(rawValue: Int32(stateValue)),
                    let type = ProductKind(rawValue: Int32(typeValue))
                else { continue }
                let revoked = revokedValue != 0
                if let index = metrics.transactions.firstIndex(where: {
                    $0.state == state && $0.productType == type && $0.revoked == revoked
                }) {
                    metrics.transactions[index].count += count
                } else {
                    metrics.transactions.append(
                        LedgerMetrics.TransactionCount(state: state, productType: type, revoked: revoked, count: count))
                }
                guard state == .purchased else { continue }
                let currency: String = try row["currency"]
                let price: String = try row["price"]
                guard let money = Money(decimal: price, currency: currency) else { continue }
                // A transaction's price is its unit price: a consumable bought several at once is that many units.
                let units: Int64 = try row["units"]
                let amount = money.minorUnits.multipliedReportingOverflow(by: units)
                guard !amount.overflow else { continue }
                if revoked {
                    metrics.refundedMinorUnits[money.currency, default: 0] &+= amount.partialValue
                } else {
                    metrics.revenueMinorUnits[money.currency, default: 0] &+= amount.partialValue
                }
            }
            for row in try db.fetchAll("SELECT state, COUNT(*) AS n FROM subscriptions GROUP BY state") {
                let stateValue: Int64 = try row["state"]
                guard let state = Subscription.State(rawValue: Int32(stateValue)) else { continue }
                metrics.subscriptions[state] = try row["n"]
            }
            if let row = try db.fetchAll(
                "SELECT COUNT(*) AS n, MIN(created_ms) AS oldest FROM payment_intents WHERE state = 'pending'"
            ).first {
                metrics.pendingIntents = try row["n"]
                metrics.oldestPendingIntentMs = metrics.pendingIntents > 0 ? try row["oldest"] as Int64 : nil
            }
            for row in try db.fetchAll("SELECT kind, state, COUNT(*) AS n FROM payment_intents GROUP BY kind, state") {
                metrics.intents[try row["kind"], default: [:]][try row["state"]] = try row["n"]
            }
            for row in try db.fetchAll("SELECT state, COUNT(*) AS n FROM webhook_deliveries GROUP BY state") {
                metrics.webhookDeliveries[try row["state"]] = try row["n"]
            }
            metrics.eventLogHead = try db.latestEventID()
            return metrics
        }
    }
}
