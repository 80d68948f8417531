import NIOCore

/// Runs Swift tasks on a SwiftNIO event loop, so that a call's handler and its
/// connection's I/O share a thread and no hop between thread pools costs a
/// wake-up. Used for server handlers (see ``ServerConfiguration/runsHandlersOnEventLoop``)
/// and by load generators: `withTaskExecutorPreference(EventLoopTaskExecutor(loop)) { … }`.
public final class EventLoopTaskExecutor: TaskExecutor, @unchecked Sendable {
    /// The event loop jobs run on.
    public let eventLoop: EventLoop

    /// An executor for `eventLoop`.
    public init(_ eventLoop: EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Runs `job` on ``eventLoop``, as the `TaskExecutor` protocol asks.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { [self] in
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

extension EventLoop {
    /// Runs `body` at once when called on this loop (as handlers and bench
    /// workers are, with ``ServerConfiguration/runsHandlersOnEventLoop`` and
    /// ``EventLoopTaskExecutor``), else queues it there: one job less per call.
    func runOnLoop(_ body: @escaping @Sendable () -> Void) {
        if inEventLoop { body() } else { execute(body) }
    }
}
