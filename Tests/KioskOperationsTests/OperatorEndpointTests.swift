import Foundation
import Kiosk
import KioskContentCommands
import KioskOperations
import KioskStoreCommands
import KioskTesting
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The operator endpoint of both services: `/metrics` read with Prometheus's own parser (`prometheus_client` from
/// PyPI) after real purchases, a refund and a decline; `/healthz` and `/readyz`.
@Suite(.timeLimit(.minutes(3))) struct OperatorEndpointTests {
    static func get(_ port: Int, _ path: String) async throws -> (Int, String) {
        let (data, response) = try await URLSession.shared.data(
            from: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    /// Parses Prometheus text with `prometheus_client`'s parser (installed from PyPI when missing): each sample as
    /// `name{label="value",…}` (labels sorted) → value.
    static func parse(_ text: String) throws -> [String: Double] {
        let script = """
            import json, subprocess, sys
            try:
                from prometheus_client.parser import text_string_to_metric_families
            except ImportError:
                subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "prometheus_client"], check=True,
                               stdout=subprocess.DEVNULL)
                from prometheus_client.parser import text_string_to_metric_families
            out = {}
            for family in text_string_to_metric_families(sys.stdin.read()):
                for s in family.samples:
                    labels = ",".join('%s="%s"' % (k, v) for k, v in sorted(s.labels.items()))
                    out[s.name + ("{" + labels + "}" if labels else "")] = s.value
            print(json.dumps(out))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data(text.utf8))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw KioskError(.unknown, "the Prometheus parser refused it") }
        return try JSONDecoder().decode([String: Double].self, from: data)
    }

    @Test func theStoresMetricsSayWhatHappened() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let metrics = StoreMetrics(store: try session.store)
        let endpoint = OperatorEndpoint(
            registry: metrics.registry, rpcServer: try session.storeRPCServer, text: { metrics.text() },
            refresh: { await metrics.refresh() }, readiness: { await metrics.readiness() })
        try await endpoint.start()
        let kiosk = try session.makeClient(account: try session.makeAccount())
        guard case .success(let book) = try await kiosk.purchase(productID: "filter.sepia", paymentMethod: card),
            case .success = try await kiosk.purchase(productID: "credits.5", paymentMethod: card)
        else {
            Issue.record("expected purchases")
            return
        }
        try await session.refund(transactionID: book.id)
        session.failNextPayment()
        _ = try? await kiosk.purchase(productID: "credits.10", paymentMethod: card)
        // A webhook to a port nothing listens on: its first attempts fail and are retried later.
        _ = try await session.store.addWebhook(
            url: "http://127.0.0.1:1/kiosk", secret: Array(repeating: 7, count: 16), since: 0)
        let report = try #require(try await session.store.deliverWebhooks())
        #expect(report.failedAttempts >= 1 && report.delivered == 0)
        // Reconciliation finds nothing to settle: the decline closed its intent when it was answered.
        #expect(try await session.reconcile() == .init())

        let (status, text) = try await Self.get(endpoint.port, "/metrics")
        #expect(status == 200)
        let samples = try Self.parse(text)
        #expect(
            samples[#"kiosk_store_transactions{product_type="consumable",revoked="false",state="purchased"}"#] == 1)
        #expect(
            samples[#"kiosk_store_transactions{product_type="non_consumable",revoked="true",state="purchased"}"#] == 1)
        #expect(samples[#"kiosk_store_payments{kind="purchase",state="completed"}"#] == 2)
        #expect(samples[#"kiosk_store_payments{kind="purchase",state="closed"}"#] == 1, "the decline")
        #expect(samples[#"kiosk_store_revenue_minor_units{currency="USD"}"#] == 99)
        #expect(samples[#"kiosk_store_refunded_minor_units{currency="USD"}"#] == 299)
        #expect(samples["kiosk_store_payment_intents_pending"] == 0)
        #expect(samples[#"kiosk_store_subscriptions{state="active"}"#] == 0)
        #expect((samples["kiosk_store_event_log_head"] ?? 0) > 0)
        // The RPC server's meter: three purchases, each answered (a decline is an answer), timed, none in flight.
        let purchase = #"method="/kiosk.store.v1.Store/Purchase""#
        #expect(samples["kiosk_rpc_server_started_total{\(purchase)}"] == 3)
        #expect(samples["kiosk_rpc_server_in_flight{\(purchase)}"] == 0)
        #expect(samples["kiosk_rpc_server_handling_seconds_count{\(purchase)}"] == 3)
        #expect(samples["kiosk_rpc_server_handling_seconds_bucket{le=\"+Inf\",\(purchase)}"] == 3)
        let handled = samples.filter {
            $0.key.hasPrefix("kiosk_rpc_server_handled_total{code=") && $0.key.contains(purchase)
        }
        #expect(handled.values.reduce(0, +) == 3, "\(handled)")
        #expect((samples["kiosk_rpc_server_received_bytes_total{\(purchase)}"] ?? 0) > 0)
        #expect((samples["kiosk_rpc_server_connections"] ?? 0) >= 1)
        #expect(samples[#"kiosk_rpc_server_limit_refusals_total{limit="connections"}"#] == 0)
        // The ledger's writes (three purchases, a refund, …) and the failed webhook attempts.
        #expect((samples["kiosk_store_ledger_write_seconds_count"] ?? 0) >= 4)
        #expect(
            samples["kiosk_store_ledger_write_seconds_count"]
                == samples[#"kiosk_store_ledger_write_seconds_bucket{le="+Inf"}"#])
        #expect((samples["kiosk_store_ledger_commits_total"] ?? 0) >= 1)
        #expect(
            (samples["kiosk_store_ledger_committed_writes_total"] ?? 0)
                >= (samples["kiosk_store_ledger_commits_total"] ?? 1))
        for reason in ["retry", "collision", "group"] {
            #expect(samples[#"kiosk_store_ledger_reruns_total{reason="\#(reason)"}"#] != nil, "\(reason)")
        }
        #expect(samples[#"kiosk_store_webhook_attempts_total{outcome="retrying"}"#] == Double(report.failedAttempts))
        #expect(samples[#"kiosk_store_webhook_attempts_total{outcome="delivered"}"#] == 0)
        #expect(samples["kiosk_store_webhook_delivery_seconds_count"] == Double(report.failedAttempts))
        #expect(samples[#"kiosk_store_webhook_deliveries{state="pending"}"#] ?? 0 >= 1, "the queue")
        #expect((samples[#"kiosk_store_reconcile_runs_total{result="ok"}"#] ?? 0) >= 1)
        #expect(samples[#"kiosk_store_reconcile_runs_total{result="failed"}"#] == 0)
        for outcome in ["charged", "closed", "deferred", "duplicate_refunded", "left"] {
            #expect(samples["kiosk_store_reconciled_intents_total{outcome=\"\(outcome)\"}"] == 0, "\(outcome)")
        }
        #expect(try await Self.get(endpoint.port, "/healthz").0 == 200)
        #expect(try await Self.get(endpoint.port, "/readyz") == (200, "ready\n"))
        #expect(try await Self.get(endpoint.port, "/nope").0 == 404)
        await kiosk.close()
        await endpoint.shutdown()
        await session.shutdown()
    }

    /// The alert rules docs/operations.md recommends are valid Prometheus rules, as `promtool check rules` (from
    /// Debian's `prometheus` package, installed when missing) reads them.
    @Test func theRecommendedAlertsAreValidRules() throws {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/operations.md")
        let page = try String(contentsOf: docs, encoding: .utf8)
        let start = try #require(page.range(of: "## Alerts we recommend\n\n```yaml\n"))
        let end = try #require(page.range(of: "```", range: start.upperBound..<page.endIndex))
        let rules = NSTemporaryDirectory() + "kiosk-alerts-" + UUID().uuidString + ".yml"
        try Data(page[start.upperBound..<end.lowerBound].utf8).write(to: URL(fileURLWithPath: rules))
        defer { try? FileManager.default.removeItem(atPath: rules) }
        let script = """
            command -v promtool >/dev/null || { apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 \
              || sudo -n apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1; }
            promtool check rules "$1"
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", script, "check", rules]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(text)")
        #expect(text.contains("SUCCESS"), "\(text)")
    }

    @Test func theContentServicesMetricsAndReadiness() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let metrics = ContentMetrics(server: session.content, maximumStaleness: .seconds(300))
        let endpoint = OperatorEndpoint(
            registry: metrics.registry, rpcServer: session.content.server, text: { metrics.text() },
            refresh: { await metrics.refresh() }, readiness: { await metrics.readiness() })
        try await endpoint.start()
        let kiosk = try session.makeClient(account: try session.makeAccount())
        guard case .success(let book) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card) else {
            Issue.record("expected a purchase")
            return
        }
        let target = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-ops-" + UUID().uuidString)
        defer { try? FileManager.default.removeItem(at: target) }
        _ = try await kiosk.download(productID: "book.swift", transaction: book, to: target).result()
        try await session.refund(transactionID: book.id)
        let samples = try Self.parse(try await Self.get(endpoint.port, "/metrics").1)
        #expect((samples["kiosk_content_receipt_cache_misses"] ?? 0) >= 1)
        #expect(samples["kiosk_content_downloads_in_flight"] == 0)
        #expect((samples["kiosk_content_store_keys_known"] ?? 0) >= 1)
        let download = #"method="/kiosk.content.v1.Content/Download""#
        #expect(samples["kiosk_rpc_server_started_total{\(download)}"] == 1)
        #expect((samples["kiosk_rpc_server_sent_bytes_total{\(download)}"] ?? 0) >= 1)
        #expect(samples[#"kiosk_content_decisions_total{outcome="allowed"}"#] == 1, "the download")
        #expect((samples[#"kiosk_content_access_token_checks_total{result="verified"}"#] ?? 0) >= 1)
        #expect(try await Self.get(endpoint.port, "/readyz") == (200, "ready\n"))
        await #expect(throws: OperatorEndpointError.self, "off loopback is refused") {
            try await OperatorEndpoint(
                registry: metrics.registry, refresh: {}, readiness: { .init(ready: true, reason: "") }
            ).start(host: "0.0.0.0")
        }
        await kiosk.close()
        await endpoint.shutdown()
        await session.shutdown()
    }
}

let card = "test-card:4242424242424242"
