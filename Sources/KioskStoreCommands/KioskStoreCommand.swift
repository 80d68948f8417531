import ArgumentParser
import Foundation
import KioskAPI
import KioskConsole
import KioskHosting
import KioskOperations
import KioskRPC
import KioskStore
import Logging

/// The `kiosk-store` command line: serve the store and administer its data dir (`kiosk-store --help`).
public struct KioskStoreCommand: AsyncParsableCommand {
    /// Creates the command (ArgumentParser fills in its options).
    public init() {}

    public static let configuration = CommandConfiguration(
        commandName: "kiosk-store",
        abstract: "The Kiosk store service: catalog, payments, ledger, signed receipts.",
        subcommands: [
            Serve.self, AccountCommand.self, ServiceCommand.self, Approve.self, Decline.self, Refund.self,
            RefundRequests.self, DenyRefund.self, Reconcile.self, Events.self, WebhookCommand.self, Keys.self,
            TLSCommand.self, SubscriptionsCommand.self, Grant.self, CodesCommand.self,
        ])

    /// Who acts through the commands that administer a data dir: the events they record name the user
    /// (``OperatorScope``).
    static var operatorName: String {
        // The effective user from the system, not $USER (which anyone sets); under sudo, who ran it too.
        let uid = geteuid()
        let user = getpwuid(uid).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "uid \(uid)"
        let sudo = ProcessInfo.processInfo.environment["SUDO_USER"].map { ", sudo from \($0)" } ?? ""
        return "kiosk-store (\(user)\(sudo))"
    }

    /// Parses and runs the command, as ArgumentParser's own `main()` does, with every command but `serve` run as
    /// the operator's action (``OperatorScope``): a serving store's events are its buyers' and its own.
    public static func main() async {
        do {
            let command = try parseAsRoot()
            guard var runnable = command as? any AsyncParsableCommand else {
                var command = command
                try OperatorScope.$actor.withValue(operatorName) { try command.run() }
                return
            }
            if runnable is Serve {
                try await runnable.run()
            } else {
                try await OperatorScope.$actor.withValue(operatorName) { try await runnable.run() }
            }
        } catch {
            exit(withError: error)
        }
    }
}

/// Options every command that opens a data dir takes.
struct DataDirOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "Directory of the ledger and signing keys.")
    var dataDir: String
    @Option(
        name: .customLong("database"),
        help:
            "Keep the ledger in PostgreSQL (postgres://user@host:port/database) instead of the data dir's SQLite file; also KIOSK_STORE_DATABASE."
    )
    var database: String?
    @Option(
        name: .customLong("database-password-file"),
        help:
            "File holding the PostgreSQL user's password; also KIOSK_STORE_DATABASE_PASSWORD (never in the URL on a command line)."
    )
    var databasePasswordFile: String?
    @Option(
        name: .customLong("database-ca"),
        help:
            "PEM file of the CA that signed PostgreSQL's certificate: TLS, the certificate and the host name verified (verify-full); also KIOSK_STORE_DATABASE_CA. Default: the system's roots, or plaintext to a loopback host."
    )
    var databaseCA: String?
    @Flag(
        name: .customLong("database-plaintext"),
        help: "Talk to a PostgreSQL beyond loopback without TLS (a sandbox store only; a production store refuses).")
    var databasePlaintext = false
    @Option(
        name: .customLong("database-statements"),
        help: ArgumentHelp(
            "prepared: each connection prepares the statements it runs, parsed and planned once; unnamed: each one parsed and planned every time, for a pooler that does not keep prepared statements (PgBouncer in transaction mode before 1.21); also KIOSK_STORE_DATABASE_STATEMENTS.",
            valueName: "prepared|unnamed"))
    var databaseStatements: String?
    @Option(
        name: .customLong("database-connections"),
        help: ArgumentHelp(
            "Connections to PostgreSQL, each with a thread of its own: at most this many of the store's transactions run at once (1–1000, default 8); also KIOSK_STORE_DATABASE_CONNECTIONS.",
            valueName: "count"))
    var databaseConnections: String?
    @Option(
        name: .customLong("key-encryption-key-file"),
        help:
            "File holding the key that seals the private signing keys in the ledger (kiosk-store keys new-kek), the same for every replica on one database; also KIOSK_STORE_KEY_ENCRYPTION_KEY_FILE. Without it the private keys stay in the data dir."
    )
    var keyEncryptionKeyFile: String?

    /// The key-encryption key from --key-encryption-key-file or the environment; nil: private keys in the data dir.
    func keyEncryptionKey() throws -> KeyEncryptionKey? {
        guard
            let path = keyEncryptionKeyFile
                ?? ProcessInfo.processInfo.environment["KIOSK_STORE_KEY_ENCRYPTION_KEY_FILE"], !path.isEmpty
        else {
            return nil
        }
        do {
            return try KeyEncryptionKey(contentsOfFile: path)
        } catch let error as StoreError {
            throw ValidationError(error.message)
        }
    }

    /// The PostgreSQL database from --database or the environment; nil for the data dir's SQLite ledger.
    /// - Parameter environment: the store's environment when known (a production store refuses plaintext beyond
    ///   loopback).
    func postgres(environment storeEnvironment: StoreEnvironment? = nil) throws -> PostgresLocation? {
        let environment = ProcessInfo.processInfo.environment
        guard let url = database ?? environment["KIOSK_STORE_DATABASE"], !url.isEmpty else {
            // An option of a PostgreSQL ledger given to a store on SQLite is a mistake (a --database forgotten), not
            // a setting to ignore.
            let given = [
                ("--database-password-file", databasePasswordFile != nil), ("--database-ca", databaseCA != nil),
                ("--database-plaintext", databasePlaintext), ("--database-statements", databaseStatements != nil),
                ("--database-connections", databaseConnections != nil),
            ].filter(\.1).map(\.0)
            guard given.isEmpty else {
                throw ValidationError(
                    "\(given.joined(separator: ", ")) \(given.count == 1 ? "applies" : "apply") only to a PostgreSQL ledger: give --database as well (without it the ledger is the data dir's SQLite file)"
                )
            }
            return nil
        }
        var password = environment["KIOSK_STORE_DATABASE_PASSWORD"]
        if let databasePasswordFile {
            do {
                password = try String(contentsOfFile: databasePasswordFile, encoding: .utf8).trimmingCharacters(
                    in: .whitespacesAndNewlines)
            } catch {
                throw ValidationError(
                    "cannot read the database password from \(databasePasswordFile): \(error.localizedDescription)")
            }
        }
        do {
            var location = try PostgresLocation(url: url, password: password)
            let caFile = databaseCA ?? environment["KIOSK_STORE_DATABASE_CA"].flatMap { $0.isEmpty ? nil : $0 }
            location.security = try PostgresTransportSecurity.chosen(
                host: location.host, caFile: caFile, plaintext: databasePlaintext, environment: storeEnvironment)
            switch databaseStatements
                ?? environment["KIOSK_STORE_DATABASE_STATEMENTS"].flatMap({ $0.isEmpty ? nil : $0 })
            {
            case nil, "prepared": location.preparesStatements = true
            case "unnamed": location.preparesStatements = false
            case let other?:
                throw ValidationError("--database-statements \(other): give prepared or unnamed")
            }
            if let count = databaseConnections
                ?? environment["KIOSK_STORE_DATABASE_CONNECTIONS"].flatMap({ $0.isEmpty ? nil : $0 })
            {
                guard let number = Int(count), (1...1_000).contains(number) else {
                    throw ValidationError("--database-connections \(count): give a whole number from 1 to 1000")
                }
                location.connections = number
            }
            return location
        } catch let error as StoreError {
            throw ValidationError(error.message)
        }
    }

    /// The store's configuration on this data dir and ledger.
    func configuration(catalog: Catalog, environment: StoreEnvironment) throws -> StoreConfiguration {
        var configuration = StoreConfiguration(dataDirectory: dataDir, catalog: catalog, environment: environment)
        configuration.database = try postgres(environment: environment)
        configuration.keyEncryptionKey = try keyEncryptionKey()
        return configuration
    }

    /// Opens the store on the data dir, in the environment it was first served with.
    /// Only `creating` commands (`account create`) may start a new data dir: for
    /// the others a mistyped path is an error, not a fresh ledger and key.
    func openStore(
        catalog: String? = nil, environment: StoreEnvironment? = nil, creating: Bool = false,
        payments: PaymentOptions? = nil
    ) throws -> Store {
        let postgres = try postgres(environment: environment)
        // The data dir's own file: the SQLite ledger, or on PostgreSQL the signing keys (a mistyped
        // database name fails to connect; a mistyped data dir must not start a new signing key).
        let marker = postgres == nil ? Ledger.fileName : "keys"
        guard creating || FileManager.default.fileExists(atPath: (dataDir as NSString).appendingPathComponent(marker))
        else {
            throw ValidationError(
                "no ledger in \(dataDir): give the --data-dir of a store (`serve` or `account create` starts one)")
        }
        let ledgerEnvironment = try (postgres.map { try Ledger(postgres: $0) } ?? Ledger(directory: dataDir))
            .environment()
        let chosen = environment ?? ledgerEnvironment ?? .sandbox
        let loaded =
            try catalog.map { path -> Catalog in
                do { return try Catalog.load(path: path) } catch { throw ValidationError("bad catalog: \(error)") }
            } ?? Catalog(bundleID: "com.example.kiosk", products: [])
        var configuration = try configuration(catalog: loaded, environment: chosen)
        if let payments { try payments.apply(to: &configuration) }
        return try Store(configuration: configuration)
    }
}

/// How the store takes payments.
struct PaymentOptions: ParsableArguments {
    @Option(
        name: .customLong("payment-processor"),
        help: "simulated (test cards; sandbox only, the sandbox default) or stripe (required in production).")
    var processor: String?
    @Option(name: .customLong("stripe-key-file"), help: "File holding the Stripe secret key (sk_live_… or sk_test_…).")
    var stripeKeyFile: String?
    @Option(name: .customLong("stripe-api-base"), help: "Stripe's API base URL (a local double in tests).")
    var stripeAPIBase = "https://api.stripe.com"
    @Option(
        name: .customLong("stripe-lookup-delay-ms"),
        help: "How long Stripe's search may lag a charge: pending payments of dead processes are settled after it.")
    var stripeLookupDelayMs: Int64 = 60_000

    func apply(to configuration: inout StoreConfiguration) throws {
        switch processor ?? (configuration.environment == .production ? nil : "simulated") {
        case "simulated"?:
            configuration.paymentProcessor = SimulatedPaymentProcessor.fromEnvironment()
        case "stripe"?:
            guard let stripeKeyFile else {
                throw ValidationError("--payment-processor stripe needs --stripe-key-file FILE")
            }
            let key: String
            do {
                key = try String(contentsOfFile: stripeKeyFile, encoding: .utf8).trimmingCharacters(
                    in: .whitespacesAndNewlines)
            } catch {
                throw ValidationError("cannot read the Stripe key from \(stripeKeyFile): \(error.localizedDescription)")
            }
            guard key.hasPrefix("sk_") || key.hasPrefix("rk_") else {
                throw ValidationError("\(stripeKeyFile) does not hold a Stripe secret key (sk_… or rk_…)")
            }
            configuration.paymentProcessor = StripePaymentProcessor(
                secretKey: key, baseURL: stripeAPIBase, lookupDelay: .milliseconds(stripeLookupDelayMs))
        case nil:
            throw ValidationError(
                "a production store takes real payments: give --payment-processor stripe --stripe-key-file FILE")
        case let other?:
            throw ValidationError("unknown payment processor \"\(other)\": use simulated or stripe")
        }
    }
}

/// `--environment`'s values, as typed.
enum EnvironmentArgument: String, ExpressibleByArgument, CaseIterable {
    case sandbox, production

    init?(argument: String) { self.init(rawValue: argument.lowercased()) }

    var environment: StoreEnvironment { self == .sandbox ? .sandbox : .production }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve the store on TCP.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on; 0 picks a free one.") var port = 7301
    @OptionGroup var data: DataDirOptions
    @Option(help: "The catalog file (JSON).") var catalog: String
    @Option(
        name: .customLong("environment"),
        help: "sandbox or production (a data dir is bound to the first one it is served with).")
    var environmentArgument: EnvironmentArgument = .sandbox
    var environment: StoreEnvironment { environmentArgument.environment }
    @OptionGroup var payments: PaymentOptions
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain to serve TLS with (reloaded on SIGHUP).")
    var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key of --tls-cert.") var tlsKey: String?
    @Flag(
        name: .customLong("insecure-plaintext"),
        help: "Serve plaintext on an address that is not loopback (refused in production).")
    var insecurePlaintext = false
    @Option(help: "trace, debug, info, notice, warning, error or critical.") var logLevel = "info"
    @Option(help: "text (swift-log's lines) or json (one object a line, with each call's request_id).")
    var logFormat = "text"
    @Option(
        name: .customLong("trace-log"),
        help:
            "Append a span per call (and per ledger write, payment processor call and webhook delivery) to this file, one JSON object a line; a caller's W3C traceparent metadata joins its trace."
    )
    var traceLog: String?
    @Option(
        name: .customLong("time-scale"),
        help:
            "Sandbox only: run subscription periods, grace and billing retry this many times faster than the calendar (720: a month in an hour). Ignored in production."
    )
    var timeScale: Double = 1
    @Option(
        name: .customLong("renewal-interval-ms"),
        help: "How often due subscription renewals are charged, in milliseconds.")
    var renewalIntervalMs: Int = 10_000
    @Option(
        name: .customLong("ask-to-buy-expiry-s"),
        help: "Decline ask-to-buy requests not approved within this many seconds (0: never).")
    var askToBuyExpiryS: Int = 86_400
    @Option(
        name: .customLong("stripe-webhook-port"),
        help:
            "Serve Stripe's webhooks (POST /stripe/webhook) on this port: HTTPS with --tls-cert/--tls-key, else plaintext on loopback behind your TLS proxy; 0 picks a free one. Needs --stripe-webhook-secret-file."
    )
    var stripeWebhookPort: Int?
    @Option(
        name: .customLong("stripe-webhook-host"),
        help: "The address the Stripe webhook endpoint listens on (not loopback: needs --tls-cert/--tls-key).")
    var stripeWebhookHost: String = "127.0.0.1"
    @Option(
        name: .customLong("metrics-port"),
        help:
            "Serve Prometheus metrics (GET /metrics), /healthz and /readyz on this loopback port; 0 picks a free one.")
    var metricsPort: Int?
    @Option(
        name: .customLong("console-port"),
        help:
            "Serve the admin console (web pages; sign in with an admin service credential) on this port: HTTPS with --tls-cert/--tls-key, else plaintext on loopback; 0 picks a free one."
    )
    var consolePort: Int?
    @Option(
        name: .customLong("console-host"),
        help: "The address the admin console listens on (not loopback: needs --tls-cert/--tls-key).")
    var consoleHost: String = "127.0.0.1"
    @Option(
        name: .customLong("stripe-webhook-secret-file"),
        help: "A file holding the endpoint's signing secret (whsec_…); give it twice during a rotation.")
    var stripeWebhookSecretFiles: [String] = []

    func validate() throws {
        if stripeWebhookPort != nil, stripeWebhookSecretFiles.isEmpty {
            throw ValidationError("--stripe-webhook-port needs --stripe-webhook-secret-file FILE")
        }
        guard timeScale >= 1, timeScale <= 1_000_000 else {
            throw ValidationError("--time-scale must be between 1 and 1000000")
        }
        guard renewalIntervalMs >= 10 else { throw ValidationError("--renewal-interval-ms must be at least 10") }
        guard askToBuyExpiryS >= 0 else { throw ValidationError("--ask-to-buy-expiry-s must be 0 (never) or more") }
    }

    func run() async throws {
        guard let format = LogFormat(rawValue: logFormat) else {
            throw ValidationError("--log-format is text or json, not \(logFormat)")
        }
        bootstrapStandardErrorLogging(level: logLevel, format: format)
        if let traceLog {
            do {
                try JSONSpanTracer.bootstrap(appendingTo: traceLog, service: "kiosk-store")
            } catch {
                throw ValidationError("--trace-log: \(error)")
            }
        }
        let logger = Logger(label: "kiosk-store")
        let loadedCatalog: Catalog
        do {
            loadedCatalog = try Catalog.load(path: catalog)
        } catch {
            FileHandle.standardError.write(Data("kiosk-store: bad catalog: \(error)\n".utf8))
            throw ExitCode(2)
        }
        var configuration = try data.configuration(catalog: loadedCatalog, environment: environment)
        try payments.apply(to: &configuration)
        configuration.renewalInterval = .milliseconds(renewalIntervalMs)
        configuration.askToBuyExpiry = askToBuyExpiryS == 0 ? nil : .seconds(askToBuyExpiryS)
        for file in stripeWebhookSecretFiles {
            let secret: String
            do {
                secret = try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(
                    in: .whitespacesAndNewlines)
            } catch {
                throw ValidationError(
                    "cannot read the Stripe webhook secret from \(file): \(error.localizedDescription)")
            }
            guard secret.hasPrefix("whsec_"), secret.utf8.count >= StripeWebhookVerifier.minimumSecretLength else {
                throw ValidationError("\(file) does not hold a Stripe webhook signing secret (whsec_…)")
            }
            configuration.stripeWebhookSecrets.append(secret)
        }
        if timeScale != 1 {
            if environment == .production {
                logger.warning("--time-scale is ignored in production: subscriptions renew on the calendar")
            } else {
                configuration.timeScale = timeScale
                logger.notice(
                    "sandbox time scale \(timeScale)×: a one-month period lasts \(Int((30 * 24 * 60 / timeScale).rounded())) minutes"
                )
            }
        }
        if configuration.database != nil, configuration.keyEncryptionKey == nil {
            logger.warning(
                "the private signing keys stay in this data dir: another store on this database cannot sign; give every replica the same --key-encryption-key-file"
            )
        }
        let server: StoreServer
        let tls: ServerTLSIdentity?
        do {
            tls = try ServerTLSIdentity(certificateChainPath: tlsCert, privateKeyPath: tlsKey)
            var serving = ServerConfiguration(
                host: host, port: port, tls: tls, allowsPlaintextOffLoopback: insecurePlaintext)
            serving.metersCalls = metricsPort != nil
            server = try StoreServer(store: configuration, server: serving, logger: logger)
            try await server.start()
        } catch let error as StoreError {
            FileHandle.standardError.write(Data("kiosk-store: \(error.message)\n".utf8))
            throw ExitCode(2)
        } catch let error as TransportSecurityError {
            FileHandle.standardError.write(Data("kiosk-store: \(error.message)\n".utf8))
            throw ExitCode(2)
        } catch let error as LedgerError {
            FileHandle.standardError.write(Data("kiosk-store: \(error.description)\n".utf8))
            throw ExitCode(2)
        }
        let webhooks = stripeWebhookPort.map { _ in StripeWebhookServer(store: server.store) }
        do {
            if let webhooks, let stripeWebhookPort {
                try await webhooks.start(host: stripeWebhookHost, port: stripeWebhookPort, tls: tls)
            }
        } catch {
            FileHandle.standardError.write(Data("kiosk-store: cannot serve Stripe's webhooks: \(error)\n".utf8))
            await server.shutdown()
            throw ExitCode(2)
        }
        let metrics = metricsPort.map { _ in StoreMetrics(store: server.store) }
        let operatorEndpoint = metrics.map { metrics in
            OperatorEndpoint(
                registry: metrics.registry, rpcServer: server.server, text: { metrics.text() },
                refresh: { await metrics.refresh() },
                readiness: { await metrics.readiness() })
        }
        do {
            if let operatorEndpoint, let metricsPort { try await operatorEndpoint.start(port: metricsPort) }
        } catch {
            FileHandle.standardError.write(Data("kiosk-store: cannot serve metrics: \(error)\n".utf8))
            await webhooks?.shutdown()
            await server.shutdown()
            throw ExitCode(2)
        }
        let console = consolePort.map { _ in AdminConsole(store: server.store) }
        do {
            if let console, let consolePort { try await console.start(host: consoleHost, port: consolePort, tls: tls) }
        } catch {
            FileHandle.standardError.write(Data("kiosk-store: cannot serve the admin console: \(error)\n".utf8))
            await operatorEndpoint?.shutdown()
            await webhooks?.shutdown()
            await server.shutdown()
            throw ExitCode(2)
        }
        // Scripts and tests read this line to learn the port; it is printed once SIGTERM and SIGHUP are trapped.
        let banner =
            "kiosk-store listening on \(host):\(server.port ?? port) (\(environment.name), \(tls == nil ? "plaintext" : "TLS"), \(loadedCatalog.products.count) products)\n"
            + (webhooks.map {
                "kiosk-store Stripe webhooks on \(tls == nil ? "http" : "https")://\(stripeWebhookHost):\($0.port)\(StripeWebhookServer.path)\n"
            } ?? "")
            + (operatorEndpoint.map { "kiosk-store metrics on http://127.0.0.1:\($0.port)/metrics\n" } ?? "")
            + (console.map { "kiosk-store console on \(tls == nil ? "http" : "https")://\(consoleHost):\($0.port)/\n" }
                ?? "")
        try await ServiceHosting.serve(
            announce: { FileHandle.standardOutput.write(Data(banner.utf8)) },
            shutdown: {
                logger.info("shutting down")
                await webhooks?.shutdown()
                await console?.shutdown()
                await operatorEndpoint?.shutdown()
                await server.shutdown()
            },
            reloading: tls, logger: logger)
    }
}

struct AccountCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account", abstract: "Manage accounts.", subcommands: [Create.self, SetPayments.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an account and print its id and bearer token (shown once).")
        @OptionGroup var data: DataDirOptions
        @Flag(help: "Create the account with payments disabled (restrictions).") var paymentsDisabled = false
        @Option(help: "The storefront it buys in: an ISO 3166-1 alpha-3 country code (default: the catalog's).")
        var storefront: String?
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let store = try data.openStore(creating: true)
            let (id, token) = try store.createAccount(
                paymentsAllowed: !paymentsDisabled, storefront: storefront ?? "")
            let shown = storefront ?? store.defaultStorefront
            if json {
                print(
                    JSONLine.encode(
                        Output.AccountCreated(
                            accountID: id, token: token, paymentsAllowed: !paymentsDisabled, storefront: shown)))
            } else {
                print("account \(id)")
                print("token   \(token)")
                print("storefront \(shown)")
                print("(the token is shown only now; the store keeps only its hash)")
            }
        }
    }

    struct SetPayments: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-payments", abstract: "Allow (on) or forbid (off) an account's payments.")
        @OptionGroup var data: DataDirOptions
        @Argument(help: "The account id.") var account: String
        @Argument(help: "on or off.") var state: String

        func validate() throws {
            guard state == "on" || state == "off" else { throw ValidationError("state must be on or off") }
        }

        func run() async throws {
            try data.openStore().setPaymentsAllowed(accountID: account, state == "on")
            print("account \(account): payments \(state)")
        }
    }
}

struct ServiceCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "service", abstract: "Manage service credentials (content services, admin tools).",
        subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Issue a service credential and print it (shown once; the store keeps only its hash).",
            discussion:
                "Role content: the revocation feed (give it to kiosk-content --store-credential). Role admin: the Admin RPCs."
        )
        @OptionGroup var data: DataDirOptions
        @Option(help: "content or admin.") var role: String
        @Option(help: "A label, e.g. content-1.") var name = ""
        @Flag(help: "Print JSON.") var json = false

        func validate() throws {
            guard let role = CallerRole(rawValue: role), CallerRole.serviceRoles.contains(role) else {
                throw ValidationError("--role must be content or admin")
            }
        }

        func run() async throws {
            let store = try data.openStore(creating: true)
            let (id, secret) = try store.createServiceCredential(
                role: CallerRole(rawValue: role) ?? .content, name: name)
            if json {
                print(JSONLine.encode(Output.ServiceCredentialCreated(id: id, role: role, credential: secret)))
            } else {
                print("service \(id) (\(role))")
                print("credential \(secret)")
                print("(the credential is shown only now; the store keeps only its hash)")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List service credentials (never their secrets).")
        @OptionGroup var data: DataDirOptions
        func run() async throws {
            for credential in try data.openStore().ledger.serviceCredentials() {
                let state = credential.revokedMs == 0 ? "active" : "revoked at \(credential.revokedMs)"
                print("\(credential.id)  \(credential.role.rawValue)  \(credential.name)  \(state)")
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Revoke a service credential: its next call is refused (16), and an open revocation feed of it ends within the poll interval."
        )
        @OptionGroup var data: DataDirOptions
        @Argument(help: "The credential id (svc_…).") var id: String
        func run() async throws {
            try data.openStore().revokeServiceCredential(id: id)
            print("service \(id): revoked")
        }
    }
}

struct TLSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tls", abstract: "TLS certificates for development.", subcommands: [CreateDev.self])

    struct CreateDev: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create-dev",
            abstract:
                "Create a local CA (ca.pem) and a server certificate it signs (server.pem, server-key.pem), valid 30 days.",
            discussion:
                "Serve with --tls-cert server.pem --tls-key server-key.pem; clients trust ca.pem (--tls-ca). Uses the openssl command. Not for production."
        )
        @Option(help: "Directory to write into (an existing CA there is reused).") var out: String
        @Option(
            name: .customLong("host"),
            help: "A name or address the certificate is also valid for (localhost, 127.0.0.1 and ::1 always are).")
        var hosts: [String] = []

        func run() async throws {
            do {
                let files = try DevelopmentCertificates.create(in: out, hosts: hosts)
                print("CA          \(files.caCertificatePath)")
                print("certificate \(files.serverCertificatePath)")
                print("key         \(files.serverKeyPath)")
            } catch let error as TransportSecurityError {
                FileHandle.standardError.write(Data("kiosk-store: \(error.message)\n".utf8))
                throw ExitCode(2)
            }
        }
    }
}

struct Approve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Approve a deferred (ask-to-buy) transaction.")
    @OptionGroup var data: DataDirOptions
    @Option(help: "The catalog file the store serves.") var catalog: String
    @OptionGroup var payments: PaymentOptions
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        let record = try await data.openStore(catalog: catalog, payments: payments).approve(transactionID: transaction)
        print("transaction \(record.id): \(record.state.name)")
    }
}

struct SubscriptionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscriptions", abstract: "Support tools for auto-renewable subscriptions.",
        subcommands: [Extend.self, ExtendAll.self])

    struct Extend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Move an active subscription's renewal date later (1 to 90 days; at most twice in 365 days): the buyer keeps it that much longer, the next renewal is charged then."
        )
        @OptionGroup var data: DataDirOptions
        @Option(help: "How many days (1 to 90).") var days: Int
        @Option(help: "Why, e.g. \"outage on 3 March\" (on the RENEWAL_EXTENDED event).") var reason: String
        @Argument(help: "The subscription's original transaction id.") var originalTransactionID: String

        func run() async throws {
            let row = try await data.openStore().extendSubscription(
                originalID: originalTransactionID, days: days, reason: reason)
            print(
                "subscription \(row.originalID): renews \(Date(timeIntervalSince1970: Double(row.expiresMs) / 1000).formatted(.iso8601))"
            )
        }
    }

    struct ExtendAll: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "extend-all",
            abstract:
                "Extend every subscription of a product active now and bought before the job began, each exactly once; run it again (same options, or --job) to resume a job that was stopped."
        )
        @OptionGroup var data: DataDirOptions
        @Option(help: "The auto-renewable subscription's product id.") var product: String
        @Option(help: "How many days (1 to 90).") var days: Int
        @Option(help: "Why (on each RENEWAL_EXTENDED event).") var reason: String
        @Option(help: "The job's id (default: one made from product, days and reason).") var job: String = ""

        func run() async throws {
            let store = try data.openStore()
            let started = try await store.startExtensionJob(productID: product, days: days, reason: reason, jobID: job)
            print("job \(started.id): extending \(started.productID) by \(started.days) days")
            fflush(nil)
            let done = try await store.runExtensionJob(id: started.id) { extended, remaining in
                print("job \(started.id): \(extended) extended, \(remaining) to go")
                // A line at a time even into a pipe or a log: the progress is there should the job be stopped.
                fflush(nil)
            }
            print("job \(started.id): done, \(done.extended) extended, \(done.remaining) left")
        }
    }
}

struct CodesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "codes", abstract: "Offer codes: batches of one-time codes, or a custom code, that buy a product.",
        subcommands: [Create.self, List.self, Revoke.self, Export.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Make a batch: --count one-time codes, or --custom WORD for --limit accounts; each buys --product at --price (default free). Prints the codes."
        )
        @OptionGroup var data: DataDirOptions
        @Option(help: "The catalog file the store serves.") var catalog: String
        @Option(help: "The batch's id (letters, digits, '.', '_', '-').") var batch: String
        @Option(help: "The product a code buys.") var product: String
        @Option(help: "How many one-time codes (1 to 100000).") var count: Int = 0
        @Option(help: "A custom code: one word of 4 to 32 letters and digits.") var custom: String?
        @Option(help: "A custom code: how many accounts may redeem it.") var limit: Int = 0
        @Option(help: "What a code pays, in the product's currency (0: free).") var price = "0"
        @Option(help: "Auto-renewable subscriptions: the first period's length (default: the product's).")
        var period: String?
        @Option(help: "Consumables: the units a code buys.") var quantity: UInt32 = 1
        @Option(help: "When the codes stop working (an ISO 8601 date and time in UTC: YYYY-MM-DDThh:mm:ssZ).")
        var expires: String?

        func run() async throws {
            var expiresMs: Int64 = 0
            if let expires {
                guard let date = try? Date(expires, strategy: .iso8601) else {
                    throw ValidationError("--expires must be an ISO 8601 date and time in UTC: YYYY-MM-DDThh:mm:ssZ")
                }
                expiresMs = Int64(date.timeIntervalSince1970 * 1000)
            }
            let made = try await data.openStore(catalog: catalog).createOfferCodes(
                batchID: batch, productID: product, count: count, customCode: custom, limit: limit, price: price,
                period: period, quantity: quantity, expiresMs: expiresMs)
            for code in made.codes { print(code) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The batches: product, price, redeemed of limit.")
        @OptionGroup var data: DataDirOptions

        func run() async throws {
            for batch in try await data.openStore().ledger.offerCodeBatches() {
                var line = "\(batch.id)  \(batch.kind.rawValue)  \(batch.productID)  price \(batch.price)"
                if !batch.period.isEmpty { line += "  period \(batch.period)" }
                if batch.quantity > 1 { line += "  ×\(batch.quantity)" }
                line += "  \(batch.redeemed)/\(batch.redemptionLimit) redeemed"
                if batch.expiresMs > 0 { line += "  expires \(batch.expiresMs)" }
                if batch.revokedMs > 0 { line += "  REVOKED" }
                print(line)
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Revoke a batch: its codes are refused from now on (offer_code_revoked); redeemed ones stand.")
        @OptionGroup var data: DataDirOptions
        @Argument(help: "The batch id.") var batch: String

        func run() async throws {
            try await data.openStore().revokeOfferCodes(batchID: batch)
            print("offer code batch \(batch): revoked")
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A batch's codes as CSV: code,state,redeemed_ms,account_id,transaction_id.")
        @OptionGroup var data: DataDirOptions
        @Argument(help: "The batch id.") var batch: String

        func run() async throws {
            try await data.openStore().exportOfferCodes(batchID: batch) { print($0) }
        }
    }
}

struct Grant: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Grant an entitlement to an account for some days, without a charge (a GRANT transaction; `refund` revokes it)."
    )
    @OptionGroup var data: DataDirOptions
    @Option(help: "The catalog file (default: the entitlements the serving store recorded in the ledger).")
    var catalog: String?
    @Option(help: "How many days (1 to 3650).") var days: Int
    @Option(help: "Why (on the grant's events).") var reason: String
    @Argument(help: "The account id.") var account: String
    @Argument(help: "The catalog's entitlement id, e.g. pro.") var entitlement: String

    func run() async throws {
        let record = try await data.openStore(catalog: catalog).grantEntitlement(
            accountID: account, entitlementID: entitlement, days: days, reason: reason)
        print(
            "transaction \(record.id): \(entitlement) granted to \(account) until \(Date(timeIntervalSince1970: Double(record.expiresMs) / 1000).formatted(.iso8601))"
        )
    }
}

struct Decline: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Decline a deferred (ask-to-buy) transaction: it fails (SKError 2), nothing is charged.")
    @OptionGroup var data: DataDirOptions
    @Option(help: "Why (the DECLINED event's reason).") var reason = "declined"
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        let record = try await data.openStore().decline(transactionID: transaction, reason: reason)
        print("transaction \(record.id): declined (\(record.state.name), \(record.errorReason))")
    }
}

struct Events: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the event log (one line of JSON per event), or record a TEST event.",
        subcommands: [List.self, Test.self],
        defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print events after a cursor, oldest first, as JSON lines.")
        @OptionGroup var data: DataDirOptions
        @Option(help: "Print events with an id above this one.") var since: UInt64 = 0
        @Option(help: "Only these types (comma-separated: purchased,refunded,…).") var types: String?
        @Option(help: "Only this account's events.") var account: String?
        @Option(help: "At most this many (0: all).") var limit = 0
        @Flag(help: "Keep printing new events as they are recorded (until interrupted).") var follow = false

        func run() async throws {
            let store = try data.openStore()
            var wanted: [EventKind] = []
            for name in (types ?? "").split(separator: ",") {
                guard let type = EventKind(shortName: String(name.trimmingCharacters(in: .whitespaces))) else {
                    throw ValidationError("unknown event type \(name)")
                }
                wanted.append(type)
            }
            var cursor = since
            var printed = 0
            while true {
                let batch = try await store.ledger.events(after: cursor, limit: 500, accountID: account, types: wanted)
                for event in batch {
                    print(EventDocument(event, environment: store.configuration.environment).line)
                    cursor = event.id
                    printed += 1
                    if limit > 0, printed >= limit { return }
                }
                if batch.count == 500 { continue }
                guard follow else { return }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    struct Test: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Record a TEST event, to check that watchers and receivers are wired up.")
        @OptionGroup var data: DataDirOptions

        func run() async throws {
            let event = try await data.openStore().recordTestEvent()
            print("event \(event.id): TEST")
        }
    }
}

struct WebhookCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "webhook",
        abstract: "Send every event to your back end: signed HTTP POSTs, retried until answered 2xx.",
        subcommands: [Add.self, List.self, Remove.self, Deliveries.self, Redrive.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a webhook; events recorded from now on are POSTed to URL by the serving store.")
        @OptionGroup var data: DataDirOptions
        @Option(
            name: .customLong("secret-file"),
            help: "File holding the shared secret (at least 16 bytes) the Kiosk-Signature HMAC is made with.")
        var secretFile: String
        @Option(help: "Also send the events after this id (a backfill); default: only new ones.") var since: UInt64?
        @Argument(help: "The receiver's URL (https://…; http:// for a receiver on your own network).") var url: String

        func run() async throws {
            guard var secret = FileManager.default.contents(atPath: secretFile).map(Array.init) else {
                throw ValidationError("cannot read the secret file \(secretFile)")
            }
            // A trailing newline is not part of the secret.
            while let last = secret.last, last == 10 || last == 13 { secret.removeLast() }
            let hook = try await data.openStore().addWebhook(url: url, secret: secret, since: since)
            print("webhook \(hook.id): \(hook.url), from event \(hook.enqueuedThrough + 1)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List webhooks with their pending and failed deliveries.")
        @OptionGroup var data: DataDirOptions

        func run() async throws {
            let store = try data.openStore()
            for hook in try store.webhooks() {
                let pending = try store.webhookDeliveries(webhookID: hook.id, state: .pending, limit: 100_000).count
                let failed = try store.webhookDeliveries(webhookID: hook.id, state: .failed, limit: 100_000).count
                print(
                    "\(hook.id)  \(hook.url)  queued through event \(hook.enqueuedThrough)  pending \(pending)  failed \(failed)"
                )
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a webhook and its deliveries.")
        @OptionGroup var data: DataDirOptions
        @Argument(help: "The webhook id.") var id: String

        func run() async throws {
            try await data.openStore().removeWebhook(id: id)
            print("webhook \(id): removed")
        }
    }

    struct Deliveries: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show deliveries, newest first.")
        @OptionGroup var data: DataDirOptions
        @Flag(help: "Only those that failed for good (re-drive them with `webhook redrive`).") var failed = false
        @Flag(help: "Only those not delivered yet.") var pending = false
        @Option(help: "Only this webhook's.") var webhook: String?
        @Option(help: "At most this many.") var limit = 100

        func run() async throws {
            let state: WebhookDelivery.State? = failed ? .failed : pending ? .pending : nil
            for delivery in try data.openStore().webhookDeliveries(webhookID: webhook, state: state, limit: limit) {
                var line =
                    "\(delivery.webhookID)  event \(delivery.eventID)  \(delivery.state.rawValue)  attempts \(delivery.attempts)"
                if !delivery.lastError.isEmpty { line += "  last error: \(delivery.lastError)" }
                print(line)
            }
        }
    }

    struct Redrive: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Queue failed deliveries again (all, or one event's); the serving store sends them at once.")
        @OptionGroup var data: DataDirOptions
        @Option(help: "Only this webhook's.") var webhook: String?
        @Option(help: "Only this event's.") var event: UInt64?

        func run() async throws {
            let count = try await data.openStore().redriveWebhookDeliveries(webhookID: webhook, eventID: event)
            print("\(count) deliver\(count == 1 ? "y" : "ies") queued again")
        }
    }
}

struct Refund: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Refund (revoke) a purchased transaction; grants its refund request, if the buyer made one.")
    @OptionGroup var data: DataDirOptions
    @Option(help: "Why, e.g. \"customer request\".") var reason: String
    @OptionGroup var payments: PaymentOptions
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        let revocation = try await data.openStore(payments: payments).refund(transactionID: transaction, reason: reason)
        var text = "transaction \(revocation.transactionID): refunded (revocation \(revocation.cursor))"
        if revocation.creditShortfall > 0 {
            text += "; \(revocation.creditShortfall) of its credits were already spent and could not be taken back"
        }
        print(text)
    }
}

struct RefundRequests: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refund-requests",
        abstract:
            "List buyers' refund requests, oldest first: grant one with `kiosk-store refund TX`, deny it with `kiosk-store deny-refund TX`."
    )
    @OptionGroup var data: DataDirOptions
    @Option(help: "pending, granted or denied.") var state = "pending"
    @Flag(help: "One line of JSON per request.") var json = false

    func run() async throws {
        guard
            let wanted = StoreV1.RefundRequestState(name: state).flatMap({ RefundRequest.State(rawValue: $0.rawValue) })
        else { throw ValidationError("state must be pending, granted or denied") }
        let ledger = try data.openStore().ledger
        var token = ""
        repeat {
            let page = try ledger.refundRequests(state: wanted, limit: 500, pageToken: token)
            for request in page.requests {
                if json {
                    print(request.jsonLine)
                } else {
                    var line =
                        "\(request.transactionID)  \(request.productID)  account \(request.accountID)  \(request.state)  \"\(request.reason)\""
                    if request.decidedMs > 0 { line += "  decision: \"\(request.decisionReason)\"" }
                    print(line)
                }
            }
            token = page.nextPageToken
        } while !token.isEmpty
    }
}

struct DenyRefund: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "deny-refund",
        abstract: "Deny a buyer's pending refund request (REFUND_DENIED); the transaction stays as it is.")
    @OptionGroup var data: DataDirOptions
    @Option(help: "Why (the REFUND_DENIED event's reason, shown to the buyer's app).") var reason: String
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        let request = try await data.openStore().denyRefund(transactionID: transaction, reason: reason)
        print("transaction \(request.transactionID): refund request denied")
    }
}

struct Reconcile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Settle pending payments with the processor: charged ones are recorded, the others closed.",
        discussion:
            "A serving store does this at start-up and every 30 s; this command is for a stopped store, or to see the counts."
    )
    @OptionGroup var data: DataDirOptions
    @Option(help: "The catalog file the store serves.") var catalog: String?
    @OptionGroup var payments: PaymentOptions
    @Flag(
        help:
            "Settle every pending payment now, also those a running store may be paying (only when no store serves this data dir)."
    )
    var all = false
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let store = try data.openStore(catalog: catalog, payments: payments)
        let report = try await store.reconcile(all: all)
        let counts = try store.ledger.intentCounts()
        let pending = counts[.pending] ?? 0
        let completed = counts[.completed] ?? 0
        let closed = counts[.closed] ?? 0
        if json {
            print(
                JSONLine.encode(
                    Output.Reconciled(
                        charged: report.charged, deferred: report.deferred, closed: report.closed,
                        refunded: report.refunded, left: report.left,
                        intents: .init(pending: pending, completed: completed, closed: closed))))
        } else {
            print(
                "recorded \(report.charged) charged and \(report.deferred) deferred, closed \(report.closed) uncharged, refunded \(report.refunded) duplicates, left \(report.left); intents now: \(pending) pending, \(completed) completed, \(closed) closed"
            )
        }
    }
}

struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Manage receipt signing keys.", subcommands: [Rotate.self, Retire.self, Export.self, NewKEK.self])

    struct NewKEK: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "new-kek",
            abstract:
                "Write a new key-encryption key to FILE (0600, never replacing one): give it to every store replica as --key-encryption-key-file.",
            discussion:
                "Stores given it seal their private signing keys into the ledger with it (keys kept in a data dir are sealed at the next start), so replicas on one PostgreSQL database share the keys."
        )
        @Argument(help: "The file to create.") var file: String
        func run() async throws {
            do {
                let key = try KeyEncryptionKey.generate(toFile: file)
                print("wrote key-encryption key \(key.fingerprint) to \(file)")
            } catch let error as StoreError {
                throw ValidationError(error.message)
            }
        }
    }

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a new signing key; old keys keep verifying.")
        @OptionGroup var data: DataDirOptions
        func run() async throws {
            let key = try data.openStore().rotateKeys()
            print("new signing key \(key.id)")
        }
    }

    struct Retire: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Retire a signing key: receipts it signed after the time stop verifying (21003), older ones still do.",
            discussion: "The active (newest) key cannot be retired: run `keys rotate` first.")
        @Argument(help: "The key id (`keys export` lists them).") var keyID: String
        @Option(help: "When: ISO 8601 (YYYY-MM-DDThh:mm:ssZ) or milliseconds since 1970. Default: now.") var at: String?
        @OptionGroup var data: DataDirOptions

        func run() async throws {
            let atMs = try at.map(Self.milliseconds(from:))
            let key = try data.openStore().retireKey(id: keyID, atMs: atMs)
            let date = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(key.notAfterMs) / 1000))
            print(
                "retired signing key \(key.id) at \(key.notAfterMs) ms (\(date)); receipts it signed after that no longer verify"
            )
        }

        /// Milliseconds since 1970, or an ISO 8601 date-time (with or without fractional seconds).
        static func milliseconds(from text: String) throws -> Int64 {
            if let ms = Int64(text) { return ms }
            let plain = ISO8601DateFormatter()
            let fractional = ISO8601DateFormatter()
            fractional.formatOptions.insert(.withFractionalSeconds)
            guard let date = plain.date(from: text) ?? fractional.date(from: text) else {
                throw ValidationError(
                    "--at must be ISO 8601 (YYYY-MM-DDThh:mm:ssZ) or milliseconds since 1970, not \"\(text)\"")
            }
            return Int64((date.timeIntervalSince1970 * 1000).rounded())
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the public keys (JSON) for receipt verifiers.")
        @OptionGroup var data: DataDirOptions
        func run() async throws {
            let keys = try data.openStore().publicKeys()
            print(
                JSONLine.encode(
                    Output.PublicKeys(
                        keys: keys.map {
                            .init(
                                keyID: $0.id, ed25519PublicKey: Data($0.rawRepresentation).base64EncodedString(),
                                notBeforeMs: $0.notBeforeMs,
                                notAfterMs: $0.notAfterMs)
                        })))
        }
    }
}
