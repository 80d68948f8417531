import ArgumentParser
import Foundation
import KioskAPI
import KioskRPC
import KioskStore
import Logging

@main
struct KioskStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kiosk-store",
        abstract: "The Kiosk store service: catalog, payments, ledger, signed receipts.",
        subcommands: [Serve.self, AccountCommand.self, Approve.self, Refund.self, Keys.self])
}

/// Options every command that opens a data dir takes.
struct DataDirOptions: ParsableArguments {
    @Option(name: .customLong("data-dir"), help: "Directory of the ledger and signing keys.")
    var dataDir: String

    /// Opens the store on the data dir, in the environment it was first served with.
    /// Only `creating` commands (`account create`) may start a new data dir: for
    /// the others a mistyped path is an error, not a fresh ledger and key.
    func openStore(catalog: String? = nil, environment: ReceiptV1.Environment? = nil, creating: Bool = false) throws -> Store {
        let ledgerFile = (dataDir as NSString).appendingPathComponent(Ledger.fileName)
        guard creating || FileManager.default.fileExists(atPath: ledgerFile) else {
            throw ValidationError("no ledger in \(dataDir): give the --data-dir of a store (`serve` or `account create` starts one)")
        }
        let ledgerEnvironment = try Ledger(directory: dataDir).environment()
        let chosen = environment ?? ledgerEnvironment ?? .sandbox
        let loaded = try catalog.map { path -> Catalog in
            do { return try Catalog.load(path: path) } catch { throw ValidationError("bad catalog: \(error)") }
        } ?? Catalog(bundleID: "com.example.kiosk", products: [])
        return try Store(configuration: StoreConfiguration(dataDirectory: dataDir, catalog: loaded, environment: chosen))
    }
}

extension ReceiptV1.Environment: ExpressibleByArgument {
    public init?(argument: String) { self.init(name: argument) }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve the store on TCP.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on; 0 picks a free one.") var port = 7301
    @OptionGroup var data: DataDirOptions
    @Option(help: "The catalog file (JSON).") var catalog: String
    @Option(help: "sandbox or production.") var environment: ReceiptV1.Environment = .sandbox
    @Option(help: "trace, debug, info, notice, warning, error or critical.") var logLevel = "info"

    func run() async throws {
        bootstrapStandardErrorLogging(level: logLevel)
        let logger = Logger(label: "kiosk-store")
        let loadedCatalog: Catalog
        do {
            loadedCatalog = try Catalog.load(path: catalog)
        } catch {
            FileHandle.standardError.write(Data("kiosk-store: bad catalog: \(error)\n".utf8))
            throw ExitCode(2)
        }
        let server = try StoreServer(
            store: StoreConfiguration(dataDirectory: data.dataDir, catalog: loadedCatalog, environment: environment),
            server: ServerConfiguration(host: host, port: port), logger: logger)
        try await server.start()
        // Scripts and tests read this line to learn the port.
        let banner = "kiosk-store listening on \(host):\(server.port ?? port) (\(environment.name), \(loadedCatalog.products.count) products)\n"
        FileHandle.standardOutput.write(Data(banner.utf8))
        let signals = SignalWaiter(signals: [SIGINT, SIGTERM])
        await signals.wait()
        logger.info("shutting down")
        await server.shutdown()
    }
}

struct AccountCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account", abstract: "Manage accounts.", subcommands: [Create.self, SetPayments.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create an account and print its id and bearer token (shown once).")
        @OptionGroup var data: DataDirOptions
        @Flag(help: "Create the account with payments disabled (restrictions).") var paymentsDisabled = false
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let store = try data.openStore(creating: true)
            let (id, token) = try store.createAccount(paymentsAllowed: !paymentsDisabled)
            if json {
                print(#"{"account_id":"\#(id)","token":"\#(token)","payments_allowed":\#(!paymentsDisabled)}"#)
            } else {
                print("account \(id)")
                print("token   \(token)")
                print("(the token is shown only now; the store keeps only its hash)")
            }
        }
    }

    struct SetPayments: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "set-payments", abstract: "Allow (on) or forbid (off) an account's payments.")
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

struct Approve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Approve a deferred (ask-to-buy) transaction.")
    @OptionGroup var data: DataDirOptions
    @Option(help: "The catalog file the store serves.") var catalog: String
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        let record = try await data.openStore(catalog: catalog).approve(transactionID: transaction)
        print("transaction \(record.id): \(record.state.name)")
    }
}

struct Refund: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Refund (revoke) a purchased transaction.")
    @OptionGroup var data: DataDirOptions
    @Option(help: "Why, e.g. \"customer request\".") var reason: String
    @Argument(help: "The transaction id.") var transaction: String

    func run() async throws {
        let revocation = try await data.openStore().refund(transactionID: transaction, reason: reason)
        print("transaction \(revocation.transactionID): refunded (revocation \(revocation.cursor))")
    }
}

struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Manage receipt signing keys.", subcommands: [Rotate.self, Export.self])

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a new signing key; old keys keep verifying.")
        @OptionGroup var data: DataDirOptions
        func run() async throws {
            let key = try data.openStore().rotateKeys()
            print("new signing key \(key.id)")
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the public keys (JSON) for receipt verifiers.")
        @OptionGroup var data: DataDirOptions
        func run() async throws {
            let keys = try data.openStore().publicKeys()
            let entries = keys.map {
                #"{"key_id":"\#($0.id)","ed25519_public_key":"\#(Data($0.rawRepresentation).base64EncodedString())","not_before_ms":\#($0.notBeforeMs)}"#
            }
            print("{\"keys\":[" + entries.joined(separator: ",") + "]}")
        }
    }
}
