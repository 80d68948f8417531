import Foundation
import KioskRPC
import Logging

/// A service's address, `host:port`: `ServiceEndpoint.list(parsing:)` reads `a:7301,b:7301`.
public typealias ServiceEndpoint = KioskRPC.Endpoint

/// Configuration of a ``KioskClient``.
public struct KioskConfiguration: Sendable {
    /// The store's replicas. Calls go to the first that connects and stay on
    /// it while it answers; when its connection is lost, a call in flight is
    /// sent again (a purchase with the same idempotency key, so it is never
    /// charged twice) to the next one that connects.
    public var storeEndpoints: [ServiceEndpoint]
    /// The content service's replicas, used as ``storeEndpoints`` are; a
    /// download broken by a lost connection resumes on the next one.
    public var contentEndpoints: [ServiceEndpoint]
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
    /// The first content endpoint's host; setting it replaces that endpoint's host.
    public var contentHost: String {
        get { contentEndpoints[0].host }
        set { contentEndpoints[0].host = newValue }
    }
    /// The first content endpoint's port; setting it replaces that endpoint's port.
    public var contentPort: Int {
        get { contentEndpoints[0].port }
        set { contentEndpoints[0].port = newValue }
    }
    /// The account's bearer token (from `kiosk-store account create`).
    public var token: String
    /// The app's bundle id.
    public var bundleID: String
    /// Where the SDK keeps its payment journal (and the receipts of ``KioskClient/saveReceipt(of:)``);
    /// one per app install. Private to the user: made 0700 (an existing one is
    /// tightened), its files 0600.
    public var stateDirectory: String
    /// Timeout of one call to a service.
    public var callTimeout: Duration
    /// First delay before a queued payment is sent again; doubles up to ``retryMaximumDelay``.
    public var retryInitialDelay: Duration
    /// Largest delay between attempts to send queued payments.
    public var retryMaximumDelay: Duration
    /// How often the SDK asks the store for transactions that appeared without
    /// the app asking (approved ask-to-buy purchases), for as long as the client is open.
    public var updatePollInterval: Duration
    /// How connections to both services are secured: TLS with trust roots, or
    /// plaintext (which the SDK speaks to loopback hosts only).
    public var transportSecurity: TransportSecurity
    /// Where the SDK logs what the app should know of but cannot be thrown, such as
    /// payment-journal entries set aside (warning level).
    public var logger: Logger

    /// How the SDK's connections are secured.
    public enum TransportSecurity: Sendable, Hashable {
        /// No encryption: bearer tokens and receipts in the clear. Allowed to
        /// loopback hosts only (a call to another host fails with `cannotConnect`).
        case plaintext
        /// TLS. The services' certificates must chain to the roots in the PEM
        /// file `trustRootsPath` (nil: the system's roots) and carry the host's
        /// name (or `serverName` when given).
        case tls(trustRootsPath: String?, serverName: String? = nil)
    }

    /// Creates a configuration: store on 127.0.0.1:7301, content on 127.0.0.1:7302,
    /// 10 s call timeout, retries from 200 ms up to 5 s, updates polled every 2 s,
    /// logging to `Logger(label: "kiosk")`, plaintext (loopback only). Set
    /// ``storeEndpoints`` and ``contentEndpoints`` for replicas.
    public init(
        storeHost: String = "127.0.0.1", storePort: Int = 7301, contentHost: String = "127.0.0.1",
        contentPort: Int = 7302,
        token: String, bundleID: String = "com.example.kiosk", stateDirectory: String,
        callTimeout: Duration = .seconds(10), retryInitialDelay: Duration = .milliseconds(200),
        retryMaximumDelay: Duration = .seconds(5), updatePollInterval: Duration = .seconds(2),
        logger: Logger = Logger(label: "kiosk"),
        transportSecurity: TransportSecurity = .plaintext
    ) {
        self.transportSecurity = transportSecurity
        self.storeEndpoints = [ServiceEndpoint(host: storeHost, port: storePort)]
        self.contentEndpoints = [ServiceEndpoint(host: contentHost, port: contentPort)]
        self.token = token
        self.bundleID = bundleID
        self.stateDirectory = stateDirectory
        self.callTimeout = callTimeout
        self.retryInitialDelay = retryInitialDelay
        self.retryMaximumDelay = retryMaximumDelay
        self.updatePollInterval = updatePollInterval
        self.logger = logger
    }
}
