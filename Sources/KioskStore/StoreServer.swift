import KioskRPC
import Logging

/// A store served over the Kiosk protocol: a ``Store`` behind an ``RPCServer``.
public final class StoreServer: Sendable {
    /// The store.
    public let store: Store
    /// The RPC server.
    public let server: RPCServer

    /// Opens the store and prepares its server; ``start()`` listens.
    public init(store: StoreConfiguration, server: ServerConfiguration = .defaults, logger: Logger? = nil) throws {
        let opened = try Store(configuration: store)
        self.store = opened
        if let logger {
            self.server = RPCServer(configuration: server, services: [StoreService(store: opened)], logger: logger)
        } else {
            self.server = RPCServer(configuration: server, services: [StoreService(store: opened)])
        }
    }

    /// Starts listening.
    public func start() async throws { try await server.start() }

    /// The port listened on, once started.
    public var port: Int? { server.port }

    /// Shuts down gracefully.
    public func shutdown() async { await server.shutdown() }
}
