import ArgumentParser
import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStore
import KioskWire

/// How the bench opens a running store's ledger in-process, to make accounts and receipts on it.
struct StoreAccess: ParsableArguments {
    @Option(
        name: .customLong("store-data-dir"),
        help:
            "A data dir for the bench's own store process on the services' ledger (with SQLite: the store's own data dir)."
    )
    var storeDataDir: String?
    @Option(help: "The catalog of that store.") var catalog: String?
    @Option(
        name: .customLong("store-database"),
        help:
            "The store's PostgreSQL ledger, postgres://user@host:port/db (password: KIOSK_STORE_DATABASE_PASSWORD); default: the data dir's SQLite file."
    )
    var storeDatabase: String?
    @Option(
        name: .customLong("key-encryption-key-file"),
        help: "The store replicas' key-encryption key (their signing keys are sealed in the ledger).")
    var keyEncryptionKeyFile: String?
    @Option(
        name: .customLong("stripe-key-file"), help: "For a store that takes payments with Stripe: its secret key file.")
    var stripeKeyFile: String?
    @Option(name: .customLong("stripe-api-base"), help: "Stripe's API base URL (a local double).") var stripeAPIBase =
        "https://api.stripe.com"

    /// The store on that ledger (in the environment it is served in) and its catalog.
    func open(needing what: String) throws -> (Store, Catalog) {
        guard let storeDataDir, let catalog else {
            throw ValidationError(
                "\(what): give --store-data-dir and --catalog of the store (and --store-database and --key-encryption-key-file on PostgreSQL)"
            )
        }
        let loaded = try Catalog.load(path: catalog)
        let database = try storeDatabase.map {
            try PostgresLocation(
                url: $0, password: ProcessInfo.processInfo.environment["KIOSK_STORE_DATABASE_PASSWORD"],
                security: ProcessInfo.processInfo.environment["KIOSK_STORE_DATABASE_CA"].map { .verifyFull(caFile: $0) }
            )
        }
        let ledger = try database.map { try Ledger(postgres: $0) } ?? Ledger(directory: storeDataDir)
        var configuration = StoreConfiguration(
            dataDirectory: storeDataDir, catalog: loaded, environment: try ledger.environment() ?? .sandbox)
        configuration.database = database
        configuration.keyEncryptionKey = try keyEncryptionKeyFile.map { try KeyEncryptionKey(contentsOfFile: $0) }
        if let stripeKeyFile {
            let key = try String(contentsOfFile: stripeKeyFile, encoding: .utf8).trimmingCharacters(
                in: .whitespacesAndNewlines)
            configuration.paymentProcessor = StripePaymentProcessor(
                secretKey: key, baseURL: stripeAPIBase, lookupDelay: .zero)
        }
        return (try Store(configuration: configuration), loaded)
    }
}

/// How long a refund takes to reach every content replica: each is shown the receipt (so it is
/// cached there, the case a revocation must evict), the refund is committed on the ledger, and
/// each replica is asked every 2 ms until it refuses the receipt.
struct RefundLatency: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refund-latency",
        abstract: "Time from a refund's commit until every content replica refuses the refunded receipt.")

    @Option(help: "The content replicas, host:port,host:port.") var content: String
    @OptionGroup var store: StoreAccess
    @Option(help: "The hosted product bought and refunded (default: the catalog's first hosted product).") var product:
        String?
    @Option(help: "Refunds measured, one after the other.") var refunds = 5
    @Option(
        name: .customLong("payment-method"),
        help: "The payment method (pm_card_visa for a store on Stripe or its double).")
    var paymentMethod = "test-card:4242424242424242"
    @Option(help: "Seconds a replica may take before the run counts it as never reached.") var limit = 10.0
    @OptionGroup var transport: TransportOptions
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let (store, catalog) = try self.store.open(needing: "refund-latency")
        let endpoints = try endpointList(content)
        guard let productID = product ?? catalog.products.first(where: { $0.hostedContent })?.id else {
            throw ValidationError("the catalog has no hosted product: give --product")
        }
        var configuration = ClientConfiguration(keepalive: nil)
        configuration.tls = try transport.clientTLS()
        let replicas = endpoints.map { RPCClient(endpoints: [$0], configuration: configuration) }
        var latencies: [[Double]] = Array(repeating: [], count: replicas.count)
        var missed = 0
        for _ in 0..<max(refunds, 1) {
            let (_, token) = try store.createAccount()
            let account = try await store.authenticate(token: token)
            let outcome = try await store.purchase(
                account: account, productID: productID, quantity: 1,
                paymentMethod: paymentMethod, idempotencyKey: UUID().uuidString)
            guard case .purchased(let transaction) = outcome.result, let receipt = transaction.receipt else {
                throw ValidationError("buying \(productID) did not make a purchase: \(outcome.result)")
            }
            let access = try store.issueAccessToken(account: account, audience: AccessToken.contentAudience).token
            let request = ContentV1.AuthorizeRequest(signedReceipt: receipt, productID: productID)
            for replica in replicas {
                let answer = try await authorize(replica, request, access)
                guard answer.allowed else {
                    throw ValidationError("\(replica.endpoints[0]) refused a fresh receipt: \(answer.refusal)")
                }
            }
            let started = ContinuousClock.now
            _ = try await store.refund(transactionID: transaction.id, reason: "refund-latency")
            let deadline = started + .milliseconds(Int64(limit * 1000))
            try await withThrowingTaskGroup(of: (Int, Duration?).self) { group in
                for (index, replica) in replicas.enumerated() {
                    group.addTask {
                        while ContinuousClock.now < deadline {
                            if try await !authorize(replica, request, access).allowed {
                                return (index, started.duration(to: .now))
                            }
                            try await Task.sleep(for: .milliseconds(2))
                        }
                        return (index, nil)
                    }
                }
                for try await (index, took) in group {
                    if let took {
                        latencies[index].append(
                            Double(took.components.attoseconds) / 1e15 + Double(took.components.seconds) * 1000)
                    } else {
                        missed += 1
                    }
                }
            }
        }
        for replica in replicas { await replica.close() }
        let all = latencies.flatMap { $0 }
        let worst = all.max() ?? 0
        if json {
            let perReplica = zip(endpoints, latencies).map { endpoint, values in
                "{\"replica\":\"\(endpoint)\",\"max_ms\":\(round2(values.max() ?? 0)),\"median_ms\":\(round2(Self.median(values)))}"
            }
            print(
                "{\"refunds\":\(refunds),\"replicas\":[\(perReplica.joined(separator: ","))],\"max_ms\":\(round2(worst)),\"missed\":\(missed)}"
            )
        } else {
            print("refund-latency: \(refunds) refunds, \(replicas.count) content replicas")
            for (endpoint, values) in zip(endpoints, latencies) {
                print("  \(endpoint): max \(round2(values.max() ?? 0)) ms, median \(round2(Self.median(values))) ms")
            }
            print("  slowest \(round2(worst)) ms; not reached within \(limit) s: \(missed)")
        }
        if missed > 0 { throw ExitCode(1) }
    }

    private func authorize(
        _ client: RPCClient, _ request: ContentV1.AuthorizeRequest, _ token: String
    ) async throws -> ContentV1.AuthorizeResponse {
        try await client.unary(
            "/kiosk.content.v1.Content/Authorize", request: request, response: ContentV1.AuthorizeResponse.self,
            options: bearer(token, timeout: .seconds(5)))
    }

    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : sorted[sorted.count / 2]
    }
}
