import Foundation
import Histogram
import KioskRPC
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// What a load run measured.
struct LoadResult {
    var calls: Int
    var errors: [String: Int]
    var histogram: Histogram<UInt64>
    var elapsed: Duration
    /// Sequence numbers handed out, warm-up included (how many receipts were used).
    var issued = 0

    var failed: Int { errors.values.reduce(0, +) }

    /// No calls yet.
    static var empty: LoadResult {
        LoadResult(
            calls: 0, errors: [:],
            histogram: Histogram<UInt64>(
                highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three),
            elapsed: .zero)
    }

    /// Adds one worker's calls.
    mutating func add(calls: Int, errors: [String: Int], histogram: Histogram<UInt64>) {
        self.calls += calls
        self.errors.merge(errors, uniquingKeysWith: +)
        self.histogram.add(histogram)
    }
    var callsPerSecond: Double { Double(calls) / elapsed.seconds }
}

extension Duration {
    var nanoseconds: UInt64 { UInt64(max(0, Double(components.seconds) * 1e9 + Double(components.attoseconds) / 1e9)) }
}

/// Drives `concurrency` workers calling `call` for a warm-up, then for the
/// measured duration. Closed loop by default; with `rate`, open loop: calls
/// are due at fixed intervals and latency counts from when a call was due,
/// so a stalled server shows as queueing instead of hiding it (no
/// coordinated omission).
///
/// `call(worker, sequence)` returns nil on success, or the kind of failure;
/// `measuring` runs between the warm-up and the measured part (to take the
/// "before" readings of counters and CPU time).
func runLoad(
    concurrency: Int, warmup: Duration, duration: Duration, rate: Double?, executors: [EventLoopTaskExecutor] = [],
    measuring: () async -> Void = {},
    call: @escaping @Sendable (_ worker: Int, _ sequence: Int) async -> String?
) async -> LoadResult {
    let sequence = Counter()
    func phase(_ length: Duration, record: Bool) async -> LoadResult {
        let start = ContinuousClock.now
        let end = start + length
        let interval: Duration? = rate.map { .nanoseconds(Int64(1e9 / $0)) }
        let issued = NIOLockedValueBox(0)
        let results = await withTaskGroup(of: (Int, [String: Int], Histogram<UInt64>).self) { group in
            for worker in 0..<concurrency {
                // Each worker runs on its connection's event loop: no thread hop per call.
                let executor = executors.isEmpty ? nil : executors[worker % executors.count]
                group.addTask(executorPreference: executor) {
                    var histogram = Histogram<UInt64>(
                        highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three)
                    var errors: [String: Int] = [:]
                    var calls = 0
                    while true {
                        let due: ContinuousClock.Instant
                        if let interval {
                            let index = issued.withLockedValue { value in
                                defer { value += 1 }
                                return value
                            }
                            due = start + interval * index
                            guard due < end else { break }
                            if ContinuousClock.now < due { try? await Task.sleep(until: due, clock: .continuous) }
                        } else {
                            due = ContinuousClock.now
                            guard due < end else { break }
                        }
                        let number = sequence.next()
                        let failure = await call(worker, number)
                        if record {
                            calls += 1
                            if let failure { errors[failure, default: 0] += 1 }
                            _ = histogram.record(due.duration(to: .now).nanoseconds)
                        }
                    }
                    return (calls, errors, histogram)
                }
            }
            var total = LoadResult.empty
            for await (calls, errors, histogram) in group {
                total.add(calls: calls, errors: errors, histogram: histogram)
            }
            return total
        }
        var result = results
        result.elapsed = start.duration(to: .now)
        return result
    }
    return await warmedUp(warmup: warmup, duration: duration, sequence: sequence, measuring: measuring, phase: phase)
}

/// A warm-up phase (not recorded), `measuring`, then the measured phase; the result counts the sequence numbers used.
private func warmedUp(
    warmup: Duration, duration: Duration, sequence: Counter, measuring: () async -> Void,
    phase: (_ length: Duration, _ record: Bool) async -> LoadResult
) async -> LoadResult {
    if warmup > .zero { _ = await phase(warmup, false) }
    await measuring()
    var result = await phase(duration, true)
    result.issued = sequence.value
    return result
}

/// A counter shared by the workers, without a lock.
final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    /// The next number (0, 1, 2…).
    func next() -> Int { count.add(1, ordering: .relaxed).oldValue }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Runs `body`, then stops the bench's own services (when it started them)
/// whether `body` threw or not: the process exits right after, so a stop left
/// to a detached task would never run and the temporary directory would stay.
func stopping<R>(_ services: LocalServices?, _ body: () async throws -> R) async throws -> R {
    do {
        let result = try await body()
        await services?.stop()
        return result
    } catch {
        await services?.stop()
        throw error
    }
}

/// Drives `concurrency` closed-loop workers whose calls chain on event loops,
/// as the reference's load generator does: each worker lives on
/// `loops[worker % loops.count]`, and a call's completion makes the worker's
/// next call there, inside the read that brought the response (no task, no
/// continuation: the calls that one read completes leave in one write). A
/// warm-up, `measuring`, then the measured duration.
///
/// `call(worker, sequence, done)` calls `done` on the worker's loop with nil on success, or the kind of failure,
/// and when the response arrived (nil: now): a call's latency runs from when it was made to then, so that
/// decoding and checking the response after it arrived stays out of it, as in the reference's load generator
/// (whose clock stops when it has read the response frame); `loops` are the event loops of the clients the
/// calls use (a worker's state is that loop's alone).
func runChainedLoad(
    concurrency: Int, warmup: Duration, duration: Duration, loops: [EventLoop],
    measuring: () async -> Void = {},
    call:
        @escaping @Sendable (
            _ worker: Int, _ sequence: Int, _ done: @escaping @Sendable (String?, NIODeadline?) -> Void
        ) -> Void
) async -> LoadResult {
    let sequence = Counter()
    func phase(_ length: Duration, record: Bool) async -> LoadResult {
        let start = ContinuousClock.now
        let end = NIODeadline.now() + TimeAmount(length)
        // One tally per connection, shared by the workers on it (they run on its loop only), as the reference's
        // load generator keeps one histogram per connection: a histogram per worker is ~0.25 MiB that each of its
        // calls touches, 16 MiB of them at C=64, more than the CPU's caches hold.
        let tallies = record ? loops.map { _ in ChainedTally() } : []
        var futures: [EventLoopFuture<ChainedWorker>] = []
        for index in 0..<concurrency {
            let loop = loops[index % loops.count]
            let worker = ChainedWorker(
                index: index, end: end, tally: record ? tallies[index % loops.count] : nil, loop: loop,
                sequence: sequence, call: call)
            loop.execute { worker.step() }
            futures.append(worker.done.futureResult)
        }
        for future in futures { _ = try? await future.get() }
        var total = LoadResult.empty
        for tally in tallies { total.add(calls: tally.calls, errors: tally.errors, histogram: tally.histogram) }
        total.elapsed = start.duration(to: .now)
        return total
    }
    return await warmedUp(warmup: warmup, duration: duration, sequence: sequence, measuring: measuring, phase: phase)
}

/// What the chained workers of one connection measured; used on that connection's event loop only.
private final class ChainedTally: @unchecked Sendable {
    var histogram = Histogram<UInt64>(highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three)
    var errors: [String: Int] = [:]
    var calls = 0
}

/// One worker of ``runChainedLoad(concurrency:warmup:duration:loops:measuring:call:)``; used on its event loop only.
private final class ChainedWorker: @unchecked Sendable {
    let index: Int
    let end: NIODeadline
    /// Where the worker's calls are recorded; nil in the warm-up.
    let tally: ChainedTally?
    let loop: EventLoop
    let sequence: Counter
    let call: @Sendable (Int, Int, @escaping @Sendable (String?, NIODeadline?) -> Void) -> Void
    let done: EventLoopPromise<ChainedWorker>
    /// When the call in flight was made (the monotonic clock the reference reads, without `Duration` arithmetic).
    private var due = NIODeadline.now()
    /// Nested ``step()`` calls: a call that completes at once must not recurse without bound.
    private var depth = 0
    /// Handed to every call: it holds the worker while a call is in flight (dropped when the worker is done).
    private var completion: (@Sendable (String?, NIODeadline?) -> Void)?

    init(
        index: Int, end: NIODeadline, tally: ChainedTally?, loop: EventLoop, sequence: Counter,
        call: @escaping @Sendable (Int, Int, @escaping @Sendable (String?, NIODeadline?) -> Void) -> Void
    ) {
        self.index = index
        self.end = end
        self.tally = tally
        self.loop = loop
        self.sequence = sequence
        self.call = call
        self.done = loop.makePromise()
        self.completion = { failure, responded in self.completed(failure, respondedAt: responded) }
    }

    func step() {
        due = NIODeadline.now()
        guard due < end, let completion else {
            completion = nil
            return done.succeed(self)
        }
        call(index, sequence.next(), completion)
    }

    private func completed(_ failure: String?, respondedAt: NIODeadline?) {
        loop.preconditionInEventLoop()
        if let tally {
            tally.calls += 1
            if let failure { tally.errors[failure, default: 0] += 1 }
            let now = respondedAt ?? NIODeadline.now()
            _ = tally.histogram.record(now > due ? now.uptimeNanoseconds - due.uptimeNanoseconds : 0)
        }
        depth += 1
        defer { depth -= 1 }
        if depth > 8 { loop.execute { self.step() } } else { step() }
    }
}
