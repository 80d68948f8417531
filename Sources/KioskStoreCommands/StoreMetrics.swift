import Foundation
import KioskOperations
import KioskStore
import KioskStoreCore
import KioskStoreLedger
import Prometheus

/// The store's metrics, read from the ledger at each scrape: what every replica shares, so each reports the same
/// numbers and a restart loses none. Names and labels: docs/operations.md.
public final class StoreMetrics: Sendable {
    /// The registry the operator endpoint serves.
    public let registry = PrometheusCollectorRegistry()
    private let store: Store
    private let scrapeFailures: Counter

    public init(store: Store) {
        self.store = store
        self.scrapeFailures = registry.makeCounter(
            name: "kiosk_store_metrics_read_failures_total", help: "Scrapes that could not read the ledger.")
    }

    /// Reads the ledger into the gauges; a failure is counted and the gauges keep their last values.
    public func refresh() async {
        let nowMs = Int64(Date().timeIntervalSince1970 * 1000)
        let metrics: LedgerMetrics
        do {
            metrics = try await store.ledger.metrics()
        } catch {
            scrapeFailures.increment()
            return
        }
        // Every label set, 0 when the ledger has none: a series that appears only once it is non-zero breaks rates.
        for state in TransactionState.allCases {
            for type in ProductKind.allCases {
                for revoked in [false, true] where state == .purchased || !revoked {
                    let count =
                        metrics.transactions.first {
                            $0.state == state && $0.productType == type && $0.revoked == revoked
                        }?.count ?? 0
                    registry.makeGauge(
                        name: "kiosk_store_transactions",
                        labels: [
                            ("state", state.description.lowercased()), ("product_type", Self.name(type)),
                            ("revoked", "\(revoked)"),
                        ],
                        help: "Transactions in the ledger by state, product type and revocation."
                    ).set(Double(count))
                }
            }
        }
        for (currency, minor) in metrics.revenueMinorUnits {
            registry.makeGauge(
                name: "kiosk_store_revenue_minor_units", labels: [("currency", currency)],
                help: "Money charged and kept (purchased, not refunded), in the currency's minor units."
            ).set(Double(minor))
        }
        for (currency, minor) in metrics.refundedMinorUnits {
            registry.makeGauge(
                name: "kiosk_store_refunded_minor_units", labels: [("currency", currency)],
                help: "Money of refunded or revoked purchases, in the currency's minor units."
            ).set(Double(minor))
        }
        for state in [Subscription.State.active, .inGracePeriod, .inBillingRetry, .expired, .revoked] {
            registry.makeGauge(
                name: "kiosk_store_subscriptions", labels: [("state", state.description.lowercased())],
                help: "Auto-renewable subscriptions by state."
            ).set(Double(metrics.subscriptions[state] ?? 0))
        }
        for kind in ["purchase", "approval", "renewal"] {
            for state in ["pending", "completed", "closed"] {
                registry.makeGauge(
                    name: "kiosk_store_payments", labels: [("kind", kind), ("state", state)],
                    help:
                        "Payment attempts by kind and state: completed (charged), closed (declined, cancelled or not charged), pending."
                ).set(Double(metrics.intents[kind]?[state] ?? 0))
            }
        }
        registry.makeGauge(
            name: "kiosk_store_payment_intents_pending", help: "Payments whose outcome is not recorded yet."
        ).set(Double(metrics.pendingIntents))
        registry.makeGauge(
            name: "kiosk_store_payment_intent_oldest_pending_age_seconds",
            help: "Age of the oldest pending payment (0: none)."
        ).set(metrics.oldestPendingIntentMs.map { Double(max(0, nowMs - $0)) / 1000 } ?? 0)
        for state in ["pending", "delivered", "failed"] {
            registry.makeGauge(
                name: "kiosk_store_webhook_deliveries", labels: [("state", state)],
                help: "Webhook deliveries by state; pending is the queue."
            ).set(Double(metrics.webhookDeliveries[state] ?? 0))
        }
        registry.makeGauge(
            name: "kiosk_store_event_log_head", help: "The newest event's id (the cursor a caught-up reader holds)."
        ).set(Double(metrics.eventLogHead))
    }

    /// What this process counts itself, as Prometheus text: its ledger writes (latency, SQLite's group commits)
    /// and webhook attempts (by outcome, latency).
    public func text() -> [UInt8] {
        var out = PrometheusText()
        out.family(
            "kiosk_store_ledger_write_seconds", "histogram",
            help: "Committed ledger writes of this process, from the call to the commit on disk.")
        out.histogram("kiosk_store_ledger_write_seconds", [], store.ledger.writeLatency.reading)
        let (commits, writes) = store.ledger.commitStatistics
        out.family(
            "kiosk_store_ledger_commits_total", "counter",
            help:
                "Group commits of this process: SQLite's (each one fsync), PostgreSQL's of writes about accounts (each one transaction)."
        )
        out.sample("kiosk_store_ledger_commits_total", [], UInt64(commits))
        out.family(
            "kiosk_store_ledger_committed_writes_total", "counter",
            help: "Writes those commits carried (writes per commit is the group's size).")
        out.sample("kiosk_store_ledger_committed_writes_total", [], UInt64(writes))
        let reruns = store.ledger.rerunStatistics
        out.family(
            "kiosk_store_ledger_reruns_total", "counter",
            help:
                "Ledger writes run again (PostgreSQL), by reason: retry (a serialization failure or deadlock), collision (met another write about its account, ran again behind its lock), group (a group commit rolled back, its writes each ran again alone; counts groups)."
        )
        out.sample("kiosk_store_ledger_reruns_total", [("reason", "retry")], UInt64(reruns.retries))
        out.sample("kiosk_store_ledger_reruns_total", [("reason", "collision")], UInt64(reruns.collisions))
        out.sample("kiosk_store_ledger_reruns_total", [("reason", "group")], UInt64(reruns.groupsRolledBack))
        let webhooks = store.webhookDeliveryStatistics
        out.family(
            "kiosk_store_webhook_attempts_total", "counter",
            help: "Webhook POSTs by this process, by outcome: delivered, retrying (failed, tried again), given_up.")
        out.sample("kiosk_store_webhook_attempts_total", [("outcome", "delivered")], webhooks.delivered)
        out.sample("kiosk_store_webhook_attempts_total", [("outcome", "retrying")], webhooks.retrying)
        out.sample("kiosk_store_webhook_attempts_total", [("outcome", "given_up")], webhooks.givenUp)
        out.family(
            "kiosk_store_webhook_delivery_seconds", "histogram",
            help: "How long each webhook POST took, answered or not.")
        out.histogram("kiosk_store_webhook_delivery_seconds", [], webhooks.latency)
        let reconciled = store.reconciliationStatistics
        out.family(
            "kiosk_store_reconcile_runs_total", "counter",
            help: "Reconciliation runs of this process, by result (ok, failed).")
        out.sample("kiosk_store_reconcile_runs_total", [("result", "ok")], reconciled.runs)
        out.sample("kiosk_store_reconcile_runs_total", [("result", "failed")], reconciled.failedRuns)
        out.family(
            "kiosk_store_reconciled_intents_total", "counter",
            help:
                "Payment intents reconciliation settled, by outcome; left counts an intent at each run that leaves it.")
        for (outcome, count) in [
            ("charged", reconciled.settled.charged), ("closed", reconciled.settled.closed),
            ("deferred", reconciled.settled.deferred), ("duplicate_refunded", reconciled.settled.refunded),
            ("left", reconciled.settled.left),
        ] {
            out.sample("kiosk_store_reconciled_intents_total", [("outcome", outcome)], UInt64(count))
        }
        return out.bytes
    }

    /// `/readyz`: the ledger answers and the store has signing keys.
    public func readiness() async -> OperatorEndpoint.Readiness {
        do {
            // One small read, not the scrape's counts over every transaction: probes come every few seconds.
            let ledger = store.ledger
            _ = try await ledger.offload { try ledger.environment() }
            guard try !store.publicKeys().isEmpty else {
                return OperatorEndpoint.Readiness(ready: false, reason: "no signing key")
            }
            return OperatorEndpoint.Readiness(ready: true, reason: "ready")
        } catch {
            return OperatorEndpoint.Readiness(ready: false, reason: "the ledger does not answer: \(error)")
        }
    }

    static func name(_ type: ProductKind) -> String {
        switch type {
        case .consumable: "consumable"
        case .nonConsumable: "non_consumable"
        case .nonRenewingSubscription: "non_renewing_subscription"
        case .autoRenewableSubscription: "auto_renewable_subscription"
        case .grant: "grant"
        }
    }
}
