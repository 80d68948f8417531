import KioskRPC
import Logging
import ServiceLifecycle
import UnixSignals

/// How Kiosk's servers live in a process, on swift-service-lifecycle: a server started by its command
/// runs as a service of one `ServiceGroup` until SIGTERM or SIGINT shuts the group down gracefully (its
/// open calls finish, then it closes); a TLS server reloads its certificate on SIGHUP.
///
/// A command starts its server first, so that a start-up failure ends it with its own message and exit
/// code, then calls ``serve(_:announce:reloading:logger:)``: the group traps the signals before the
/// banner is printed, as scripts send SIGTERM as soon as they read it.
public enum ServiceHosting {
    /// Runs a started server until SIGTERM or SIGINT: `announce` (the banner) once the signals are trapped,
    /// `shutdown` when the group shuts down; SIGHUP reloads `tls` meanwhile.
    public static func serve(
        announce: @escaping @Sendable () -> Void, shutdown: @escaping @Sendable () async -> Void,
        reloading tls: ServerTLSIdentity?, logger: Logger
    ) async throws {
        // Trapped before anything is announced: a SIGHUP right after the banner reloads, it does not kill.
        let reloads = await UnixSignalsSequence(trapping: .sighup)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [
                    .init(service: RunningServer(announce: announce, shutdown: shutdown)),
                    .init(service: CertificateReloader(tls: tls, signals: reloads, logger: logger)),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }
}

/// A server that was started before its group ran: announced when the group runs, shut down when the group
/// shuts down gracefully (or is cancelled).
struct RunningServer: Service {
    let announce: @Sendable () -> Void
    let shutdown: @Sendable () async -> Void

    func run() async throws {
        announce()
        // Returns when the group shuts down gracefully; throws when it is cancelled: the server closes either way.
        try? await gracefulShutdown()
        await shutdown()
    }
}

/// Reloads the TLS identity on each SIGHUP (a pair that cannot be used is logged and the old one kept)
/// until the group shuts down.
struct CertificateReloader: Service {
    let tls: ServerTLSIdentity?
    let signals: UnixSignalsSequence
    let logger: Logger

    func run() async throws {
        for await _ in signals.cancelOnGracefulShutdown() {
            guard let tls else { continue }
            do {
                try tls.reload()
                logger.notice("reloaded the TLS certificate \(tls.certificateChainPath)")
            } catch {
                logger.error("kept the old TLS certificate: \(error)")
            }
        }
    }
}
