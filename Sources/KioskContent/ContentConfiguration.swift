import KioskAPI
import KioskRPC
import KioskSigning

/// Configuration of a content service.
public struct ContentConfiguration: Sendable {
    /// The directory holding `manifest.json` and the hosted files.
    public var contentDirectory: String
    /// Where prepared chunks and their indexes are kept; default `<content>/.kiosk-prepared`.
    public var preparedDirectory: String
    /// The store's replicas, tried in order (the one that worked last first):
    /// the service follows keys and revocations through whichever answers.
    public var storeEndpoints: [Endpoint]
    /// The first store endpoint's host; setting it replaces that endpoint's host.
    public var storeHost: String {
        get { storeEndpoints[0].host }
        set { storeEndpoints[0].host = newValue }
    }
    /// The first store endpoint's port; setting it replaces that endpoint's port.
    public var storePort: Int {
        get { storeEndpoints[0].port }
        set { storeEndpoints[0].port = newValue }
    }
    /// The service's credential at the store (role `content`, from `kiosk-store
    /// service create --role content`), for `PublicKeys` and `WatchEvents`.
    public var storeCredential: String
    /// The trust roots and name of the store's TLS certificate; nil speaks
    /// plaintext (to a loopback store only).
    public var storeTLS: ClientTLS?
    /// Receipts must be from this environment.
    public var environment: ReceiptV1.Environment
    /// A production service that also serves sandbox receipts.
    public var acceptSandbox: Bool
    /// The app whose receipts the service honours: a receipt for another bundle id is refused
    /// with 21003 (not authentic for this app). `nil` (the default) accepts any bundle id.
    public var bundleID: String?
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
    /// Access tokens whose signature was checked, kept until they expire (only valid ones are kept).
    public var accessTokenCacheSize: Int
    /// The time, in milliseconds since 1970; replaceable in tests.
    public var clock: @Sendable () -> Int64

    /// Creates a configuration: 10,000 cached receipts, 5 minutes of staleness,
    /// 256 KiB chunks, 4 downloads per account and 64 in total.
    public init(
        contentDirectory: String, preparedDirectory: String? = nil, storeHost: String = "127.0.0.1",
        storePort: Int = 7301,
        storeCredential: String, storeTLS: ClientTLS? = nil, environment: ReceiptV1.Environment = .sandbox,
        acceptSandbox: Bool = false, bundleID: String? = nil,
        cacheSize: Int = 10_000, maximumStaleness: Duration = .seconds(300), chunkSize: UInt32 = 256 * 1024,
        maximumDownloadsPerAccount: Int = 4, maximumDownloads: Int = 64, accessTokenCacheSize: Int = 10_000,
        clock: @escaping @Sendable () -> Int64 = ContentConfiguration.systemClock
    ) {
        self.contentDirectory = contentDirectory
        self.preparedDirectory = preparedDirectory ?? contentDirectory + "/.kiosk-prepared"
        self.storeEndpoints = [Endpoint(host: storeHost, port: storePort)]
        self.storeCredential = storeCredential
        self.storeTLS = storeTLS
        self.environment = environment
        self.acceptSandbox = acceptSandbox
        self.bundleID = bundleID
        self.cacheSize = cacheSize
        self.maximumStaleness = maximumStaleness
        self.chunkSize = chunkSize
        self.maximumDownloadsPerAccount = maximumDownloadsPerAccount
        self.maximumDownloads = maximumDownloads
        self.accessTokenCacheSize = accessTokenCacheSize
        self.clock = clock
    }

    /// A verifier of receipts with the store's `keys`, by this configuration's rules:
    /// ``environment``, ``acceptSandbox`` and ``bundleID``.
    public func makeVerifier(keys: [ReceiptPublicKey]) -> ReceiptVerifier {
        ReceiptVerifier(keys: keys, environment: environment, acceptSandbox: acceptSandbox, bundleID: bundleID)
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
