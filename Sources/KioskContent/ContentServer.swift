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
    let library: ContentLibrary
    let gate: ReceiptGate
    private let follower = NIOLockedValueBox<Task<Void, Never>?>(nil)

    /// Loads the manifest and prepares every file (reusing earlier
    /// preparations); throws ``ManifestError`` for a bad manifest.
    public init(configuration: ContentConfiguration, server: ServerConfiguration = .defaults,
                logger: Logger = Logger(label: "kiosk.content", factory: { _ in SwiftLogNoOpLogHandler() })) throws {
        self.configuration = configuration
        let manifest = try Manifest.load(contentDirectory: configuration.contentDirectory)
        var items: [PreparedContent] = []
        for entry in manifest.entries {
            let item = try PreparedContent.prepare(entry, in: configuration.preparedDirectory, chunkSize: configuration.chunkSize)
            logger.info("\(item.reused ? "reused" : "prepared") \(entry.productID): \(item.originalSize) bytes in \(item.chunks.count) chunks, \(item.compressedSize) stored")
            items.append(item)
        }
        self.library = ContentLibrary(items: items)
        let link = StoreLink(host: configuration.storeHost, port: configuration.storePort, token: configuration.storeToken)
        self.gate = ReceiptGate(configuration: configuration, link: link, logger: logger)
        let service = ContentService(
            library: library, gate: gate,
            limiter: DownloadLimiter(perAccount: configuration.maximumDownloadsPerAccount, total: configuration.maximumDownloads))
        self.server = RPCServer(configuration: server, services: [service], logger: logger)
    }

    /// The prepared products (for tools and tests).
    public var items: [PreparedContent] { library.items }

    /// Starts following the store and listening.
    public func start() async throws {
        let gate = self.gate
        follower.withLockedValue { $0 = Task { await gate.followStore() } }
        try await server.start()
    }

    /// The port listened on, once started.
    public var port: Int? { server.port }

    /// The verification counters (cache hits and misses, revocations, store silence).
    public var stats: GateStats { gate.stats }

    /// Shuts down gracefully and stops following the store.
    public func shutdown() async {
        await server.shutdown()
        follower.withLockedValue { $0?.cancel() }
    }
}
