import KioskAPI
import KioskRPC

/// Configuration of a content service.
public struct ContentConfiguration: Sendable {
    /// The directory holding `manifest.json` and the hosted files.
    public var contentDirectory: String
    /// Where prepared chunks and their indexes are kept; default `<content>/.kiosk-prepared`.
    public var preparedDirectory: String
    /// The store's address.
    public var storeHost: String
    /// The store's port.
    public var storePort: Int
    /// A store account token the service uses for `PublicKeys` and `WatchRevocations`.
    public var storeToken: String
    /// Receipts must be from this environment.
    public var environment: ReceiptV1.Environment
    /// A production service that also serves sandbox receipts.
    public var acceptSandbox: Bool
    /// Verified receipts kept (0 turns the cache off).
    public var cacheSize: Int
    /// How long the service keeps serving on its last known keys and
    /// revocations while the store is unreachable; then 21005.
    public var maximumStaleness: Duration
    /// Bytes of original file per chunk.
    public var chunkSize: UInt32
    /// Concurrent downloads one account may run.
    public var maximumDownloadsPerAccount: Int
    /// Concurrent downloads in total.
    public var maximumDownloads: Int
    /// How long a caller's token → account answer from the store is trusted.
    public var tokenCacheLifetime: Duration
    /// The time, in milliseconds since 1970; replaceable in tests.
    public var clock: @Sendable () -> Int64

    /// Creates a configuration: 10,000 cached receipts, 5 minutes of staleness,
    /// 256 KiB chunks, 4 downloads per account and 64 in total.
    public init(
        contentDirectory: String, preparedDirectory: String? = nil, storeHost: String = "127.0.0.1", storePort: Int = 7301,
        storeToken: String, environment: ReceiptV1.Environment = .sandbox, acceptSandbox: Bool = false,
        cacheSize: Int = 10_000, maximumStaleness: Duration = .seconds(300), chunkSize: UInt32 = 256 * 1024,
        maximumDownloadsPerAccount: Int = 4, maximumDownloads: Int = 64, tokenCacheLifetime: Duration = .seconds(600),
        clock: @escaping @Sendable () -> Int64 = ContentConfiguration.systemClock
    ) {
        self.contentDirectory = contentDirectory
        self.preparedDirectory = preparedDirectory ?? contentDirectory + "/.kiosk-prepared"
        self.storeHost = storeHost
        self.storePort = storePort
        self.storeToken = storeToken
        self.environment = environment
        self.acceptSandbox = acceptSandbox
        self.cacheSize = cacheSize
        self.maximumStaleness = maximumStaleness
        self.chunkSize = chunkSize
        self.maximumDownloadsPerAccount = maximumDownloadsPerAccount
        self.maximumDownloads = maximumDownloads
        self.tokenCacheLifetime = tokenCacheLifetime
        self.clock = clock
    }

    /// Wall-clock milliseconds since 1970.
    public static let systemClock: @Sendable () -> Int64 = {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}

#if canImport(Glibc)
import Glibc
#endif
