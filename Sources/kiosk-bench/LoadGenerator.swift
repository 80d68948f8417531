import Foundation
import Histogram
import KioskRPC
import NIOConcurrencyHelpers
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
                    var histogram = Histogram<UInt64>(highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three)
                    var errors: [String: Int] = [:]
                    var calls = 0
                    while true {
                        let due: ContinuousClock.Instant
                        if let interval {
                            let index = issued.withLockedValue { value in defer { value += 1 }; return value }
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
            var total = LoadResult(calls: 0, errors: [:],
                                   histogram: Histogram<UInt64>(highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three),
                                   elapsed: .zero)
            for await (calls, errors, histogram) in group {
                total.calls += calls
                total.errors.merge(errors, uniquingKeysWith: +)
                total.histogram.add(histogram)
            }
            return total
        }
        var result = results
        result.elapsed = start.duration(to: .now)
        return result
    }
    if warmup > .zero { _ = await phase(warmup, record: false) }
    await measuring()
    var result = await phase(duration, record: true)
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
