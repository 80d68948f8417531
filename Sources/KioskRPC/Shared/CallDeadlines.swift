import NIOCore

/// The deadlines of one connection's calls behind a single timer.
///
/// A NIO task per call would cost a heap insert to schedule and a failed
/// promise to cancel, on every call. Here a call's deadline is a dictionary
/// entry, removed when the call ends;
/// one timer is armed at the earliest deadline, and when it fires it expires
/// what is due and re-arms for the next. Calls made with one timeout reach
/// their deadlines in the order they were opened, so the timer is re-armed
/// about once per timeout, not once per call.
///
/// Event loop only.
final class CallDeadlines {
    private var deadlines: [UInt32: NIODeadline] = [:]
    private var armed: (at: NIODeadline, task: Scheduled<Void>)?
    private let eventLoop: EventLoop
    /// Called for each call whose deadline passed, in call id order.
    private let expire: (UInt32) -> Void

    init(eventLoop: EventLoop, expire: @escaping (UInt32) -> Void) {
        self.eventLoop = eventLoop
        self.expire = expire
    }

    /// Watches call `id` until `deadline`.
    func add(_ id: UInt32, at deadline: NIODeadline) {
        deadlines[id] = deadline
        if let armed, armed.at <= deadline { return }
        arm(at: deadline)
    }

    /// Call `id` ended: forget its deadline. The timer stays armed (one call
    /// after another would otherwise schedule and cancel it each time): it
    /// fires, finds nothing due and re-arms for whatever is left, if anything.
    func remove(_ id: UInt32) {
        deadlines.removeValue(forKey: id)
    }

    /// Forgets every deadline and stops the timer (the connection is gone).
    func removeAll() {
        deadlines.removeAll()
        armed?.task.cancel()
        armed = nil
    }

    private func arm(at deadline: NIODeadline) {
        armed?.task.cancel()
        let this = NIOLoopBound(self, eventLoop: eventLoop)
        armed = (deadline, eventLoop.scheduleTask(deadline: deadline) { this.value.fire() })
    }

    private func fire() {
        armed = nil
        let now = eventLoop.now
        var due: [UInt32] = []
        var next: NIODeadline?
        for (id, deadline) in deadlines {
            if deadline <= now {
                due.append(id)
            } else if next == nil || deadline < next! {
                next = deadline
            }
        }
        for id in due { deadlines.removeValue(forKey: id) }
        if let next { arm(at: next) }
        for id in due.sorted() { expire(id) }
    }
}
