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

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { [self] in
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}
