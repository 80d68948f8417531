import Foundation
import KioskTesting
import Testing

/// `kiosk-bench` as a process: short runs, checked for their figures (not their speed).
@Suite(.timeLimit(.minutes(2))) struct KioskBenchTests {
    static var binary: String {
        let me =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent("kiosk-bench").path
    }

    func bench(_ arguments: [String], environment: [String: String] = [:]) async throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let data = output.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(returning: (process.terminationStatus, String(decoding: data, as: UTF8.self)))
            }
        }
    }

    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func coldVerifyReportsItsFiguresAndAColdCache() async throws {
        let directory = NSTemporaryDirectory() + "kiosk-bench-test-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (status, output) = try await bench([
            "verify", "--receipts", "300", "--connections", "2", "--concurrency", "4", "--duration", "0.5", "--warmup",
            "0.1", "--json",
            "--histogram", directory + "/cold.hgrm", "--plot", directory + "/cold.svg",
        ])
        #expect(status == 0)
        let report = try json(output)
        #expect((report["calls"] as? Int ?? 0) > 0)
        #expect(report["errors"] as? Int == 0)
        #expect(report["cache_hit_ratio"] as? Double == 0)
        let latency = try #require(report["latency_us"] as? [String: Double])
        #expect(Set(latency.keys).isSuperset(of: ["p50", "p90", "p99", "p99.9", "max"]))
        #expect((latency["p50"] ?? 0) > 0 && (latency["p50"] ?? 0) <= (latency["p99"] ?? 0))
        #expect(try String(contentsOfFile: directory + "/cold.hgrm", encoding: .utf8).contains("Percentile"))
        #expect(try String(contentsOfFile: directory + "/cold.svg", encoding: .utf8).hasPrefix("<svg"))
        let (plotted, _) = try await bench([
            "plot", directory + "/cold.hgrm", directory + "/cold.hgrm", "--out", directory + "/both.svg",
        ])
        #expect(plotted == 0)
        #expect(
            try String(contentsOfFile: directory + "/both.svg", encoding: .utf8).components(separatedBy: "<polyline")
                .count == 3)
    }

    @Test func warmRawDownloadAndPurchaseRun() async throws {
        let warm = try json(
            try await bench(["verify", "--repeat-receipt", "--duration", "0.3", "--warmup", "0", "--json"]).1)
        let overTLS = try json(
            try await bench(["verify", "--tls", "--duration", "0.3", "--warmup", "0", "--receipts", "200", "--json"]).1)
        #expect(
            (overTLS["calls"] as? Int ?? 0) > 0 && overTLS["errors"] as? Int == 0
                && overTLS["transport"] as? String == "TLS")
        let flood = try json(try await bench(["token-flood", "--tokens", "400", "--tls", "--json"]).1)
        #expect(flood["refused_16"] as? Int == 400 && flood["store_calls_during_flood"] as? Int == 0)
        #expect((flood["refund_reached_content_ms"] as? Double ?? -1) >= 0)
        #expect((warm["cache_hit_ratio"] as? Double ?? 0) > 0.9)
        let raw = try json(try await bench(["verify", "--raw", "--receipts", "200", "--duration", "0.3", "--json"]).1)
        #expect((raw["verifications/s"] as? Int ?? 0) > 0 && raw["failures"] as? Int == 0)
        let download = try json(try await bench(["download", "--size", "1", "--parallel", "2", "--json"]).1)
        #expect(download["failures"] as? Int == 0)
        #expect((download["MB/s (original bytes)"] as? Double ?? 0) > 0)
        let purchase = try json(
            try await bench(["purchase", "--concurrency", "4", "--duration", "0.3", "--warmup", "0", "--json"]).1)
        #expect((purchase["calls"] as? Int ?? 0) > 0 && purchase["errors"] as? Int == 0)
    }

    /// Against running services (`--content`, receipts minted on the store's data dir); then against a content
    /// service of another store (unknown account, unknown key): every call refused, counted by kind, first line FAILED, exit 1.
    @Test func verifyAgainstRunningServicesAndCountsFailures() async throws {
        let session = try await KioskTestSession.start()
        let other = try await KioskTestSession.start()
        defer {
            Task {
                await session.shutdown()
                await other.shutdown()
            }
        }
        let catalog = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Scripts/examples/catalog.json").path
        func run(storeDirectory: String, json: Bool) async throws -> (Int32, String) {
            try await bench(
                [
                    "verify", "--content", "127.0.0.1:\(session.contentPort)", "--store-data-dir", storeDirectory,
                    "--catalog", catalog,
                    "--product", "book.swift", "--receipts", "200", "--connections", "1", "--concurrency", "2",
                    "--duration", "0.3", "--warmup", "0", "--tls-ca", session.trustRootsPath ?? "",
                ] + (json ? ["--json"] : []),
                environment: ["KIOSK_STORE_CREDENTIAL": session.content.configuration.storeCredential])
        }
        let (status, output) = try await run(storeDirectory: session.storeDirectory, json: true)
        #expect(status == 0)
        let report = try json(output)
        #expect((report["calls"] as? Int ?? 0) > 0 && report["errors"] as? Int == 0)
        #expect(report["failed_too_many"] as? Bool == false)
        // --raw with --content verifies with that store's keys: every receipt valid.
        let raw = try json(
            try await bench([
                "verify", "--raw", "--content", "127.0.0.1:\(session.contentPort)", "--store-data-dir",
                session.storeDirectory,
                "--catalog", catalog, "--product", "book.swift", "--receipts", "50", "--duration", "0.2", "--json",
            ]).1)
        #expect((raw["verifications"] as? Int ?? 0) > 0 && raw["failures"] as? Int == 0)

        let (refused, table) = try await run(storeDirectory: other.storeDirectory, json: false)
        #expect(refused == 1)
        #expect(table.hasPrefix("FAILED: "))
        #expect(table.contains("rpc_UNAUTHENTICATED: "))  // the access token is the other store's: counted by kind
    }

    /// `sha256` hashes 8 chunks one at a time and in lanes, checks both give the same digests, and
    /// reports both rates (in a debug build the lanes are off: the same code both ways).
    @Test func sha256ComparesOneStreamWithTheLanes() async throws {
        let (status, text) = try await bench(["sha256", "--duration", "0.05", "--chunk", "4160", "--json"])
        #expect(status == 0)
        let report = try json(text)
        #expect(report["chunk_bytes"] as? Int == 4160)
        #expect((report["one_stream_mb_per_s"] as? Double ?? 0) > 0 && (report["lanes_mb_per_s"] as? Double ?? 0) > 0)
        #expect([1, 8].contains(report["lanes"] as? Int ?? 0))
        #expect(["none", "AVX2", "AVX-512VL"].contains(report["implementation"] as? String ?? ""))
        let (refused, _) = try await bench(["sha256", "--chunk", "10"])
        #expect(refused == 64)
    }

    @Test func floorMeasuresBareRoundTrips() async throws {
        let floor = try json(try await bench(["floor", "--duration", "0.2", "--size", "300", "--json"]).1)
        #expect((floor["calls"] as? Int ?? 0) > 0 && floor["errors"] as? Int == 0)
        #expect(floor["bytes_each_way"] as? Int == 300)
        #expect((floor["cpus"] as? String)?.contains(" of ") == true)
        let latency = try #require(floor["latency_us"] as? [String: Double])
        #expect((latency["p50"] ?? 0) > 0)
        let (refused, _) = try await bench(["floor", "--size", "0"])
        #expect(refused == 64)
    }
}
