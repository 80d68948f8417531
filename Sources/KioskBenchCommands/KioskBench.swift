import ArgumentParser
import Crypto
import Foundation
import Histogram
import KioskAPI
import KioskContent
import KioskRPC
import KioskSigning
import KioskStore
import KioskWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// `kiosk-bench`: the command line as a library; the executable is its `main` only.
public struct KioskBench: AsyncParsableCommand {
    public init() {}

    public static let configuration = CommandConfiguration(
        commandName: "kiosk-bench",
        abstract: "Load-tests Kiosk: receipt verification, downloads and purchases.",
        discussion: "Without --content / --store the bench starts its own store and content service on 127.0.0.1.",
        subcommands: [
            Verify.self, DownloadBench.self, PurchaseBench.self, RefundLatency.self, TokenFlood.self, CrashTest.self,
            Floor.self, HashBench.self, Plot.self,
        ])
}

/// Output options every load command takes.
struct OutputOptions: ParsableArguments {
    @Flag(help: "Print JSON.") var json = false
    @Option(help: "Write the full latency percentile distribution (HdrHistogram text format, µs) to this file.")
    var histogram: String?
    @Option(help: "Draw latency by percentile to this SVG file.") var plot: String?
    @Option(help: "Label of the run in the plot.") var label: String?
    @Option(
        name: .customLong("server-pid"),
        help:
            "A local server process to report CPU and peak RSS of; repeat it for replicas (CPU summed, the largest peak RSS)."
    )
    var serverPIDs: [Int32] = []
    @Option(
        name: .customLong("started-file"),
        help:
            "Create this file when the measured part begins (receipts minted, warm-up done): a script times what it does to the servers from it."
    )
    var startedFile: String?

    /// Creates --started-file, if given.
    func markStarted() {
        if let startedFile { FileManager.default.createFile(atPath: startedFile, contents: nil) }
    }

    /// The servers' CPU and memory now (nil without --server-pid, or when one is gone).
    func serverStats() -> ProcessStats? {
        guard !serverPIDs.isEmpty else { return nil }
        var total = ProcessStats(cpuSeconds: 0, peakRSSBytes: 0)
        for pid in serverPIDs {
            guard let stats = ProcessStats.of(pid: pid) else { return nil }
            total.cpuSeconds += stats.cpuSeconds
            total.peakRSSBytes = max(total.peakRSSBytes, stats.peakRSSBytes)
        }
        return total
    }

    func finish(_ report: Report, started: ProcessStats, serverBefore: ProcessStats?) throws {
        var report = report
        let now = ProcessStats.current()
        report.fields.append(("cpus", ProcessStats.placement()))
        report.fields.append(("client_cpu_seconds", round2(now.cpuSeconds - started.cpuSeconds)))
        report.fields.append(("client_peak_rss_mib", now.peakRSSBytes / (1 << 20)))
        if let server = serverStats() {
            report.fields.append(("server_cpu_seconds", round2(server.cpuSeconds - (serverBefore?.cpuSeconds ?? 0))))
            report.fields.append(("server_peak_rss_mib", server.peakRSSBytes / (1 << 20)))
        }
        print(json ? report.json : report.table)
        if let histogram { try report.writeHistogram(to: histogram) }
        if let plot, let result = report.result {
            try LatencyPlot.svg([(label ?? report.title, LatencyPlot.points(result.histogram))]).write(
                toFile: plot, atomically: true, encoding: .utf8)
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
    @Option(
        name: .customLong("tls-ca"), help: "With --content/--store: PEM trust roots of the services' TLS certificates.")
    var tlsCA: String?

    func clientTLS() throws -> ClientTLS? {
        try tlsCA.map { try ClientTLS(trustRootsPath: $0) }
    }
}

/// `host:port[,host:port…]`: one service or its replicas.
func endpointList(_ text: String) throws -> [Endpoint] {
    do {
        return try Endpoint.list(parsing: text)
    } catch {
        throw ValidationError("\(error)")
    }
}

/// Clients of `endpoints`, the i-th starting at the i-th endpoint, so connections spread over replicas and each fails over to the others.
func spreadClients(
    _ count: Int, over endpoints: [Endpoint], configuration: ClientConfiguration,
    group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
) -> [RPCClient] {
    (0..<max(count, 1)).map { index in
        let start = index % endpoints.count
        return RPCClient(
            endpoints: Array(endpoints[start...] + endpoints[..<start]), configuration: configuration, group: group)
    }
}

/// Calls that failed because their connection was lost and were sent again to another replica.
let lostConnectionRetries = NIOLockedValueBox(0)

/// Runs `call`, again (once per other endpoint of `client`) when its connection was lost: what the SDK does,
/// so a replica killed under load costs retries, not failed calls.
/// `retries`: how many lost connections to retry after (default ``RPCClient/lostConnectionRetries``).
func retryingLostConnection<T>(_ client: RPCClient, retries: Int? = nil, _ call: () async throws -> T) async throws -> T
{
    var retries = retries ?? client.lostConnectionRetries
    var busy = 0
    while true {
        do {
            return try await call()
        } catch let error as RPCError
            where retries > 0 && error.code == .unavailable
            && (error.source == .connection || error.source == .unprocessed)
        {
            retries -= 1
            lostConnectionRetries.withLockedValue { $0 += 1 }
        } catch let error as RPCError where error.code == .aborted && error.source == .remote && busy < 6 {
            // Another store process is making this payment (one just killed, until its database session ends): as the SDK does.
            busy += 1
            abortedRetries.withLockedValue { $0 += 1 }
            try await Task.sleep(for: .milliseconds(25 << (busy - 1)))
        }
    }
}

/// Calls answered ABORTED (the payment in progress on another store process) and sent again.
let abortedRetries = NIOLockedValueBox(0)

/// The first few failed calls' errors, in full, for the report.
let errorSamples = NIOLockedValueBox<[String]>([])

/// The error's kind for the report's counts, keeping its text as a sample.
func errorKind(_ error: RPCError) -> String {
    errorSamples.withLockedValue { if $0.count < 5 { $0.append(error.description) } }
    return "rpc_\(error.code.name)"
}

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Load-test the content service's Authorize path (the check a download makes).",
        discussion: """
            Cold runs use every receipt once (or, on the bench's own content service, run it with its cache off) \
            and print the observed cache hit ratio; --repeat-receipt sends one receipt again and again (the cached \
            path); --raw verifies the same receipts in-process on one thread, with no network: the machine's ceiling.
            """)

    @Option(
        help:
            "A running content service, host:port, or its replicas host:port,host:port (connections spread over them, each failing over to the others; default: start one here)."
    )
    var content: String?
    @OptionGroup(title: "With --content: its store's ledger, to mint receipts and an account") var storeAccess:
        StoreAccess
    @Option(help: "With --content: the hosted product to authorize.") var product: String?
    @Option(help: "Distinct receipts made before the timed part.") var receipts = 20_000
    @Option(help: "Connections (K).") var connections = 4
    @Option(
        name: .customLong("client-threads"),
        help: "Event-loop threads the connections are spread over (the reference's nio-verify-load uses 1).")
    var clientThreads = 1
    @Option(help: "Calls in flight in total (C).") var concurrency = 64
    @Option(help: "Seconds measured.") var duration = 10.0
    @Option(help: "Seconds of warm-up, not measured.") var warmup = 2.0
    @Option(help: "Open loop: calls per second, latency from the intended send time.") var rate: Double?
    @Flag(name: .customLong("repeat-receipt"), help: "One receipt again and again: the cached path.")
    var repeatReceipt = false
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
        let endpoints: [Endpoint]
        if let content {
            let (store, loaded) = try storeAccess.open(needing: "with --content, to mint receipts")
            environment = store.configuration.environment.wire
            productID = product ?? loaded.products.first { $0.hostedContent }?.id ?? ""
            let account = try store.createAccount()
            token = try store.issueAccessToken(
                account: try await store.authenticate(token: account.token), audience: AccessToken.contentAudience
            ).token
            clientConfiguration.tls = try transport.clientTLS()
            minted = try store.mintReceipts(
                accountID: account.id, productID: productID, count: repeatReceipt ? 1 : receipts)
            keys = try store.publicKeys()
            endpoints = try endpointList(content)
        } else {
            // Cold runs on the bench's own service turn its cache off: no call can be a hit.
            let services = try await LocalServices.start(cacheSize: repeatReceipt ? 10_000 : 0, tls: transport.tls)
            local = services
            productID = LocalServices.product
            token = try await services.buyerAccessToken()
            clientConfiguration = try services.clientConfiguration(clientConfiguration)
            environment = services.store.store.configuration.environment.wire
            keys = try services.store.store.publicKeys()
            endpoints = [Endpoint(host: "127.0.0.1", port: services.content.port ?? 0)]
            do {
                minted = try services.store.store.mintReceipts(
                    accountID: services.buyer.id, productID: productID, count: repeatReceipt ? 1 : receipts)
            } catch {
                await services.stop()
                throw error
            }
        }
        try await stopping(local) {
            if raw {
                try rawRun(receipts: minted, keys: keys, environment: environment)
            } else {
                // Stats is for the content service's operator: its own credential (in-process, the bench made it).
                let operatorCredential =
                    local?.content.configuration.storeCredential
                    ?? ProcessInfo.processInfo.environment["KIOSK_STORE_CREDENTIAL"]
                try await load(
                    endpoints: endpoints, token: token, productID: productID, minted: minted, inProcess: local != nil,
                    clientConfiguration: clientConfiguration, operatorCredential: operatorCredential)
            }
        }
    }

    private func load(
        endpoints: [Endpoint], token: String, productID: String, minted: [[UInt8]], inProcess: Bool,
        clientConfiguration: ClientConfiguration, operatorCredential: String?
    ) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(clientThreads, 1))
        defer { group.shutdownGracefully { _ in } }
        let clients = spreadClients(connections, over: endpoints, configuration: clientConfiguration, group: group)
        let options = bearer(token)
        // Each request is encoded once, before the run, as the reference's load generator serialises its requests
        // beforehand: a call's latency and the load generator's CPU are the call's, not its encoding's.
        let requests = minted.map {
            EncodedMessage(ContentV1.AuthorizeRequest(signedReceipt: $0, productID: productID))
        }
        // One per replica: the cache hit ratio is the sum of theirs.
        let statsClients = endpoints.map { RPCClient(endpoints: [$0], configuration: clientConfiguration) }
        // Counters and CPU time are read after the warm-up: the figures are the measured part's.
        var before: [ContentV1.StatsResponse?] = []
        var started = ProcessStats.current()
        var serverBefore: ProcessStats?
        var statsError: Error?
        let measuring: () async -> Void = {
            do { before = try await stats(statsClients, credential: operatorCredential, required: true) } catch {
                statsError = error
            }
            started = ProcessStats.current()
            serverBefore = output.serverStats()
            output.markStarted()
        }
        let method = "/kiosk.content.v1.Content/Authorize"
        @Sendable func request(_ sequence: Int) -> EncodedMessage<ContentV1.AuthorizeRequest> {
            requests[sequence % requests.count]
        }
        @Sendable func outcome(_ answer: ContentV1.AuthorizeResponse) -> String? {
            answer.allowed ? nil : "refused_\(answer.status)_\(answer.refusal)"
        }
        // A call as the SDK makes it: a task awaiting it, sent again when its connection was lost (`retries` times).
        @Sendable func awaitedCall(_ worker: Int, _ sequence: Int, retries: Int? = nil) async -> String? {
            let client = clients[worker % clients.count]
            do {
                return outcome(
                    try await retryingLostConnection(client, retries: retries) {
                        try await client.unary(
                            method, encoded: request(sequence), response: ContentV1.AuthorizeResponse.self,
                            options: options)
                    })
            } catch let error as RPCError {
                return errorKind(error)
            } catch {
                return "other"
            }
        }
        let warmupDuration = Duration.milliseconds(Int64(warmup * 1000))
        let measuredDuration = Duration.milliseconds(Int64(duration * 1000))
        let result: LoadResult
        if rate == nil {
            // Closed loop: each worker's calls chain on its connection's event loop (the client's completion-handler
            // unary), as the reference's load generator chains its requests; a call whose connection was lost is
            // sent again the awaited way, to another replica.
            result = await runChainedLoad(
                concurrency: max(concurrency, 1), warmup: warmupDuration, duration: measuredDuration,
                loops: clients.map(\.eventLoop), measuring: measuring
            ) { worker, sequence, done in
                let client = clients[worker % clients.count]
                // The response is taken still encoded: the call's latency ends when it arrived, before it is decoded and
                // checked, where the reference's load generator stops its clock (the decoding counts in the CPU per call).
                client.unary(
                    method, encoded: request(sequence), response: EncodedMessage<ContentV1.AuthorizeResponse>.self,
                    options: options
                ) { result in
                    let responded = NIODeadline.now()
                    switch result {
                    case .success(let encoded):
                        do throws(WireError) {
                            done(outcome(try encoded.decoded()), responded)
                        } catch {
                            // As the typed call reports a response that does not decode.
                            done(
                                errorKind(
                                    RPCError(
                                        .internal,
                                        "response to \(method) is not a valid AuthorizeResponse: \(error.message)",
                                        source: .remote)), responded)
                        }
                    case .failure(let error)
                    where client.lostConnectionRetries > 0 && error.code == .unavailable
                        && (error.source == .connection || error.source == .unprocessed):
                        lostConnectionRetries.withLockedValue { $0 += 1 }
                        // This was the first of the retries the awaited path would have made.
                        let retries = client.lostConnectionRetries - 1
                        Task(executorPreference: EventLoopTaskExecutor(client.eventLoop)) {
                            done(await awaitedCall(worker, sequence, retries: retries), nil)
                        }
                    case .failure(let error):
                        done(errorKind(error), responded)
                    }
                }
            }
        } else {
            result = await runLoad(
                concurrency: max(concurrency, 1), warmup: warmupDuration, duration: measuredDuration,
                rate: rate, executors: clients.map { EventLoopTaskExecutor($0.eventLoop) }, measuring: measuring
            ) { await awaitedCall($0, $1) }
        }
        let after = try await stats(statsClients, credential: operatorCredential, required: false)
        for client in clients + statsClients { await client.close() }
        if let statsError { throw statsError }
        let (hits, misses) = cacheCounts(before: before, after: after)
        var report = Report(
            title: "verify " + (repeatReceipt ? "warm (one receipt, cached)" : "cold (distinct receipts)"))
        report.result = result
        report.fields = [
            ("connections", connections), ("concurrency", concurrency), ("receipts", minted.count),
            ("mode", rate.map { "open loop, \(Int($0)) calls/s" } ?? "closed loop"),
            ("cache_hit_ratio", hits + misses == 0 ? 0 : round2(Double(hits) / Double(hits + misses) * 100) / 100),
            (
                "server",
                inProcess
                    ? "in-process (cache \(repeatReceipt ? "on" : "off"))"
                    : endpoints.map(\.description).joined(separator: ",")
            ),
            ("retried_after_lost_connection", lostConnectionRetries.withLockedValue { $0 }),
            ("error_samples", errorSamples.withLockedValue { $0 }),
            ("transport", clientConfiguration.tls == nil ? "plaintext" : "TLS"),
        ]
        if !repeatReceipt, minted.count < result.issued, !inProcess {
            report.fields.append(
                ("warning", "more calls (warm-up included) than receipts: receipts were reused, see cache_hit_ratio"))
        }
        try output.finish(report, started: started, serverBefore: serverBefore)
    }

    /// Each replica's counters; nil for one that does not answer (killed) unless `required`.
    /// - Parameter credential: the content service's own credential (`KIOSK_STORE_CREDENTIAL`), which Stats asks for.
    private func stats(
        _ clients: [RPCClient], credential: String?, required: Bool
    ) async throws -> [ContentV1.StatsResponse?] {
        var all: [ContentV1.StatsResponse?] = []
        let options = bearer(credential ?? "")
        for client in clients {
            do {
                all.append(
                    try await client.unary(
                        "/kiosk.content.v1.Content/Stats", request: ContentV1.StatsRequest(),
                        response: ContentV1.StatsResponse.self,
                        options: options))
            } catch  where !required {
                all.append(nil)
            }
        }
        return all
    }

    /// Cache hits and misses between two reads of the replicas' counters; a replica restarted in
    /// between (its counters lower) counts from zero, one that did not answer counts nothing.
    private func cacheCounts(
        before: [ContentV1.StatsResponse?], after: [ContentV1.StatsResponse?]
    ) -> (hits: UInt64, misses: UInt64) {
        var hits: UInt64 = 0
        var misses: UInt64 = 0
        for (first, last) in zip(before, after) {
            guard let last else { continue }
            let restarted = first.map { last.cacheHits < $0.cacheHits || last.cacheMisses < $0.cacheMisses } ?? true
            hits += last.cacheHits - (restarted ? 0 : first?.cacheHits ?? 0)
            misses += last.cacheMisses - (restarted ? 0 : first?.cacheMisses ?? 0)
        }
        return (hits, misses)
    }

    private func rawRun(receipts: [[UInt8]], keys: [ReceiptPublicKey], environment: ReceiptV1.Environment) throws {
        let verifier = ReceiptVerifier(keys: keys, environment: environment)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        // Warm up, then verify each receipt once per round until the duration is spent, on this thread.
        for receipt in receipts.prefix(1000) { _ = verifier.verify(receipt, nowMs: now) }
        let started = ProcessStats.current()
        let clock = ContinuousClock.now
        let end = clock + .milliseconds(Int64(duration * 1000))
        var count = 0
        var failures = 0
        outer: while true {
            for receipt in receipts {
                if verifier.verify(receipt, nowMs: now).status != .valid { failures += 1 }
                count += 1
                if count % 256 == 0, ContinuousClock.now >= end { break outer }
            }
        }
        let elapsed = clock.duration(to: .now)
        let report = Report(
            title: "verify --raw (one thread, no network)",
            fields: [
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
        abstract:
            "Download a generated file with P parallel clients; MB/s of original bytes, decompression, SHA-256 and disk write included."
    )

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
            let line = Array(
                "Kiosk hosts the files of server-delivered products and streams them, compressed, to buyers.\n".utf8)
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
        let receipt = try services.store.store.mintReceipts(
            accountID: services.buyer.id, productID: LocalServices.product, count: 1)[0]
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
                        if (try? await download(
                            client: client, receipt: receipt, options: options, to: path, sha256: expected)) != true
                        {
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
        let report = Report(
            title: "download \(size) MiB, \(compressible == "no" ? "incompressible" : "compressible"), P=\(parallel)",
            fields: [
                ("downloads", parallel * rounds), ("failures", failures.withLockedValue { $0 }),
                ("seconds", round2(elapsed.seconds)), ("MB/s (original bytes)", round2(total / 1e6 / elapsed.seconds)),
                (
                    "wire/original ratio",
                    (Double(item.compressedSize) / Double(max(item.originalSize, 1)) * 10_000).rounded() / 10_000
                ),
            ])
        try output.finish(report, started: started, serverBefore: nil)
        if failures.withLockedValue({ $0 }) > 0 { throw ExitCode(1) }
    }

    private func requireItem(_ services: LocalServices) throws -> PreparedContent {
        guard let item = services.content.items.first else { throw ValidationError("the bench file was not prepared") }
        return item
    }

    /// One download's work on the client: inflate, CRC-32 of each chunk, write to disk, SHA-256 of the
    /// whole (the SDK also saves its resume state, fsynced, every few MiB or every second).
    private func download(
        client: RPCClient, receipt: [UInt8], options: CallOptions, to path: String, sha256: [UInt8]
    ) async throws -> Bool {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let file = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        var hasher = SHA256()
        for try await part in client.serverStreaming(
            "/kiosk.content.v1.Content/Download",
            request: ContentV1.DownloadRequest(signedReceipt: receipt, productID: LocalServices.product),
            response: ContentV1.DownloadPart.self, options: options)
        {
            guard let chunk = part.chunk else { continue }
            let original: ByteBuffer =
                chunk.compressed
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
    static let configuration = CommandConfiguration(
        commandName: "purchase", abstract: "Durable purchases per second against the store.")
    @Option(
        help:
            "A running store, host:port, or its replicas host:port,host:port (connections spread over them, each failing over to the others; default: start one here)."
    )
    var store: String?
    @Option(
        help:
            "With --store: a buyer's bearer token; repeat it for several buyers (worker i buys as the i-th, round robin)."
    )
    var token: [String] = []
    @Option(help: "The product bought, one at a time.") var product = "credits.5"
    @Option(
        name: .customLong("payment-method"),
        help: "The payment method (pm_card_visa for a store on Stripe or its double).")
    var paymentMethod = "test-card:4242424242424242"
    @Option(help: "Connections (one per store replica when not given).") var connections: Int?
    @Option(
        help:
            "Write each answered purchase as a line `idempotency-key transaction-id answered-unix-ms sent-unix-ms` to this file (to check them against the ledger and time recoveries)."
    )
    var answered: String?
    @Option(help: "Purchases in flight (C).") var concurrency = 16
    @Option(help: "Seconds measured.") var duration = 10.0
    @Option(help: "Seconds of warm-up.") var warmup = 1.0
    @OptionGroup var transport: TransportOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        var local: LocalServices?
        let endpoints: [Endpoint]
        let buyerTokens: [String]
        var clientConfiguration = ClientConfiguration()
        if let store {
            guard !token.isEmpty else { throw ValidationError("with --store, give --token") }
            endpoints = try endpointList(store)
            buyerTokens = token
            clientConfiguration.tls = try transport.clientTLS()
        } else {
            let services = try await LocalServices.start(cacheSize: 0, tls: transport.tls)
            local = services
            (endpoints, buyerTokens) = (
                [Endpoint(host: "127.0.0.1", port: services.store.port ?? 0)], [services.buyer.token]
            )
            clientConfiguration = try services.clientConfiguration()
        }
        try await stopping(local) {
            try await measure(
                endpoints: endpoints, buyerTokens: buyerTokens, inProcess: local != nil,
                clientConfiguration: clientConfiguration)
        }
    }

    private func measure(
        endpoints: [Endpoint], buyerTokens: [String], inProcess: Bool, clientConfiguration: ClientConfiguration
    ) async throws {
        let clients = spreadClients(connections ?? endpoints.count, over: endpoints, configuration: clientConfiguration)
        let product = self.product
        let paymentMethod = self.paymentMethod
        let answers = NIOLockedValueBox<[String]>([])
        let run = UUID().uuidString
        var started = ProcessStats.current()
        var serverBefore: ProcessStats?
        let measuring: () async -> Void = {
            started = ProcessStats.current()
            serverBefore = output.serverStats()
            output.markStarted()
        }
        let result = await runLoad(
            concurrency: concurrency, warmup: .milliseconds(Int64(warmup * 1000)),
            duration: .milliseconds(Int64(duration * 1000)), rate: nil, measuring: measuring
        ) { worker, sequence in
            var options = bearer(buyerTokens[worker % buyerTokens.count])
            let key = "\(run)-\(sequence)"
            options.metadata.add("idempotency-key", key)
            let client = clients[worker % clients.count]
            let sentMs = Int64(Date().timeIntervalSince1970 * 1000)
            do {
                // A retry after a lost connection keeps the key: the store answers it with the purchase it recorded, if it did.
                let response = try await retryingLostConnection(client) {
                    try await client.unary(
                        "/kiosk.store.v1.Store/Purchase",
                        request: StoreV1.PurchaseRequest(productID: product, quantity: 1, paymentMethod: paymentMethod),
                        response: StoreV1.PurchaseResponse.self, options: options)
                }
                guard let transaction = response.transaction, transaction.state == .purchased else {
                    return "not_purchased"
                }
                let answeredMs = Int64(Date().timeIntervalSince1970 * 1000)
                answers.withLockedValue { $0.append("\(key) \(transaction.transactionID) \(answeredMs) \(sentMs)") }
                return nil
            } catch let error as RPCError {
                return errorKind(error)
            } catch {
                return "other"
            }
        }
        for client in clients { await client.close() }
        if let answered {
            let lines = answers.withLockedValue { $0 }
            try (lines.map { $0 + "\n" }.joined()).write(toFile: answered, atomically: true, encoding: .utf8)
        }
        var report = Report(title: "purchase (durable, committed before the answer)")
        report.result = result
        report.fields = [
            ("concurrency", concurrency), ("buyers", buyerTokens.count),
            ("server", inProcess ? "in-process" : endpoints.map(\.description).joined(separator: ",")),
            ("answered_purchases", answers.withLockedValue { $0.count }),
            ("retried_after_lost_connection", lostConnectionRetries.withLockedValue { $0 }),
            ("error_samples", errorSamples.withLockedValue { $0 }),
            ("retried_after_aborted", abortedRetries.withLockedValue { $0 }),
            ("error_samples", errorSamples.withLockedValue { $0 }),
        ]
        try output.finish(report, started: started, serverBefore: serverBefore)
    }
}

struct Plot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Draw the --histogram files of several runs into one SVG, a line per run.")
    @Argument(help: "Percentile distribution files written by --histogram.") var files: [String]
    @Option(help: "The SVG to write.") var out: String

    func run() async throws {
        let runs = try files.map { path in
            (
                (path as NSString).lastPathComponent,
                LatencyPlot.points(fromDistribution: try String(contentsOfFile: path, encoding: .utf8))
            )
        }
        try LatencyPlot.svg(runs).write(toFile: out, atomically: true, encoding: .utf8)
        print("wrote \(out)")
    }
}
