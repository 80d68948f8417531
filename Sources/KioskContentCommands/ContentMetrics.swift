import Foundation
import KioskContent
import KioskOperations
import Prometheus

/// The content service's metrics, from its gate's counters at each scrape.
public final class ContentMetrics: Sendable {
    /// The registry the operator endpoint serves.
    public let registry = PrometheusCollectorRegistry()
    private let server: ContentServer
    private let maximumStaleness: Duration

    public init(server: ContentServer, maximumStaleness: Duration) {
        self.server = server
        self.maximumStaleness = maximumStaleness
    }

    /// Reads the gate's counters into the gauges.
    public func refresh() async {
        let stats = server.stats
        let set = { (name: String, help: String, value: Double) in
            self.registry.makeGauge(name: name, help: help).set(value)
        }
        set(
            "kiosk_content_receipt_cache_hits", "Checks answered from the verified-receipt cache, since start.",
            Double(stats.cacheHits))
        set(
            "kiosk_content_receipt_cache_misses", "Checks that verified a signature, since start.",
            Double(stats.cacheMisses))
        set("kiosk_content_receipt_cache_entries", "Verified receipts in the cache.", Double(stats.cacheEntries))
        set("kiosk_content_receipt_cache_capacity", "The cache's size limit.", Double(stats.cacheCapacity))
        set(
            "kiosk_content_access_tokens_cached", "Access tokens whose signature was checked, until they expire.",
            Double(stats.accessTokensCached))
        set("kiosk_content_downloads_in_flight", "Downloads being sent.", Double(server.activeDownloads))
        set(
            "kiosk_content_revocations_known", "Revoked transactions the service refuses.",
            Double(stats.revocationsKnown))
        set("kiosk_content_store_keys_known", "The store's signing keys known.", Double(stats.keysKnown))
        set(
            "kiosk_content_store_silence_seconds", "Seconds since the store's feed was last heard (0: never).",
            Double(stats.storeSilenceMs) / 1000)
        set(
            "kiosk_content_feed_cursor", "How far the store's event log has been followed.",
            Double(stats.revocationCursor))
    }

    /// The gate's decisions and access-token checks, as Prometheus counters.
    public func text() -> [UInt8] {
        let stats = server.stats
        var out = PrometheusText()
        out.family(
            "kiosk_content_decisions_total", "counter",
            help: "Authorize and Download decisions, by outcome: allowed, or why not.")
        for (outcome, count) in stats.decisions.sorted(by: { $0.key < $1.key }) {
            out.sample("kiosk_content_decisions_total", [("outcome", outcome)], count)
        }
        out.family(
            "kiosk_content_access_token_checks_total", "counter",
            help: "Access-token checks, by result: cached, verified, refused, keys_unknown.")
        for (result, count) in stats.accessTokenChecks.sorted(by: { $0.key < $1.key }) {
            out.sample("kiosk_content_access_token_checks_total", [("result", result)], count)
        }
        return out.bytes
    }

    /// `/readyz`: the store's keys and feed received, and heard from within the staleness bound.
    public func readiness() async -> OperatorEndpoint.Readiness {
        let stats = server.stats
        guard server.isReady else {
            return OperatorEndpoint.Readiness(ready: false, reason: "the store has not been reached yet")
        }
        let (seconds, attoseconds) = maximumStaleness.components
        let boundMs = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        guard stats.storeSilenceMs <= boundMs else {
            return OperatorEndpoint.Readiness(
                ready: false, reason: "the store was last heard \(stats.storeSilenceMs) ms ago")
        }
        return OperatorEndpoint.Readiness(ready: true, reason: "ready")
    }
}
