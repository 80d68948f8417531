import ArgumentParser
import Crypto
import Foundation
import Histogram
import NIOCore
import KioskAPI
import KioskContent
import KioskRPC
import KioskStore
import KioskWire
import NIOConcurrencyHelpers

@main
struct KioskBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kiosk-bench",
        abstract: "Load-tests Kiosk: receipt verification, downloads and purchases.",
        discussion: "Without --content / --store the bench starts its own store and content service on 127.0.0.1.",
        subcommands: [Verify.self, DownloadBench.self, PurchaseBench.self, TokenFlood.self, CrashTest.self, Floor.self, Plot.self])
}

/// Output options every load command takes.
struct OutputOptions: ParsableArguments {
    @Flag(help: "Print JSON.") var json = false
    @Option(help: "Write the full latency percentile distribution (HdrHistogram text format, µs) to this file.") var histogram: String?
    @Option(help: "Draw latency by percentile to this SVG file.") var plot: String?
    @Option(help: "Label of the run in the plot.") var label: String?
    @Option(name: .customLong("server-pid"), help: "A local server process to report CPU and peak RSS of.") var serverPID: Int32?

    func finish(_ report: Report, started: ProcessStats, serverBefore: ProcessStats?) throws {
        var report = report
        let now = ProcessStats.current()
        report.fields.append(("cpus", ProcessStats.placement()))
        report.fields.append(("client_cpu_seconds", round2(now.cpuSeconds - started.cpuSeconds)))
        report.fields.append(("client_peak_rss_mib", now.peakRSSBytes / (1 << 20)))
        if let pid = serverPID, let server = ProcessStats.of(pid: pid) {
            report.fields.append(("server_cpu_seconds", round2(server.cpuSeconds - (serverBefore?.cpuSeconds ?? 0))))
            report.fields.append(("server_peak_rss_mib", server.peakRSSBytes / (1 << 20)))
        }
        print(json ? report.json : report.table)
        if let histogram { try report.writeHistogram(to: histogram) }
        if let plot, let result = report.result {
            try LatencyPlot.svg([(label ?? report.title, LatencyPlot.points(result.histogram))]).write(toFile: plot, atomically: true, encoding: .utf8)
        }
        if report.failedTooMuch { throw ExitCode(1) }
    }
}

func round2(_ value: Double) -> Double { (value * 100).rounded() / 100 }

func bearer(_ token: String, timeout: Duration = .seconds(30)) -> CallOptions {
    var metadata = Metadata()
    metadata.add("authorization", "Bearer \(token)")
    return CallOptions(timeout: timeout, metadata: metadata)
}

/// How the bench reaches the services.
struct TransportOptions: ParsableArguments {
    @Flag(help: "Start the bench's own services with TLS (a development CA).") var tls = false
    @Option(name: .customLong("tls-ca"), help: "With --content/--store: PEM trust roots of the services' TLS certificates.")
    var tlsCA: String?

    func clientTLS() throws -> ClientTLS? {
        try tlsCA.map { try ClientTLS(trustRootsPath: $0) }
    }
}

func hostPort(_ text: String) throws -> (String, Int) {
    let parts = text.split(separator: ":")
    guard parts.count == 2, let port = Int(parts[1]) else { throw ValidationError("\(text) is not host:port") }
    return (String(parts[0]), port)
}

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load-test the content service's Authorize path (the check a download makes).",
        discussion: """
            Cold runs use every receipt once (or, on the bench's own content service, run it with its cache off) \
            and print the observed cache hit ratio; --repeat-receipt sends one receipt again and again (the cached \
            path); --raw verifies the same receipts in-process on one thread, with no network: the machine's ceiling.
            """)

    @Option(help: "A running content service, host:port (default: start one here).") var content: String?
    @Option(name: .customLong("store-data-dir"), help: "With --content: the data dir of its store, to mint receipts and an account.") var storeDataDir: String?
    @Option(help: "With --content: the catalog of that store.") var catalog: String?
    @Option(help: "With --content: the hosted product to authorize.") var product: String?
    @Option(help: "Distinct receipts made before the timed part.") var receipts = 20_000
    @Option(help: "Connections (K).") var connections = 4
    @Option(help: "Calls in flight in total (C).") var concurrency = 64
    @Option(help: "Seconds measured.") var duration = 10.0
    @Option(help: "Seconds of warm-up, not measured.") var warmup = 2.0
    @Option(help: "Open loop: calls per second, latency from the intended send time.") var rate: Double?
    @Flag(name: .customLong("repeat-receipt"), help: "One receipt again and again: the cached path.") var repeatReceipt = false
    @Flag(help: "Verify in-process on one thread, no network: the ceiling.") var raw = false
    @OptionGroup var transport: TransportOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        var local: LocalServices?
        let token: String
        var clientConfiguration = ClientConfiguration(keepalive: nil)
        let productID: String
        let minted: [[UInt8]]
        let keys: [ReceiptPublicKey]
        let environment: ReceiptV1.Environment
        let host: String, port: Int
        if let content {
            guard let storeDataDir, let catalog else {
                throw ValidationError("with --content, give --store-data-dir and --catalog of its store to mint receipts")
            }
            let loaded = try Catalog.load(path: catalog)
            environment = try Ledger(directory: storeDataDir).environment() ?? .sandbox
            let store = try Store(configuration: StoreConfiguration(dataDirectory: storeDataDir, catalog: loaded, environment: environment))
            productID = product ?? loaded.products.first { $0.hostedContent }?.id ?? ""
            let account = try store.createAccount()
            token = try store.issueAccessToken(account: try await store.authenticate(token: account.token), audience: AccessToken.contentAudience).token
            clientConfiguration.tls = try transport.clientTLS()
            minted = try store.mintReceipts(accountID: account.id, productID: productID, count: repeatReceipt ? 1 : receipts)
            keys = try store.publicKeys()
            (host, port) = try hostPort(content)
        } else {
            // Cold runs on the bench's own service turn its cache off: no call can be a hit.
            let services = try await LocalServices.start(cacheSize: repeatReceipt ? 10_000 : 0, tls: transport.tls)
            local = services
            productID = LocalServices.product
            token = try await services.buyerAccessToken()
            clientConfiguration = try services.clientConfiguration(clientConfiguration)
            environment = services.store.store.configuration.environment
            keys = try services.store.store.publicKeys()
            (host, port) = ("127.0.0.1", services.content.port ?? 0)
            do {
                minted = try services.store.store.mintReceipts(accountID: services.buyer.id, productID: productID, count: repeatReceipt ? 1 : receipts)
            } catch {
                await services.stop()
                throw error
            }
        }
        try await stopping(local) {
            if raw {
                try rawRun(receipts: minted, keys: keys, environment: environment)
            } else {
                try await load(host: host, port: port, token: token, productID: productID, minted: minted, inProcess: local != nil,
                               clientConfiguration: clientConfiguration)
            }
        }
    }

    private func load(host: String, port: Int, token: String, productID: String, minted: [[UInt8]], inProcess: Bool,
                      clientConfiguration: ClientConfiguration) async throws {
        let clients = (0..<max(connections, 1)).map { _ in
            RPCClient(host: host, port: port, configuration: clientConfiguration)
        }
        let options = bearer(token)
        let receiptsCopy = minted
        let statsClient = clients[0]
        // Counters and CPU time are read after the warm-up: the figures are the measured part's.
        var before = ContentV1.StatsResponse()
        var started = ProcessStats.current()
        var serverBefore: ProcessStats?
        var statsError: Error?
        let result = await runLoad(
            concurrency: max(concurrency, 1), warmup: .milliseconds(Int64(warmup * 1000)), duration: .milliseconds(Int64(duration * 1000)),
            rate: rate, executors: clients.map { EventLoopTaskExecutor($0.eventLoop) },
            measuring: {
                do { before = try await stats(statsClient) } catch { statsError = error }
                started = ProcessStats.current()
                serverBefore = output.serverPID.flatMap(ProcessStats.of(pid:))
            }
        ) { worker, sequence in
            let receipt = receiptsCopy[sequence % receiptsCopy.count]
            do {
                let answer = try await clients[worker % clients.count].unary(
                    "/kiosk.content.v1.Content/Authorize", request: ContentV1.AuthorizeRequest(signedReceipt: receipt, productID: productID),
                    response: ContentV1.AuthorizeResponse.self, options: options)
                return answer.allowed ? nil : "refused_\(answer.status)_\(answer.refusal)"
            } catch let error as RPCError {
                return "rpc_\(error.code.name)"
            } catch {
                return "other"
            }
        }
        let after = try await stats(statsClient)
        for client in clients { await client.close() }
        if let statsError { throw statsError }
        let hits = after.cacheHits - before.cacheHits, misses = after.cacheMisses - before.cacheMisses
        var report = Report(title: "verify " + (repeatReceipt ? "warm (one receipt, cached)" : "cold (distinct receipts)"))
        report.result = result
        report.fields = [
            ("connections", connections), ("concurrency", concurrency), ("receipts", minted.count),
            ("mode", rate.map { "open loop, \(Int($0)) calls/s" } ?? "closed loop"),
            ("cache_hit_ratio", hits + misses == 0 ? 0 : round2(Double(hits) / Double(hits + misses) * 100) / 100),
            ("server", inProcess ? "in-process (cache \(repeatReceipt ? "on" : "off"))" : "\(host):\(port)"),
            ("transport", clientConfiguration.tls == nil ? "plaintext" : "TLS"),
        ]
        if !repeatReceipt, minted.count < result.issued, !inProcess {
            report.fields.append(("warning", "more calls (warm-up included) than receipts: receipts were reused, see cache_hit_ratio"))
        }
        try output.finish(report, started: started, serverBefore: serverBefore)
    }

    private func stats(_ client: RPCClient) async throws -> ContentV1.StatsResponse {
        try await client.unary("/kiosk.content.v1.Content/Stats", request: ContentV1.StatsRequest(), response: ContentV1.StatsResponse.self)
    }

    private func rawRun(receipts: [[UInt8]], keys: [ReceiptPublicKey], environment: ReceiptV1.Environment) throws {
        let verifier = ReceiptVerifier(keys: keys, environment: environment)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        // Warm up, then verify each receipt once per round until the duration is spent, on this thread.
        for receipt in receipts.prefix(1000) { _ = verifier.verify(receipt, nowMs: now) }
        let started = ProcessStats.current()
        let clock = ContinuousClock.now
        let end = clock + .milliseconds(Int64(duration * 1000))
        var count = 0, failures = 0
        outer: while true {
            for receipt in receipts {
                if verifier.verify(receipt, nowMs: now).status != .valid { failures += 1 }
                count += 1
                if count % 256 == 0, ContinuousClock.now >= end { break outer }
            }
        }
        let elapsed = clock.duration(to: .now)
        let report = Report(title: "verify --raw (one thread, no network)", fields: [
            ("receipts", receipts.count), ("verifications", count), ("failures", failures),
            ("verifications/s", Int(Double(count) / elapsed.seconds)),
        ])
        try output.finish(report, started: started, serverBefore: nil)
        // A ceiling measured on receipts that did not verify would be no ceiling.
        if failures > 0 { throw ExitCode(1) }
    }
}

struct DownloadBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "download",
        abstract: "Download a generated file with P parallel clients; MB/s of original bytes, decompression, SHA-256 and disk write included.")

    @Option(help: "File size in MiB.") var size = 64
    @Option(help: "yes: text that compresses; no: random bytes.") var compressible = "yes"
    @Option(help: "Parallel clients (P).") var parallel = 1
    @Option(help: "Downloads per client.") var rounds = 1
    @Flag(help: "Serve and download over TLS.") var tls = false
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let bytes: [UInt8]
        if compressible == "no" {
            bytes = [UInt8]((FileHandle(forReadingAtPath: "/dev/urandom")?.readData(ofLength: size << 20)) ?? Data())
        } else {
            let line = Array("Kiosk hosts the files of server-delivered products and streams them, compressed, to buyers.\n".utf8)
            var text: [UInt8] = []
            text.reserveCapacity(size << 20)
            while text.count < size << 20 { text += line }
            bytes = Array(text.prefix(size << 20))
        }
        let services = try await LocalServices.start(fileBytes: bytes, cacheSize: 10_000, tls: tls)
        try await stopping(services) { try await measure(services, bytes: bytes) }
    }

    private func measure(_ services: LocalServices, bytes: [UInt8]) async throws {
        let item = try requireItem(services)
        let receipt = try services.store.store.mintReceipts(accountID: services.buyer.id, productID: LocalServices.product, count: 1)[0]
        let options = bearer(try await services.buyerAccessToken(), timeout: .seconds(3600))
        let clientConfiguration = try services.clientConfiguration()
        let directory = services.root + "/downloads"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let port = services.content.port ?? 0
        let expected = Array(SHA256.hash(data: bytes))
        let started = ProcessStats.current()
        let clock = ContinuousClock.now
        let failures = NIOLockedValueBox(0)
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<max(parallel, 1) {
                group.addTask {
                    let client = RPCClient(host: "127.0.0.1", port: port, configuration: clientConfiguration)
                    for round in 0..<rounds {
                        let path = "\(directory)/\(worker)-\(round).bin"
                        if (try? await download(client: client, receipt: receipt, options: options, to: path, sha256: expected)) != true {
                            failures.withLockedValue { $0 += 1 }
                        }
                        try? FileManager.default.removeItem(atPath: path)
                    }
                    await client.close()
                }
            }
        }
        let elapsed = clock.duration(to: .now)
        let total = Double(bytes.count) * Double(max(parallel, 1) * rounds)
        let report = Report(title: "download \(size) MiB, \(compressible == "no" ? "incompressible" : "compressible"), P=\(parallel)", fields: [
            ("downloads", parallel * rounds), ("failures", failures.withLockedValue { $0 }),
            ("seconds", round2(elapsed.seconds)), ("MB/s (original bytes)", round2(total / 1e6 / elapsed.seconds)),
            ("wire/original ratio", (Double(item.compressedSize) / Double(max(item.originalSize, 1)) * 10_000).rounded() / 10_000),
        ])
        try output.finish(report, started: started, serverBefore: nil)
        if failures.withLockedValue({ $0 }) > 0 { throw ExitCode(1) }
    }

    private func requireItem(_ services: LocalServices) throws -> PreparedContent {
        guard let item = services.content.items.first else { throw ValidationError("the bench file was not prepared") }
        return item
    }

    /// One download's work on the client: inflate, CRC-32 of each chunk, write to disk, SHA-256 of the
    /// whole (the SDK also saves its resume state per chunk and hashes the file again at the end).
    private func download(client: RPCClient, receipt: [UInt8], options: CallOptions, to path: String, sha256: [UInt8]) async throws -> Bool {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let file = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var hasher = SHA256()
        for try await part in client.serverStreaming(
            "/kiosk.content.v1.Content/Download", request: ContentV1.DownloadRequest(signedReceipt: receipt, productID: LocalServices.product),
            response: ContentV1.DownloadPart.self, options: options) {
            guard let chunk = part.chunk else { continue }
            let original: ByteBuffer = chunk.compressed
                ? try Zlib.decompress(ByteBuffer(bytes: chunk.data), limit: Int(chunk.originalLength))
                : ByteBuffer(bytes: chunk.data)
            let bytes = Array(original.readableBytesView)
            guard Zlib.crc32(bytes) == chunk.crc32 else { return false }
            hasher.update(data: bytes)
            try file.write(contentsOf: bytes)
        }
        try file.synchronize()
        try file.close()
        return Array(hasher.finalize()) == sha256
    }
}

struct PurchaseBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "purchase", abstract: "Durable purchases per second against the store.")
    @Option(help: "A running store, host:port (default: start one here).") var store: String?
    @Option(help: "With --store: a buyer's bearer token.") var token: String?
    @Option(help: "Purchases in flight (C).") var concurrency = 16
    @Option(help: "Seconds measured.") var duration = 10.0
    @Option(help: "Seconds of warm-up.") var warmup = 1.0
    @OptionGroup var transport: TransportOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        var local: LocalServices?
        let host: String, port: Int, buyerToken: String
        var clientConfiguration = ClientConfiguration()
        if let store {
            guard let token else { throw ValidationError("with --store, give --token") }
            (host, port) = try hostPort(store)
            buyerToken = token
            clientConfiguration.tls = try transport.clientTLS()
        } else {
            let services = try await LocalServices.start(cacheSize: 0, tls: transport.tls)
            local = services
            (host, port, buyerToken) = ("127.0.0.1", services.store.port ?? 0, services.buyer.token)
            clientConfiguration = try services.clientConfiguration()
        }
        try await stopping(local) {
            try await measure(host: host, port: port, buyerToken: buyerToken, inProcess: local != nil, clientConfiguration: clientConfiguration)
        }
    }

    private func measure(host: String, port: Int, buyerToken: String, inProcess: Bool, clientConfiguration: ClientConfiguration) async throws {
        let client = RPCClient(host: host, port: port, configuration: clientConfiguration)
        let run = UUID().uuidString
        var started = ProcessStats.current()
        var serverBefore: ProcessStats?
        let result = await runLoad(concurrency: concurrency, warmup: .milliseconds(Int64(warmup * 1000)),
                                   duration: .milliseconds(Int64(duration * 1000)), rate: nil,
                                   measuring: {
                                       started = ProcessStats.current()
                                       serverBefore = output.serverPID.flatMap(ProcessStats.of(pid:))
                                   }) { _, sequence in
            var options = bearer(buyerToken)
            options.metadata.add("idempotency-key", "\(run)-\(sequence)")
            do {
                let response = try await client.unary(
                    "/kiosk.store.v1.Store/Purchase",
                    request: StoreV1.PurchaseRequest(productID: "credits.5", quantity: 1, paymentMethod: "test-card:4242424242424242"),
                    response: StoreV1.PurchaseResponse.self, options: options)
                return response.transaction?.state == .purchased ? nil : "not_purchased"
            } catch let error as RPCError {
                return "rpc_\(error.code.name)"
            } catch {
                return "other"
            }
        }
        await client.close()
        var report = Report(title: "purchase (durable, committed before the answer)")
        report.result = result
        report.fields = [("concurrency", concurrency), ("server", inProcess ? "in-process" : "\(host):\(port)")]
        try output.finish(report, started: started, serverBefore: serverBefore)
    }
}

struct Plot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Draw the --histogram files of several runs into one SVG, a line per run.")
    @Argument(help: "Percentile distribution files written by --histogram.") var files: [String]
    @Option(help: "The SVG to write.") var out: String

    func run() async throws {
        let runs = try files.map { path in
            ((path as NSString).lastPathComponent, LatencyPlot.points(fromDistribution: try String(contentsOfFile: path, encoding: .utf8)))
        }
        try LatencyPlot.svg(runs).write(toFile: out, atomically: true, encoding: .utf8)
        print("wrote \(out)")
    }
}
