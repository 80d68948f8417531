import Foundation

/// Configuration of a ``KioskClient``.
public struct KioskConfiguration: Sendable {
    /// The store's host.
    public var storeHost: String
    /// The store's port.
    public var storePort: Int
    /// The content service's host.
    public var contentHost: String
    /// The content service's port.
    public var contentPort: Int
    /// The account's bearer token (from `kiosk-store account create`).
    public var token: String
    /// The app's bundle id.
    public var bundleID: String
    /// Where the SDK keeps its payment journal (and nothing else); one per app install.
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

    /// Creates a configuration: store on 127.0.0.1:7301, content on 127.0.0.1:7302,
    /// 10 s call timeout, retries from 200 ms up to 5 s, updates polled every 2 s.
    public init(
        storeHost: String = "127.0.0.1", storePort: Int = 7301, contentHost: String = "127.0.0.1", contentPort: Int = 7302,
        token: String, bundleID: String = "com.example.kiosk", stateDirectory: String,
        callTimeout: Duration = .seconds(10), retryInitialDelay: Duration = .milliseconds(200),
        retryMaximumDelay: Duration = .seconds(5), updatePollInterval: Duration = .seconds(2)
    ) {
        self.storeHost = storeHost
        self.storePort = storePort
        self.contentHost = contentHost
        self.contentPort = contentPort
        self.token = token
        self.bundleID = bundleID
        self.stateDirectory = stateDirectory
        self.callTimeout = callTimeout
        self.retryInitialDelay = retryInitialDelay
        self.retryMaximumDelay = retryMaximumDelay
        self.updatePollInterval = updatePollInterval
    }
}
