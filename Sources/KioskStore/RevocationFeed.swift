import KioskAPI
import KioskRPC
import NIOConcurrencyHelpers

/// What `WatchRevocations` streams follow: one reader of the ledger per store
/// process, however many streams are open.
///
/// One task looks for new revocations and key changes: at once when this
/// process wrote one (``noteWritten()``) or, on PostgreSQL, when another
/// process committed one (its NOTIFY, `Ledger.watchExternalChanges(_:)`),
/// otherwise every poll interval (for refunds and key changes made by another
/// process on the same data dir, such as `kiosk-store refund`). It keeps the most recent revocations in memory
/// and wakes the streams, which read from that memory; only a stream resuming
/// from a cursor older than the memory holds reads the ledger, a page at a time.
final class RevocationFeed: Sendable {
    private struct State {
        /// Recent revocations, cursor order; every revocation above `floor` is here.
        var recent: [RevocationRecord] = []
        /// The cursor below which memory holds nothing (nil before the first look).
        var floor: UInt64?
        var keyFingerprint: [String] = []
        var keyGeneration: UInt64 = 0
        var poller: Task<Void, Never>?
        var stopped = false
        var looks: UInt64 = 0
        /// When a look last read the ledger without error.
        var lastGoodLook: ContinuousClock.Instant?
        /// Service credentials revoked (their open streams end).
        var revokedCredentials: Set<String> = []
        /// Recent events, id order, signed once; every event above `eventFloor` is here.
        var recentEvents: [FeedEvent] = []
        /// The event id below which memory holds nothing (nil before the first look).
        var eventFloor: UInt64?
        /// Why the last look could not sign new events (no usable key): event streams fail until it can.
        var eventSigningFailure: String?
        /// Since when committed events have been held back from readers (PostgreSQL: a transaction older than them
        /// is still open somewhere in the cluster; see `LedgerDatabase.eventHorizon`), as of the last look.
        var eventsHeldBackSince: ContinuousClock.Instant?
    }

    /// The least time between two looks at the ledger: what a burst of writes adds to an event's delivery.
    static let minimumLookSpacing: Duration = .milliseconds(10)

    /// How long committed events may wait behind an open transaction before streams fail (a store's own writes
    /// end within their 5 s statement timeout; a transaction left open by hand, a long batch job or a forgotten
    /// prepared transaction does not).
    static let eventsHeldBackLimit: Duration = .seconds(15)

    private let ledger: Ledger
    /// Signs an event as it is sent (the store's active key).
    private let sign: @Sendable (EventRecord) throws -> StoreV1.SignedEvent
    private let pollInterval: Duration
    private let capacity: Int
    private let state = NIOLockedValueBox(State())
    /// Rung by this process's writes; the poller waits on it.
    private let written = RevocationSignal()
    /// Rung by the poller after each look that found something; streams wait on it.
    private let published = RevocationSignal()
    /// Called on the poller when the key set changed (the store reloads its verifier).
    private let keysChangedHandler = NIOLockedValueBox<FunctionReference<@Sendable () -> Void>?>(nil)

    init(
        ledger: Ledger, pollInterval: Duration, capacity: Int = 4096,
        sign: @escaping @Sendable (EventRecord) throws -> StoreV1.SignedEvent
    ) {
        self.ledger = ledger
        self.sign = sign
        self.pollInterval = pollInterval
        self.capacity = capacity
    }

    /// Runs `body` on the poller whenever it sees the key set change.
    func onKeysChanged(_ body: @escaping @Sendable () -> Void) {
        keysChangedHandler.withLockedValue { $0 = FunctionReference(body) }
    }

    /// Starts the poller if it is not running (idempotent; a no-op once stopped).
    func start() {
        let started = state.withLockedValue { state -> Bool in
            guard state.poller == nil, !state.stopped else { return false }
            // Weak: a feed nobody holds any more stops its poller.
            state.poller = Task { [weak self] in
                while !Task.isCancelled {
                    let began = ContinuousClock.now
                    guard let next = await self?.lookOnce() else { return }
                    do {
                        try await next.signal.wait(after: next.generation, timeout: next.interval)
                        // Not a synchronisation: looks at most every `minimumLookSpacing`, however many writes
                        // wake it (each look is a ledger read; on PostgreSQL, several statements).
                        let since = began.duration(to: .now)
                        if since < Self.minimumLookSpacing {
                            try await Task.sleep(for: Self.minimumLookSpacing - since)
                        }
                    } catch { return }
                }
            }
            return true
        }
        // Other processes' revocations and key changes wake the poller as this process's own do, and so
        // does every write of this process (each may have recorded an event).
        if started {
            ledger.watchExternalChanges { [weak self] in self?.noteWritten() }
            ledger.onWrite { [weak self] in self?.noteWritten() }
        }
    }

    private func lookOnce() async -> (signal: RevocationSignal, generation: UInt64, interval: Duration) {
        let generation = written.generation
        await look()
        // Events committed behind an open transaction are read as soon as it ends: look again shortly, not after a
        // whole poll interval (the NOTIFY that woke this look may have come while they were held back).
        let heldBack = state.withLockedValue { $0.eventsHeldBackSince != nil }
        return (written, generation, heldBack ? min(pollInterval, .milliseconds(20)) : pollInterval)
    }

    /// Stops the poller; streams waiting are woken (and find nothing new).
    func stop() {
        let task = state.withLockedValue { state -> Task<Void, Never>? in
            state.stopped = true
            defer { state.poller = nil }
            return state.poller
        }
        task?.cancel()
        published.notify()
    }

    deinit {
        state.withLockedValue { $0.poller }?.cancel()
    }

    /// This process wrote a revocation or changed the keys: look now.
    func noteWritten() {
        written.notify()
    }

    /// How many looks at the ledger the poller made (for tests: one reader, not one per stream).
    var looks: UInt64 { state.withLockedValue { $0.looks } }

    /// True when the service credential `credentialID` has been revoked (as of the last look).
    func isRevoked(credentialID: String) -> Bool {
        state.withLockedValue { $0.revokedCredentials.contains(credentialID) }
    }

    /// Throws UNAVAILABLE (14) when the ledger has not been read for a while
    /// (the reader failing, or stopped): a stream must not keep telling its
    /// watcher it is current with nothing reading behind it.
    /// Also while committed events have been held back from readers for longer than ``eventsHeldBackLimit``: a
    /// watcher told it is current would miss the refunds among them.
    func requireCurrent() throws {
        let (last, stopped, heldBack) = state.withLockedValue {
            ($0.lastGoodLook, $0.stopped, $0.eventsHeldBackSince)
        }
        let limit = max(pollInterval * 20, .seconds(10))
        if stopped || (last.map { $0.duration(to: .now) > limit } ?? false) {
            throw RPCError(.unavailable, stopped ? "the store is shutting down" : "the store cannot read its ledger")
        }
        if let heldBack, heldBack.duration(to: .now) > Self.eventsHeldBackLimit {
            throw RPCError(
                .unavailable,
                "committed events are held back: a transaction opened before them in the store's PostgreSQL cluster "
                    + "has been open for over \(Self.eventsHeldBackLimit) (see pg_stat_activity, pg_prepared_xacts)")
        }
    }

    /// Read before ``revocations(after:)``; pass to ``waitForNews(after:timeout:)``.
    var generation: UInt64 { published.generation }

    /// Increases each time the poller sees the key set change.
    var keyGeneration: UInt64 { state.withLockedValue { $0.keyGeneration } }

    /// Returns when the poller found something after `generation`, or after `timeout`.
    func waitForNews(after generation: UInt64, timeout: Duration) async throws {
        try await published.wait(after: generation, timeout: timeout)
    }

    /// The revocations with a cursor above `cursor`, at most `limit`, oldest first.
    func revocations(after cursor: UInt64, limit: Int = 500) async throws -> [RevocationRecord] {
        let fromMemory = state.withLockedValue { state -> [RevocationRecord]? in
            guard let floor = state.floor, cursor >= floor else { return nil }
            // `recent` is in cursor order: skip what the stream has.
            let start = state.recent.firstIndex { $0.cursor > cursor } ?? state.recent.endIndex
            return Array(state.recent[start..<min(start + limit, state.recent.endIndex)])
        }
        if let fromMemory { return fromMemory }
        return try await ledger.revocations(after: cursor, limit: limit)
    }

    /// Events after `cursor` of `types` (empty: any), at most `limit`, oldest first, and the id
    /// the reader has seen through: pass it as the next `cursor` (events the filter left out move it).
    func events(
        after cursor: UInt64, limit: Int = 500, types: [EventKind] = []
    ) async throws -> (events: [FeedEvent], through: UInt64) {
        let wanted = Set(types)
        // Heartbeats past events the feed could not sign would tell a watcher it is current while it misses them
        // (the content service would keep honouring refunded receipts): the stream fails instead, and the watcher
        // goes stale and refuses, as it does when the store is out of reach.
        if let failure = state.withLockedValue({ $0.eventSigningFailure }) {
            throw RPCError(.unavailable, "the store cannot sign its events: \(failure)")
        }
        let fromMemory = state.withLockedValue { state -> (events: [FeedEvent], through: UInt64)? in
            guard let floor = state.eventFloor, cursor >= floor else { return nil }
            var found: [FeedEvent] = []
            var through = max(cursor, state.recentEvents.last?.record.id ?? floor)
            let start = state.recentEvents.firstIndex { $0.record.id > cursor } ?? state.recentEvents.endIndex
            for event in state.recentEvents[start...] where wanted.isEmpty || wanted.contains(event.record.type) {
                found.append(event)
                if found.count == limit {
                    through = event.record.id
                    break
                }
            }
            return (found, through)
        }
        if let fromMemory { return fromMemory }
        let (records, latest) = try await ledger.backend.read { db in
            (try db.events(after: cursor, limit: limit, accountID: nil, types: types), try db.latestEventID())
        }
        let signed = try records.map { FeedEvent(record: $0, signed: try sign($0)) }
        // Ids commit in order: a short page read everything up to the latest id of the same snapshot.
        return (signed, records.count == limit ? records.last?.id ?? cursor : max(cursor, latest))
    }

    /// One look at the ledger: new revocations and events into memory, key changes counted; wakes the streams if anything changed.
    private func look() async {
        var changed = false
        do {
            // One read of the ledger for the cheap parts, off the Swift concurrency threads (GRDB's reader).
            let (latest, fingerprint, revoked, latestEvent, heldBack) = try await ledger.backend.read { db in
                (
                    try db.latestRevocationCursor(),
                    try Ledger.publicKeys(db).map { "\($0.id)/\($0.notAfterMs)" },
                    try db.revokedServiceCredentialIDs(),
                    try db.latestEventID(),
                    try db.eventsHeldBack()
                )
            }
            state.withLockedValue { state in
                state.eventsHeldBackSince = heldBack ? state.eventsHeldBackSince ?? .now : nil
            }
            if state.withLockedValue({ $0.eventFloor }) == nil {
                state.withLockedValue { $0.eventFloor = latestEvent }
                changed = true
            }
            while true {
                let after = state.withLockedValue { $0.recentEvents.last?.record.id ?? $0.eventFloor ?? 0 }
                guard after < latestEvent else { break }
                let batch = try await ledger.events(after: after, limit: 500)
                guard !batch.isEmpty else { break }
                // A signing failure (no usable key) stops the events here, not the revocations below.
                let signed: [FeedEvent]
                do {
                    signed = try batch.map { FeedEvent(record: $0, signed: try sign($0)) }
                } catch {
                    state.withLockedValue { $0.eventSigningFailure = "\(error)" }
                    break
                }
                changed = true
                state.withLockedValue { state in
                    state.eventSigningFailure = nil
                    state.recentEvents.append(contentsOf: signed)
                    if state.recentEvents.count > capacity {
                        let dropped = state.recentEvents.count - capacity
                        state.eventFloor = state.recentEvents[dropped - 1].record.id
                        state.recentEvents.removeFirst(dropped)
                    }
                }
                if batch.count < 500 { break }
            }
            if state.withLockedValue({ $0.floor }) == nil {
                state.withLockedValue { $0.floor = latest }
                changed = true
            }
            while true {
                let after = state.withLockedValue { $0.recent.last?.cursor ?? $0.floor ?? 0 }
                guard after < latest else { break }
                let batch = try await ledger.revocations(after: after, limit: 500)
                guard !batch.isEmpty else { break }
                changed = true
                state.withLockedValue { state in
                    state.recent.append(contentsOf: batch)
                    if state.recent.count > capacity {
                        let dropped = state.recent.count - capacity
                        state.floor = state.recent[dropped - 1].cursor
                        state.recent.removeFirst(dropped)
                    }
                }
                if batch.count < 500 { break }
            }
            let keysChanged = state.withLockedValue { state -> Bool in
                state.looks += 1
                state.lastGoodLook = .now
                if revoked != state.revokedCredentials {
                    state.revokedCredentials = revoked
                    changed = true
                }
                guard fingerprint != state.keyFingerprint else { return false }
                let first = state.keyFingerprint.isEmpty
                state.keyFingerprint = fingerprint
                if !first { state.keyGeneration += 1 }
                return !first
            }
            if keysChanged {
                keysChangedHandler.withLockedValue { $0 }?.function()
                changed = true
            }
        } catch {
            // The ledger could not be read now: the next look tries again; streams keep their heartbeats.
        }
        if changed { published.notify() }
    }
}

/// An event as the feed holds it: the record and its signed form.
struct FeedEvent: Sendable {
    var record: EventRecord
    var signed: StoreV1.SignedEvent
}
