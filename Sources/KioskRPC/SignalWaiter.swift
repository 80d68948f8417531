import Dispatch
import Foundation

/// Waits for one of a set of POSIX signals (e.g. SIGINT, SIGTERM), so a
/// service executable can shut its server down gracefully.
public final class SignalWaiter: @unchecked Sendable {
    private var sources: [DispatchSourceSignal] = []
    private let stream: AsyncStream<Int32>
    private let continuation: AsyncStream<Int32>.Continuation

    /// Starts catching `signals` (their default action is turned off).
    public init(signals: [Int32]) {
        (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
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
        for await _ in stream { return }
    }
}
