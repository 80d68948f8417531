import Dispatch
import Foundation
import Logging

/// Waits for one of a set of POSIX signals (e.g. SIGINT, SIGTERM), so a
/// service executable can shut its server down gracefully (or reload its TLS
/// certificate on SIGHUP).
///
/// One task reads the signals: ``wait()`` or ``next()`` are not to be called
/// from two tasks at once.
public final class SignalWaiter: @unchecked Sendable {
    private var sources: [DispatchSourceSignal] = []
    private let stream: AsyncStream<Int32>
    private let continuation: AsyncStream<Int32>.Continuation
    private var iterator: AsyncStream<Int32>.AsyncIterator

    /// Starts catching `signals` (their default action is turned off).
    public init(signals: [Int32]) {
        (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        iterator = stream.makeAsyncIterator()
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [continuation] in continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
    }

    /// Returns once one of the signals arrived.
    public func wait() async {
        _ = await next()
    }

    /// The next signal that arrives (signals that arrived meanwhile are kept, in order).
    public func next() async -> Int32? {
        await iterator.next()
    }

    /// Returns on SIGINT or SIGTERM (or any signal caught other than SIGHUP);
    /// on SIGHUP reloads `tls` (a pair that cannot be used is logged and the
    /// old one kept) and waits on.
    public func waitForShutdown(reloading tls: ServerTLSIdentity?, logger: Logger) async {
        while let signal = await next(), signal == SIGHUP {
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
