import KioskRPC
import Logging
import NIOConcurrencyHelpers

/// A store served over the Kiosk protocol: a ``Store`` behind an ``RPCServer``.
///
/// Serving binds the data dir to the store's environment, refuses the
/// simulated payment processor in production, and settles pending payment
/// intents at start-up and every ``StoreConfiguration/reconcileInterval``, and charges
/// the subscription renewals that are due every ``StoreConfiguration/renewalInterval``.
public final class StoreServer: Sendable {
    /// The store.
    public let store: Store
    /// The RPC server.
    public let server: RPCServer
    private let logger: Logger
    private let upkeep = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let renewing = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let delivering = NIOLockedValueBox<Task<Void, Never>?>(nil)

    /// Opens the store and prepares its server; ``start()`` listens.
    /// - Throws: ``StoreError`` 9 for a production store with the simulated processor, or a data dir of another
    ///   environment, or plaintext on an address that is not loopback (production refuses it even when allowed).
    public init(store: StoreConfiguration, server: ServerConfiguration = .defaults, logger: Logger? = nil) throws {
        if store.environment == .production, server.tls == nil, !Loopback.contains(host: server.host) {
            throw StoreError(
                .conflict,
                "a production store serves TLS on \(server.host): give --tls-cert and --tls-key (plaintext is for loopback only)"
            )
        }
        let opened = try Store(configuration: store)
        try opened.prepareToServe()
        self.store = opened
        self.logger = logger ?? Logger(label: "kiosk-store")
        if let logger {
            self.server = RPCServer(
                configuration: server, services: [StoreService(store: opened), AdminService(store: opened)],
                logger: logger)
        } else {
            self.server = RPCServer(
                configuration: server, services: [StoreService(store: opened), AdminService(store: opened)])
        }
    }

    /// Starts listening, then the upkeep: settling the intents earlier processes left (at once, in the
    /// background, so a slow processor never delays serving) and again every reconcile interval.
    public func start() async throws {
        try await server.start()
        let store = self.store
        store.feed.start()
        let task = Task { [weak self] in
            while !Task.isCancelled {
                guard let self else { return }
                await self.upkeepOnce()
                try? await Task.sleep(for: store.configuration.reconcileInterval)
            }
        }
        let renewals = Task { [weak self] in
            while !Task.isCancelled {
                guard let self else { return }
                await self.renewOnce()
                try? await Task.sleep(for: store.configuration.renewalInterval)
            }
        }
        // Webhooks: a pass after this process's writes (each may have recorded an event), or every poll interval;
        // at once again while deliveries are due.
        let written = RevocationSignal()
        store.ledger.onWrite { written.notify() }
        let hooks = Task { [weak self] in
            while !Task.isCancelled {
                let generation = written.generation
                guard let self else { return }
                var busy = false
                var idle = false
                do {
                    if let report = try await store.deliverWebhooks() {
                        busy = report.delivered > 0
                        idle = report.webhooks == 0
                        if report.givenUp > 0 {
                            self.logger.warning(
                                "webhook deliveries failed for good", metadata: ["failed": "\(report.givenUp)"])
                        }
                    }
                } catch {
                    self.logger.warning("webhook delivery failed: \(error)")
                }
                if idle {
                    // No webhook: writes do not wake the loop (no read per purchase); one added is seen within the poll interval.
                    try? await Task.sleep(for: store.configuration.webhooks.pollInterval)
                } else if !busy {
                    try? await written.wait(after: generation, timeout: store.configuration.webhooks.pollInterval)
                }
            }
        }
        upkeep.withLockedValue { $0 = task }
        renewing.withLockedValue { $0 = renewals }
        delivering.withLockedValue { $0 = hooks }
    }

    private func renewOnce() async {
        do {
            let declined = try await store.expireAskToBuyRequests()
            if declined > 0 { logger.notice("ask-to-buy requests expired", metadata: ["declined": "\(declined)"]) }
            let report = try await store.renewDueSubscriptions()
            // A renewal-date extension job whose store stopped mid-way goes on here (each subscription once).
            try await store.resumeExtensionJobs()
            if report.renewed + report.failed + report.expired > 0 {
                logger.notice(
                    "subscriptions",
                    metadata: [
                        "renewed": "\(report.renewed)", "failed": "\(report.failed)",
                        "expired": "\(report.expired)", "left": "\(report.left)",
                    ])
            }
        } catch {
            logger.warning("renewals failed: \(error)")
        }
    }

    private func upkeepOnce() async {
        do {
            let report = try await store.reconcile()
            if report.charged + report.closed > 0 {
                logger.notice(
                    "reconciled payment intents",
                    metadata: ["charged": "\(report.charged)", "closed": "\(report.closed)", "left": "\(report.left)"])
            }
            try store.pruneIdempotencyKeys()
        } catch {
            logger.warning("upkeep failed: \(error)")
        }
    }

    /// The port listened on, once started.
    public var port: Int? { server.port }

    /// Shuts down gracefully.
    public func shutdown() async {
        upkeep.withLockedValue { $0 }?.cancel()
        renewing.withLockedValue { $0 }?.cancel()
        if let hooks = delivering.withLockedValue({ $0 }) {
            hooks.cancel()
            await hooks.value
            await store.releaseWebhookLease()
        }
        // Flag the shutdown first, then wake the WatchRevocations streams: they see it and end.
        server.beginShutdown()
        store.feed.stop()
        await server.shutdown()
        let (commits, writes) = store.ledger.commitStatistics
        logger.notice(
            "ledger: \(writes) writes in \(commits) group commits",
            metadata: ["commits": "\(commits)", "writes": "\(writes)"])
    }
}
