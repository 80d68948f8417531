import Dispatch
import KioskRPC
import Logging
import NIOConcurrencyHelpers

/// The content service: prepares the manifest's files, follows the store, and
/// serves `kiosk.content.v1.Content`.
public final class ContentServer: Sendable {
    /// The configuration.
    public let configuration: ContentConfiguration
    /// The RPC server.
    public let server: RPCServer
    let library = ContentLibrary()
    let gate: ReceiptGate
    let limiter: DownloadLimiter
    let manifest: Manifest
    private let logger: Logger
    private let follower = NIOLockedValueBox<Task<Void, Never>?>(nil)

    /// Loads and checks the manifest; throws ``ManifestError`` for a bad one, and
    /// ``TransportSecurityError`` for a production service without TLS off loopback.
    /// The files are prepared by ``prepare()`` (or ``start()``).
    public init(
        configuration: ContentConfiguration, server: ServerConfiguration = .defaults,
        logger: Logger = Logger(label: "kiosk.content", factory: { _ in SwiftLogNoOpLogHandler() })
    ) throws {
        if configuration.environment == .production, server.tls == nil, !Loopback.contains(host: server.host) {
            throw TransportSecurityError(
                "a production content service serves TLS on \(server.host): give it a certificate and key (plaintext is for loopback only)"
            )
        }
        self.configuration = configuration
        self.manifest = try Manifest.load(contentDirectory: configuration.contentDirectory)
        self.logger = logger
        let link = StoreLink(
            endpoints: configuration.storeEndpoints, credential: configuration.storeCredential,
            tls: configuration.storeTLS)
        self.gate = ReceiptGate(configuration: configuration, link: link, logger: logger)
        self.limiter = DownloadLimiter(
            perAccount: configuration.maximumDownloadsPerAccount, total: configuration.maximumDownloads)
        let service = ContentService(
            library: library, gate: gate, limiter: limiter, operatorCredential: configuration.storeCredential)
        self.server = RPCServer(configuration: server, services: [service], logger: logger)
    }

    /// Prepares every file of the manifest (reusing earlier preparations), on a
    /// thread of its own: compressing is blocking work that must not hold up
    /// Swift's cooperative threads. Idempotent.
    public func prepare() async throws {
        if !library.items.isEmpty || manifest.entries.isEmpty { return }
        let manifest = self.manifest
        let configuration = self.configuration
        let logger = self.logger
        let items: [PreparedContent] = try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(
                    with: Result {
                        try manifest.entries.map { entry in
                            let item = try PreparedContent.prepare(
                                entry, in: configuration.preparedDirectory, chunkSize: configuration.chunkSize)
                            logger.info(
                                "\(item.reused ? "reused" : "prepared") \(entry.productID): \(item.originalSize) bytes in \(item.chunks.count) chunks, \(item.compressedSize) stored"
                            )
                            return item
                        }
                    })
            }
        }
        library.install(items)
    }

    /// The prepared products (for tools and tests).
    public var items: [PreparedContent] { library.items }

    /// Prepares the files, starts following the store and listens.
    public func start() async throws {
        try await prepare()
        try await server.start()
        let gate = self.gate
        follower.withLockedValue { $0 = Task { await gate.followStore() } }
    }

    /// The port listened on, once started.
    public var port: Int? { server.port }

    /// Waits, at most `timeout`, until the service has the store's keys and its
    /// revocation feed: before that it answers 21005. Returns whether it has them.
    public func waitUntilReady(timeout: Duration = .seconds(10)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !gate.isReady {
            guard ContinuousClock.now < deadline, (try? await Task.sleep(for: .milliseconds(10))) != nil else {
                return false
            }
        }
        return true
    }

    /// The verification counters (cache hits and misses, revocations, store silence).
    public var stats: GateStats { gate.stats }

    /// True once the store's keys and its revocation feed have both been received.
    public var isReady: Bool { gate.isReady }

    /// Downloads being sent now.
    public var activeDownloads: Int { limiter.active }

    /// Shuts down gracefully and stops following the store.
    public func shutdown() async {
        await server.shutdown()
        follower.withLockedValue { $0?.cancel() }
        await gate.link.client.close()
    }
}
