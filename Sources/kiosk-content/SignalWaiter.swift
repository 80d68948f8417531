import Dispatch
import Foundation

/// Waits for one of a set of POSIX signals.
final class SignalWaiter: @unchecked Sendable {
    private var sources: [DispatchSourceSignal] = []
    private let stream: AsyncStream<Int32>
    private let continuation: AsyncStream<Int32>.Continuation

    init(signals: [Int32]) {
        (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        for number in signals {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [continuation] in continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
    }

    func wait() async {
        for await _ in stream { return }
    }
}
