import Crypto
import KioskAPI
import KioskRPC
import KioskSigning
import KioskWire
import Logging
import NIOConcurrencyHelpers
import NIOPosix
import Synchronization

/// Whether a receipt opens a product's content, and why not.
public struct AccessDecision: Hashable, Sendable {
    /// The receipt's verification status.
    public var status: ReceiptStatus
    /// For a valid receipt that is still refused: `revoked`, `wrong_account`,
    /// `wrong_product`. Empty when allowed; the status's name otherwise.
    public var refusal: String
    /// A readable reason.
    public var reason: String
    /// The caller's account, when allowed.
    public var accountID: String?

    /// True when the download would be served.
    public var allowed: Bool { status == .valid && refusal.isEmpty }

    static func granted(account: String) -> AccessDecision {
        AccessDecision(status: .valid, refusal: "", reason: "allowed", accountID: account)
    }

    static func refused(_ status: ReceiptStatus, _ reason: String) -> AccessDecision {
        AccessDecision(status: status, refusal: status.name, reason: reason)
    }

    /// The call status a refused download ends with.
    var callCode: StatusCode {
        switch status {
        case .malformed: .invalidArgument
        case .serverUnavailable: .unavailable
        case .sandboxReceiptInProduction, .productionReceiptInSandbox: .failedPrecondition
        default: .permissionDenied
        }
    }
}

/// Counters the `Stats` method reports.
public struct GateStats: Hashable, Sendable {
    /// Checks answered from the verified-receipt cache.
    public var cacheHits: UInt64
    /// Checks that verified a signature.
    public var cacheMisses: UInt64
    /// Receipts in the cache now.
    public var cacheEntries: Int
    /// The cache's size limit.
    public var cacheCapacity: Int
    /// Revoked transactions known.
    public var revocationsKnown: Int
    /// Store signing keys known.
    public var keysKnown: Int
    /// Milliseconds since the store was last heard from; 0 if never.
    public var storeSilenceMs: Int64
    /// How far the store's event log has been followed (WatchEvents' cursor).
    public var revocationCursor: UInt64
    /// Access tokens whose signature was checked, kept until they expire (only valid ones).
    public var accessTokensCached: Int = 0
    /// Decisions since the start, by outcome: `allowed`, or why not (`revoked`, `wrong_account`, `not_authentic`,
    /// …).
    public var decisions: [String: UInt64] = [:]
    /// Access-token checks since the start, by result: `cached` (checked before), `verified` (its signature now),
    /// `refused`, `keys_unknown` (the store not reached yet).
    public var accessTokenChecks: [String: UInt64] = [:]
}

/// Decides access offline: Ed25519 signatures against the store's keys, the
/// caller's account (from an access token the store signed), the product, the
/// environment, and the revocations fed by the store, with a cache of verified
/// receipts. No caller's token ever costs a store call; only a receipt naming
/// an unknown key id does (at most one key fetch a second).
final class ReceiptGate: Sendable {
    private struct State {
        var verifier: ReceiptVerifier
        var tokenVerifier: AccessTokenVerifier
        /// Access tokens whose signature verified, until they expire.
        var tokens: [String: (accountID: String, expiresMs: Int64)] = [:]
        var keysKnown = 0
        /// Each known key's retirement time (0: none), to notice a retirement.
        var keyWindows: [String: Int64] = [:]
        var revoked: Set<String> = []
        var cursor: UInt64 = 0
        var lastHeardMs: Int64?
        var cache: VerifiedReceiptCache
        var lastKeyRefresh: ContinuousClock.Instant?
    }

    private let configuration: ContentConfiguration
    let link: StoreLink
    private let logger: Logger
    private let state: NIOLockedValueBox<State>
    /// Counts the times the checked access tokens and the verified receipts were all dropped (a key
    /// retired): a ``Caller`` found before no longer holds, and a receipt verified before is not cached.
    private let tokenGeneration = Atomic<UInt64>(0)
    /// Decisions and token checks, for metrics.
    let counters = GateCounters()

    init(configuration: ContentConfiguration, link: StoreLink, logger: Logger) {
        self.configuration = configuration
        self.link = link
        self.logger = logger
        self.stalenessMs = configuration.maximumStaleness.wholeMilliseconds
        self.state = NIOLockedValueBox(
            State(
                verifier: configuration.makeVerifier(keys: []),
                tokenVerifier: Self.makeTokenVerifier(keys: [], configuration),
                cache: VerifiedReceiptCache(capacity: configuration.cacheSize)))
    }

    private var now: Int64 { configuration.clock() }
    /// `configuration.maximumStaleness` in milliseconds, worked out once (a `Duration`'s components cost a 128-bit division).
    private let stalenessMs: Int64

    // MARK: Deciding

    /// Decides whether `receipt` opens `productID` for the holder of `token`: a receipt of that product, or, when
    /// `entitlement` is not empty (the manifest gates the item by it), of any product that grants it.
    /// - Throws: ``RPCError`` UNAUTHENTICATED for a missing, invalid or expired access token.
    /// - Parameter caller: what ``checkCaller(token:)`` found for this call, if it ran.
    func authorize(
        receipt: [UInt8], productID: String, entitlement: String = "", token: String?, caller: Caller? = nil
    ) async throws -> AccessDecision {
        switch try authorizeNow(
            receipt: receipt, productID: productID, entitlement: entitlement, token: token, caller: caller?.lookup)
        {
        case .decided(let decision):
            counters.count(decision)
            return decision
        case .unknownKey:
            return try await authorizeAfterFetchingKeys(
                receipt: receipt, productID: productID, entitlement: entitlement, token: token, caller: caller)
        }
    }

    /// Finishes a decision ``authorizeNow(receipt:productID:token:caller:useCache:)`` left
    /// at ``Attempt/unknownKey(_:)``: fetches the keys (at most once a second) and decides again,
    /// without counting a second cache miss. The fetch can bring the retirement of the key that
    /// signed the caller's token: `token` is checked again unless `caller` still holds.
    func authorizeAfterFetchingKeys(
        receipt: [UInt8], productID: String, entitlement: String = "", token: String?, caller: Caller?
    ) async throws -> AccessDecision {
        let verifier = state.withLockedValue { $0.verifier }
        _ = await refreshKeysIfUnknown(receipt, checkedWith: verifier)
        let current = caller.flatMap { stillHolds($0) ? $0.lookup : nil }
        let decision: AccessDecision
        switch try authorizeNow(
            receipt: receipt, productID: productID, entitlement: entitlement, token: token, caller: current,
            useCache: false)
        {
        case .decided(let decided): decision = decided
        case .unknownKey(let message): decision = .refused(.notAuthentic, message)
        }
        counters.count(decision)
        return decision
    }

    /// What ``authorizeNow(receipt:productID:token:caller:useCache:)`` could tell without waiting.
    enum Attempt {
        case decided(AccessDecision)
        /// The receipt names a key not known yet (the verifier's message): the keys have to be fetched first.
        case unknownKey(String)
    }

    /// Decides without suspending, unless the receipt names a key not known
    /// yet (then ``authorizeAfterFetchingKeys(receipt:productID:token:caller:)`` fetches the
    /// keys and decides): the content service's Authorize runs this inline, on the event
    /// loop that read the request.
    /// - Parameters:
    ///   - caller: the token's account as ``checkCaller(token:)`` found it; `token` is only checked for presence then.
    ///   - useCache: false after a key fetch: the lookup (and its miss) was counted by the first attempt.
    func authorizeNow(
        receipt: [UInt8], productID: String, entitlement: String = "", token: String?, caller: AccountLookup? = nil,
        useCache: Bool = true
    ) throws -> Attempt {
        guard caller != nil || !(token ?? "").isEmpty else {
            throw RPCError(
                .unauthenticated,
                "missing metadata \"authorization: Bearer <access token>\" (from the store's AccessToken call)")
        }
        let nowMs = now
        let lookup: AccountLookup
        if let caller {
            lookup = caller
        } else {
            // Staleness first, as with a caller (checked below): a stale gate does not refuse the token instead.
            if let stale = staleness(nowMs: nowMs) { return .decided(stale) }
            lookup = try checkedToken(token ?? "", nowMs: nowMs).lookup
        }

        // The receipt's bytes (hashed once) are the cache key; with the cache off, or a receipt too long to
        // keep (padded by its sender), the hash is not worth computing: the receipt is checked, not cached.
        let key = configuration.cacheSize > 0 && receipt.count <= ReceiptKey.largestCached ? ReceiptKey(receipt) : nil
        // One lock round trip for staleness, the cache lookup and the verifier; one more below for the
        // revocations (the insert after a miss comes once the answer is out: remember(_:_:verifiedInGeneration:)).
        let stalenessMs = self.stalenessMs
        let found = state.withLockedValue { state -> Found in
            let generation = tokenGeneration.load(ordering: .acquiring)
            if let stale = Self.staleness(lastHeardMs: state.lastHeardMs, nowMs: nowMs, stalenessMs: stalenessMs) {
                return Found(stale: stale, cached: nil, verifier: state.verifier, generation: generation)
            }
            guard case .account = lookup, useCache else {
                return Found(stale: nil, cached: nil, verifier: state.verifier, generation: generation)
            }
            return Found(
                stale: nil, cached: key.map { state.cache.lookup($0) } ?? state.cache.missed(),
                verifier: state.verifier, generation: generation)
        }
        if let stale = found.stale { return .decided(stale) }
        let account: String
        switch lookup {
        case .account(let id): account = id
        case .refused(let decision): return .decided(decision)
        }

        let receiptFound: VerifiedReceipt
        let revoked: Bool
        if let cached = found.cached {
            receiptFound = cached
            revoked = state.withLockedValue { $0.revoked.contains(cached.transactionID) }
        } else {
            // The payload is read where protobuf-c unpacked it: the cache keeps three of its seven strings, and
            // only those become Swift strings.
            let (check, kept) = found.verifier.verify(receipt, nowMs: nowMs, keeping: VerifiedReceipt.init(unpacked:))
            if check.status == .notAuthentic, let keyID = Self.keyID(of: receipt), !keyID.isEmpty,
                !found.verifier.knows(keyID: keyID)
            {
                return .unknownKey(check.message)
            }
            guard check.status == .valid, let verified = kept else {
                return .decided(.refused(check.status, check.message))
            }
            receiptFound = verified
            revoked = state.withLockedValue { $0.revoked.contains(receiptFound.transactionID) }
            if let key, !revoked { remember(key, receiptFound, verifiedInGeneration: found.generation) }
        }
        // Whose it is first: another account's receipt tells its caller nothing of its expiry or refund.
        guard receiptFound.accountID == account else {
            return .decided(
                AccessDecision(
                    status: .valid, refusal: "wrong_account", reason: "the receipt belongs to another account"))
        }
        if receiptFound.expiresDateMs > 0, receiptFound.expiresDateMs <= nowMs {
            return .decided(.refused(.subscriptionExpired, "subscription expired"))
        }
        if revoked {
            return .decided(
                AccessDecision(status: .valid, refusal: "revoked", reason: "the purchase was refunded or revoked"))
        }
        guard
            receiptFound.productID == productID
                || (!entitlement.isEmpty && receiptFound.entitlements.contains(entitlement))
        else {
            return .decided(
                AccessDecision(
                    status: .valid, refusal: "wrong_product",
                    reason: entitlement.isEmpty
                        ? "the receipt is for \(receiptFound.productID), not \(productID)"
                        : "the receipt is for \(receiptFound.productID), which does not grant \(entitlement) (\(productID) needs it)"
                ))
        }
        return .decided(.granted(account: account))
    }

    /// What ``authorizeNow(receipt:productID:token:caller:useCache:)`` takes out of the lock in one round
    /// trip (a struct, not a tuple: a tuple would be copied and destroyed through generic value witnesses).
    private struct Found {
        var stale: AccessDecision?
        var cached: VerifiedReceipt?
        var verifier: ReceiptVerifier
        var generation: UInt64
    }

    /// Caches a receipt just verified, once the answer is out: on an event loop (an inline call) after the
    /// loop has flushed what the read answered, so the cache's insert and eviction are not part of the
    /// call's latency; anywhere else at once. A revocation that came meanwhile wins, and a receipt verified
    /// before a key retirement emptied the cache is not cached (it is checked again against the new keys).
    private func remember(_ key: ReceiptKey, _ receipt: VerifiedReceipt, verifiedInGeneration generation: UInt64) {
        let insert: @Sendable () -> Void = { [self] in
            state.withLockedValue { state in
                guard tokenGeneration.load(ordering: .acquiring) == generation,
                    !state.revoked.contains(receipt.transactionID)
                else { return }
                state.cache.insert(key, receipt)
            }
        }
        if let loop = MultiThreadedEventLoopGroup.currentEventLoop { loop.execute(insert) } else { insert() }
    }

    /// The key id a receipt names, if it decodes.
    private static func keyID(of receipt: [UInt8]) -> String? {
        (try? ReceiptV1.SignedReceipt(serializedBytes: receipt))?.keyID
    }

    private func staleness(nowMs: Int64) -> AccessDecision? {
        Self.staleness(lastHeardMs: state.withLockedValue { $0.lastHeardMs }, nowMs: nowMs, stalenessMs: stalenessMs)
    }

    /// The refusal of a gate that last heard from its store at `lastHeardMs` (never: nil), if it is stale.
    private static func staleness(lastHeardMs: Int64?, nowMs: Int64, stalenessMs: Int64) -> AccessDecision? {
        guard let lastHeard = lastHeardMs else {
            return .refused(
                .serverUnavailable, "the store has not been reached yet; its keys and revocations are unknown")
        }
        let silence = nowMs - lastHeard
        guard silence <= stalenessMs else {
            return .refused(
                .serverUnavailable,
                "the store has been unreachable for \(silence / 1000) s (limit \(stalenessMs / 1000) s)")
        }
        return nil
    }

    /// Checks the caller's access token from a call's HEADERS, before its
    /// request is decoded, offline: UNAUTHENTICATED when it is missing, not an
    /// access token, not signed by the store, for another service or expired.
    /// Never calls the store: a flood of bad tokens costs at most one signature
    /// check each and leaves nothing behind.
    /// Returns what it found, for ``authorize(receipt:productID:token:caller:)``.
    func checkCaller(token: String?) throws -> Caller {
        guard let token, !token.isEmpty else {
            throw RPCError(
                .unauthenticated,
                "missing metadata \"authorization: Bearer <access token>\" (from the store's AccessToken call)")
        }
        let (lookup, expiresMs, generation) = try checkedToken(token, nowMs: now)
        return Caller(lookup: lookup, validUntilMs: expiresMs, generation: generation)
    }

    /// Whose a caller's token is, or why that cannot be told now.
    enum AccountLookup: Sendable {
        case account(String)
        case refused(AccessDecision)
    }

    /// What ``checkCaller(token:)`` found, and until when it holds. A class: it travels as a call's
    /// ``ServerContext/principal`` (`any Sendable`), where a reference is stored inline and cast back
    /// without copying, while a struct this size would be boxed and copied out on every cast.
    final class Caller: Sendable {
        let lookup: AccountLookup
        /// The token's expiry, ms since 1970 (0 with a refusal).
        let validUntilMs: Int64
        /// ``tokenGeneration`` when the keys the token was checked with were taken.
        let generation: UInt64

        init(lookup: AccountLookup, validUntilMs: Int64, generation: UInt64) {
            self.lookup = lookup
            self.validUntilMs = validUntilMs
            self.generation = generation
        }
    }

    /// True while `caller`'s account still stands for its token without checking it again: the token
    /// has not expired and no key has been retired since (a connection's next call with the same
    /// HEADERS reuses it; see ``CallerAuthenticator/stillHolds(_:)``).
    func stillHolds(_ caller: Caller) -> Bool {
        guard case .account = caller.lookup else { return false }
        return caller.validUntilMs > now && caller.generation == tokenGeneration.load(ordering: .acquiring)
    }

    /// Whose `token` is (from the cache of checked tokens, or checked now), the token's expiry, and the
    /// ``tokenGeneration`` of the keys it was checked with.
    private func checkedToken(
        _ token: String, nowMs: Int64
    ) throws -> (lookup: AccountLookup, expiresMs: Int64, generation: UInt64) {
        // The generation is read under the lock that install() bumps it under, with the keys and the cached tokens.
        let (cached, verifier, keysKnown, generation) = state.withLockedValue {
            ($0.tokens[token], $0.tokenVerifier, $0.keysKnown, tokenGeneration.load(ordering: .acquiring))
        }
        if let cached, cached.expiresMs > nowMs {
            counters.count(.cached)
            return (.account(cached.accountID), cached.expiresMs, generation)
        }
        guard keysKnown > 0 else {
            counters.count(.keysUnknown)
            return (
                .refused(.refused(.serverUnavailable, "the store has not been reached yet; its keys are unknown")), 0,
                generation
            )
        }
        let payload: ReceiptV1.AccessTokenPayload
        do {
            payload = try verifier.verify(token, nowMs: nowMs)
        } catch let refusal as AccessTokenRefusal {
            counters.count(.refused)
            guard AccessToken.looksLikeAccessToken(token) else {
                throw RPCError(
                    .unauthenticated,
                    "the content service takes an access token from the store's AccessToken call, not an account token")
            }
            throw RPCError(.unauthenticated, refusal.description)
        }
        counters.count(.verified)
        let capacity = configuration.accessTokenCacheSize
        if capacity > 0 {
            state.withLockedValue { state in
                // Keys retired while the token was checked outside the lock: it may be one of theirs, not cached.
                guard tokenGeneration.load(ordering: .acquiring) == generation else { return }
                if state.tokens.count >= capacity {
                    state.tokens = state.tokens.filter { $0.value.expiresMs > nowMs }
                    if state.tokens.count >= capacity { state.tokens.removeAll(keepingCapacity: true) }
                }
                state.tokens[token] = (payload.accountID, payload.expiresMs)
            }
        }
        return (.account(payload.accountID), payload.expiresMs, generation)
    }

    /// Tokens of the store this service follows: its keys are what bind a token
    /// to it, so the token's environment only has to be a real one (receipts
    /// carry the environment rules: 21007 / 21008).
    private static func makeTokenVerifier(
        keys: [ReceiptPublicKey], _ configuration: ContentConfiguration
    ) -> AccessTokenVerifier {
        AccessTokenVerifier(keys: keys, audience: AccessToken.contentAudience, environments: [.sandbox, .production])
    }

    /// Fetches the store's keys again when the receipt names a key not known
    /// yet (a rotation), at most once a second; a call that finds the fetch
    /// rate-limited waits for the next one (under a second) instead of calling
    /// a new key's receipt not authentic.
    /// Returns false at once when `verifier` knew the key (the receipt is not authentic for another reason:
    /// checking it again would cost a second signature check for nothing).
    private func refreshKeysIfUnknown(_ receipt: [UInt8], checkedWith verifier: ReceiptVerifier) async -> Bool {
        guard let signed = try? ReceiptV1.SignedReceipt(serializedBytes: receipt), !signed.keyID.isEmpty,
            !verifier.knows(keyID: signed.keyID)
        else { return false }
        for _ in 0..<2 {
            let wait = state.withLockedValue { state -> Duration?? in
                guard !state.verifier.knows(keyID: signed.keyID) else { return .some(nil) }  // known now: done
                let now = ContinuousClock.now
                if let last = state.lastKeyRefresh, now - last < .seconds(1) {
                    return .some(.seconds(1) - (now - last))
                }
                state.lastKeyRefresh = now
                return .none
            }
            switch wait {
            case .some(nil):
                return true
            case .some(let pause?):
                try? await Task.sleep(for: pause)
            case .none:
                guard let keys = try? await link.publicKeys() else { return false }
                install(keys: keys)
                return state.withLockedValue { $0.verifier.knows(keyID: signed.keyID) }
            }
        }
        return state.withLockedValue { $0.verifier.knows(keyID: signed.keyID) }
    }

    // MARK: Following the store

    /// New keys. They do not count as hearing from the store: only the
    /// revocation feed (a revocation or a heartbeat) proves it is current.
    func install(keys: [ReceiptPublicKey]) {
        let verifier = configuration.makeVerifier(keys: keys)
        let tokenVerifier = Self.makeTokenVerifier(keys: keys, configuration)
        state.withLockedValue { state in
            state.verifier = verifier
            state.tokenVerifier = tokenVerifier
            // A key retired (or gone): what it verified is checked again against the new windows.
            let windows = Dictionary(keys.map { ($0.id, $0.notAfterMs) }, uniquingKeysWith: { first, _ in first })
            if state.keyWindows.contains(where: { windows[$0.key] != $0.value }) {
                tokenGeneration.add(1, ordering: .releasing)
                state.tokens.removeAll()
                state.cache.removeAll()
            }
            state.keyWindows = windows
            state.keysKnown = keys.count
        }
    }

    /// True once the store's keys and its revocation feed have both been received.
    var isReady: Bool { state.withLockedValue { $0.keysKnown > 0 && $0.lastHeardMs != nil } }

    /// A message of the store's event feed: a REFUNDED or REFUND_REVERSED event, or a heartbeat (no event).
    /// - Throws: when the event does not decode (the stream is started again; the cursor has not moved past it).
    func apply(_ message: StoreV1.WatchEventsResponse) throws {
        // The stream is the store's own, over the service's authenticated link: the event is taken as sent
        // (its signature is for receivers that get it second-hand).
        var revoked: String?
        var reinstated: String?
        if let signed = message.event {
            let event = try StoreV1.Event(serializedBytes: signed.event)
            // Asked for REFUNDED and REFUND_REVERSED only; anything else changes nothing. In the log's order, so a
            // reversal follows the revocation it undoes.
            if event.type == .refunded { revoked = event.transactionID }
            if event.type == .refundReversed { reinstated = event.transactionID }
        }
        let nowMs = now
        state.withLockedValue { state in
            state.lastHeardMs = nowMs
            state.cursor = max(state.cursor, message.cursor)
            if let reinstated { state.revoked.remove(reinstated) }
            guard let revoked, !revoked.isEmpty else { return }
            state.revoked.insert(revoked)
            state.cache.evict(transactionID: revoked)
        }
    }

    /// Keeps keys and revocations current until cancelled: fetches the keys,
    /// follows the store's REFUNDED and REFUND_REVERSED events (`WatchEvents`) from the last cursor, and
    /// starts again after any failure (the RPC client reconnects with backoff).
    func followStore() async {
        var failures = 0
        while !Task.isCancelled {
            do {
                install(keys: try await link.publicKeys())
                let cursor = state.withLockedValue { $0.cursor }
                for try await message in link.refunds(since: cursor) {
                    // A rotation or retirement: the keys are fetched before the message counts as hearing from the store.
                    if message.keysChanged { install(keys: try await link.publicKeys()) }
                    try apply(message)
                    failures = 0
                }
            } catch {
                if Task.isCancelled { return }
                failures += 1
                if failures == 1 { logger.warning("lost the store: \(error)") }
            }
            let delay = min(50 * (1 << min(failures, 4)), 1000)
            try? await Task.sleep(for: .milliseconds(delay))
        }
    }

    var stats: GateStats {
        let nowMs = now
        return state.withLockedValue { state in
            GateStats(
                cacheHits: state.cache.hits, cacheMisses: state.cache.misses, cacheEntries: state.cache.count,
                cacheCapacity: state.cache.capacity, revocationsKnown: state.revoked.count, keysKnown: state.keysKnown,
                storeSilenceMs: state.lastHeardMs.map { nowMs - $0 } ?? 0, revocationCursor: state.cursor,
                accessTokensCached: state.tokens.count, decisions: counters.decisionCounts,
                accessTokenChecks: counters.tokenCounts)
        }
    }
}

/// The gate's decisions and access-token checks, counted with relaxed atomics on the path that makes them (one
/// add each), for metrics.
final class GateCounters: Sendable {
    /// Decision outcomes, the metric's `outcome` label: allowed, then why not.
    static let outcomes = [
        "allowed", "revoked", "wrong_account", "wrong_product", "malformed", "not_authentic", "server_unavailable",
        "subscription_expired", "sandbox_receipt_in_production", "production_receipt_in_sandbox",
        "account_not_found", "other",
    ]
    /// Access-token check results, the metric's `result` label.
    static let tokenResults = ["cached", "verified", "refused", "keys_unknown"]

    private final class Cell: Sendable {
        let value = Atomic<UInt64>(0)
    }
    private let decisions = GateCounters.outcomes.map { _ in Cell() }
    private let tokens = GateCounters.tokenResults.map { _ in Cell() }

    func count(_ decision: AccessDecision) {
        let index =
            decision.allowed ? 0 : Self.outcomes.firstIndex(of: decision.refusal) ?? Self.outcomes.count - 1
        decisions[index].value.add(1, ordering: .relaxed)
    }

    enum TokenResult: Int {
        case cached, verified, refused, keysUnknown
    }

    func count(_ result: TokenResult) { tokens[result.rawValue].value.add(1, ordering: .relaxed) }

    var decisionCounts: [String: UInt64] {
        Dictionary(uniqueKeysWithValues: zip(Self.outcomes, decisions.map { $0.value.load(ordering: .relaxed) }))
    }

    var tokenCounts: [String: UInt64] {
        Dictionary(uniqueKeysWithValues: zip(Self.tokenResults, tokens.map { $0.value.load(ordering: .relaxed) }))
    }
}
