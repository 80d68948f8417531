import ArgumentParser
import Foundation
import KioskAPI
import KioskContent
import KioskHosting
import KioskOperations
import KioskRPC
import Logging

/// The `kiosk-content` command line: serve the content service (`kiosk-content --help`).
public struct KioskContentCommand: AsyncParsableCommand {
    /// Creates the command (ArgumentParser fills in its options).
    public init() {}

    public static let configuration = CommandConfiguration(
        commandName: "kiosk-content",
        abstract: "The Kiosk content service: verifies receipts and streams paid product files.",
        subcommands: [Serve.self])
}

extension ReceiptV1.Environment: ExpressibleByArgument {
    public init?(argument: String) { self.init(name: argument) }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve the content directory on TCP.")

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on; 0 picks a free one.") var port = 7302
    @Option(name: .customLong("content-dir"), help: "Directory with manifest.json and the hosted files.")
    var contentDir: String
    @Option(
        name: .customLong("prepared-dir"),
        help: "Where prepared chunks are kept (default: <content-dir>/.kiosk-prepared).") var preparedDir: String?
    @Option(
        help:
            "The store: host:port, or replicas of one store as host:port,host:port (tried in order; the one that worked last first)."
    ) var store = "127.0.0.1:7301"
    @Option(
        name: .customLong("store-credential-file"),
        help:
            "A file (mode 0600) holding the service credential at the store, role content (kiosk-store service create --role content)."
    )
    var storeCredentialFile: String?
    @Option(
        name: .customLong("store-credential"),
        help:
            "The credential itself: other users of the machine can read a command line; prefer --store-credential-file or KIOSK_STORE_CREDENTIAL."
    )
    var storeCredential: String?
    @Option(
        name: .customLong("store-ca"),
        help: "PEM trust roots for the store's TLS certificate (plaintext to a loopback store without it).")
    var storeCA: String?
    @Option(
        name: .customLong("store-server-name"),
        help: "The name the store's certificate must carry (default: the --store host).")
    var storeServerName: String?
    @Option(name: .customLong("tls-cert"), help: "PEM certificate chain to serve TLS with (reloaded on SIGHUP).")
    var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM private key of --tls-cert.") var tlsKey: String?
    @Flag(
        name: .customLong("insecure-plaintext"),
        help: "Serve plaintext on an address that is not loopback (refused in production).")
    var insecurePlaintext = false
    @Option(help: "sandbox or production.") var environment: ReceiptV1.Environment = .sandbox
    @Flag(name: .customLong("accept-sandbox"), help: "A production service that also serves sandbox receipts.")
    var acceptSandbox = false
    @Option(
        name: .customLong("bundle-id"),
        help: "Honour only receipts for this app's bundle id (others: 21003). Default: any bundle id.") var bundleID:
        String?
    @Option(name: .customLong("cache-size"), help: "Verified receipts kept (0 turns the cache off).") var cacheSize =
        10_000
    @Option(
        name: .customLong("max-staleness"),
        help: "Seconds to keep serving on the last known keys and revocations while the store is unreachable.")
    var maxStaleness = 300
    @Option(name: .customLong("max-downloads-per-account"), help: "Concurrent downloads per account.")
    var maxDownloadsPerAccount = 4
    @Option(name: .customLong("max-downloads"), help: "Concurrent downloads in total.") var maxDownloads = 64
    @Option(name: .customLong("chunk-size-kib"), help: "KiB of original file per chunk.") var chunkSizeKiB = 256
    @Option(help: "trace, debug, info, notice, warning, error or critical.") var logLevel = "info"
    @Option(help: "text (swift-log's lines) or json (one object a line, with each call's request_id).")
    var logFormat = "text"
    @Option(
        name: .customLong("trace-log"),
        help:
            "Append a span per call (and per call to the store) to this file, one JSON object a line; a caller's W3C traceparent metadata joins its trace."
    )
    var traceLog: String?
    @Option(
        name: .customLong("metrics-port"),
        help:
            "Serve Prometheus metrics (GET /metrics), /healthz and /readyz on this loopback port; 0 picks a free one.")
    var metricsPort: Int?

    func run() async throws {
        guard let format = LogFormat(rawValue: logFormat) else {
            throw ValidationError("--log-format is text or json, not \(logFormat)")
        }
        bootstrapStandardErrorLogging(level: logLevel, format: format)
        if let traceLog {
            do {
                try JSONSpanTracer.bootstrap(appendingTo: traceLog, service: "kiosk-content")
            } catch {
                throw ValidationError("--trace-log: \(error)")
            }
        }
        let logger = Logger(label: "kiosk-content")
        let storeEndpoints: [Endpoint]
        do {
            storeEndpoints = try Endpoint.list(parsing: store)
        } catch {
            throw ValidationError("--store: \(error)")
        }
        var fromFile: String?
        if let storeCredentialFile {
            guard let text = try? String(contentsOfFile: storeCredentialFile, encoding: .utf8) else {
                throw ValidationError("--store-credential-file \(storeCredentialFile): cannot read it")
            }
            fromFile = text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        guard
            let credential = fromFile ?? storeCredential
                ?? ProcessInfo.processInfo.environment["KIOSK_STORE_CREDENTIAL"], !credential.isEmpty
        else {
            throw ValidationError(
                "a store credential is needed: --store-credential-file FILE or KIOSK_STORE_CREDENTIAL (kiosk-store service create --role content)"
            )
        }
        let tls: ServerTLSIdentity?
        let storeTLS: ClientTLS?
        do {
            tls = try ServerTLSIdentity(certificateChainPath: tlsCert, privateKeyPath: tlsKey)
            storeTLS = try storeCA.map { try ClientTLS(trustRootsPath: $0, serverName: storeServerName) }
        } catch let error as TransportSecurityError {
            FileHandle.standardError.write(Data("kiosk-content: \(error.message)\n".utf8))
            throw ExitCode(2)
        }

        guard (1...16_384).contains(chunkSizeKiB) else { throw ValidationError("--chunk-size-kib must be 1…16384") }
        if let bundleID, bundleID.isEmpty {
            throw ValidationError("--bundle-id must not be empty (leave it out to accept any bundle id)")
        }
        var configuration = ContentConfiguration(
            contentDirectory: contentDir, preparedDirectory: preparedDir,
            storeCredential: credential, storeTLS: storeTLS, environment: environment, acceptSandbox: acceptSandbox,
            bundleID: bundleID, cacheSize: cacheSize,
            maximumStaleness: .seconds(maxStaleness), chunkSize: UInt32(chunkSizeKiB * 1024),
            maximumDownloadsPerAccount: maxDownloadsPerAccount, maximumDownloads: maxDownloads)
        configuration.storeEndpoints = storeEndpoints
        let server: ContentServer
        do {
            var serving = ServerConfiguration(
                host: host, port: port, tls: tls, allowsPlaintextOffLoopback: insecurePlaintext)
            serving.metersCalls = metricsPort != nil
            server = try ContentServer(configuration: configuration, server: serving, logger: logger)
        } catch let error as ManifestError {
            FileHandle.standardError.write(Data("kiosk-content: bad manifest: \(error.message)\n".utf8))
            throw ExitCode(2)
        } catch let error as TransportSecurityError {
            FileHandle.standardError.write(Data("kiosk-content: \(error.message) (--tls-cert and --tls-key)\n".utf8))
            throw ExitCode(2)
        }
        do {
            try await server.start()
        } catch let error as TransportSecurityError {
            FileHandle.standardError.write(Data("kiosk-content: \(error.message)\n".utf8))
            throw ExitCode(2)
        }
        let metrics = metricsPort.map { _ in ContentMetrics(server: server, maximumStaleness: .seconds(maxStaleness)) }
        let operatorEndpoint = metrics.map { metrics in
            OperatorEndpoint(
                registry: metrics.registry, rpcServer: server.server, text: { metrics.text() },
                refresh: { await metrics.refresh() },
                readiness: { await metrics.readiness() })
        }
        do {
            if let operatorEndpoint, let metricsPort { try await operatorEndpoint.start(port: metricsPort) }
        } catch {
            FileHandle.standardError.write(Data("kiosk-content: cannot serve metrics: \(error)\n".utf8))
            await server.shutdown()
            throw ExitCode(2)
        }
        let banner =
            "kiosk-content listening on \(host):\(server.port ?? port) (\(environment.name), \(tls == nil ? "plaintext" : "TLS"), \(server.items.count) products)\n"
            + (operatorEndpoint.map { "kiosk-content metrics on http://127.0.0.1:\($0.port)/metrics\n" } ?? "")
        // Printed once SIGTERM and SIGHUP are trapped: a script may signal as soon as it reads it.
        try await ServiceHosting.serve(
            announce: { FileHandle.standardOutput.write(Data(banner.utf8)) },
            shutdown: {
                logger.info("shutting down; cache hits \(server.stats.cacheHits), misses \(server.stats.cacheMisses)")
                await operatorEndpoint?.shutdown()
                await server.shutdown()
            },
            reloading: tls, logger: logger)
    }
}
