import Crypto
import KioskAPI
import KioskRPC
import KioskWire
import Logging
import NIOConcurrencyHelpers

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
    /// The revocation feed's cursor.
    public var revocationCursor: UInt64
}

/// Decides access offline: Ed25519 signatures against the store's keys, the
/// caller's account, the product, the environment, and the revocations fed by
/// the store, with a cache of verified receipts. Only a caller's first token
/// and an unknown key id cost a store round trip.
final class ReceiptGate: Sendable {
    private struct State {
        var verifier: ReceiptVerifier
        var keysKnown = 0
        var revoked: Set<String> = []
        var cursor: UInt64 = 0
        var lastHeardMs: Int64?
        var cache: VerifiedReceiptCache
        var tokens: [[UInt8]: (accountID: String, atMs: Int64)] = [:]
        var lastKeyRefresh: ContinuousClock.Instant?
    }

    private let configuration: ContentConfiguration
    let link: StoreLink
    private let logger: Logger
    private let state: NIOLockedValueBox<State>

    init(configuration: ContentConfiguration, link: StoreLink, logger: Logger) {
        self.configuration = configuration
        self.link = link
        self.logger = logger
        self.state = NIOLockedValueBox(State(
            verifier: ReceiptVerifier(keys: [], environment: configuration.environment, acceptSandbox: configuration.acceptSandbox),
            cache: VerifiedReceiptCache(capacity: configuration.cacheSize)))
    }

    private var now: Int64 { configuration.clock() }
    private var stalenessMs: Int64 { configuration.maximumStaleness.wholeMilliseconds }

    // MARK: Deciding

    /// Decides whether `receipt` opens `productID` for the holder of `token`.
    /// - Throws: ``RPCError`` UNAUTHENTICATED for a missing or unknown token.
    /// - Parameter caller: the token's account as ``checkCaller(token:)`` found it for this call, if it ran.
    func authorize(receipt: [UInt8], productID: String, token: String?, caller: AccountLookup? = nil) async throws -> AccessDecision {
        guard let token, !token.isEmpty else {
            throw RPCError(.unauthenticated, "missing metadata \"authorization: Bearer <token>\" (the buyer's store token)")
        }
        let nowMs = now
        if let stale = staleness(nowMs: nowMs) { return stale }
        let account: String
        let lookup: AccountLookup
        if let caller { lookup = caller } else { lookup = try await accountID(token: token, nowMs: nowMs) }
        switch lookup {
        case .account(let id): account = id
        case .refused(let decision): return decision
        }

        // The receipt's hash is the cache key; with the cache off it is not worth computing.
        let key = configuration.cacheSize > 0 ? Array(SHA256.hash(data: receipt)) : nil
        var payload = state.withLockedValue { state -> ReceiptV1.ReceiptPayload? in
            if let key { return state.cache.lookup(key) }
            return state.cache.missed()
        }
        if payload == nil {
            var check = state.withLockedValue { $0.verifier }.verify(receipt, nowMs: nowMs)
            if check.status == .notAuthentic, await refreshKeysIfUnknown(receipt) {
                check = state.withLockedValue { $0.verifier }.verify(receipt, nowMs: nowMs)
            }
            guard check.status == .valid, let verified = check.payload else {
                return .refused(check.status, check.message)
            }
            state.withLockedValue { state in
                if let key, !state.revoked.contains(verified.transactionID) { state.cache.insert(key, verified) }
            }
            payload = verified
        }
        guard let payload else { return .refused(.malformed, "receipt could not be read") }
        if payload.expiresDateMs > 0, payload.expiresDateMs <= nowMs {
            return .refused(.subscriptionExpired, "subscription expired")
        }
        if state.withLockedValue({ $0.revoked.contains(payload.transactionID) }) {
            return AccessDecision(status: .valid, refusal: "revoked", reason: "the purchase was refunded or revoked")
        }
        guard payload.accountID == account else {
            return AccessDecision(status: .valid, refusal: "wrong_account", reason: "the receipt belongs to another account")
        }
        guard payload.productID == productID else {
            return AccessDecision(status: .valid, refusal: "wrong_product",
                                  reason: "the receipt is for \(payload.productID), not \(productID)")
        }
        return .granted(account: account)
    }

    private func staleness(nowMs: Int64) -> AccessDecision? {
        let lastHeard = state.withLockedValue { $0.lastHeardMs }
        guard let lastHeard else {
            return .refused(.serverUnavailable, "the store has not been reached yet; its keys and revocations are unknown")
        }
        let silence = nowMs - lastHeard
        guard silence <= stalenessMs else {
            return .refused(.serverUnavailable, "the store has been unreachable for \(silence / 1000) s (limit \(stalenessMs / 1000) s)")
        }
        return nil
    }

    /// Checks the caller's bearer token from a call's HEADERS, before its
    /// request is decoded: UNAUTHENTICATED when it is missing or the store does
    /// not know it. A store that cannot be reached is left to ``authorize``,
    /// which answers 21005 within its staleness rules.
    /// Returns what it found, for ``authorize(receipt:productID:token:caller:)``.
    func checkCaller(token: String?) async throws -> AccountLookup {
        guard let token, !token.isEmpty else {
            throw RPCError(.unauthenticated, "missing metadata \"authorization: Bearer <token>\" (the buyer's store token)")
        }
        return try await accountID(token: token, nowMs: now)
    }

    /// Whose a caller's token is, or why that cannot be told now.
    enum AccountLookup: Sendable {
        case account(String)
        case refused(AccessDecision)
    }

    private func accountID(token: String, nowMs: Int64) async throws -> AccountLookup {
        let tokenHash = Array(SHA256.hash(data: Array(token.utf8)))
        let lifetime = configuration.tokenCacheLifetime.wholeMilliseconds
        let cached = state.withLockedValue { $0.tokens[tokenHash] }
        if let cached, nowMs - cached.atMs <= lifetime { return .account(cached.accountID) }
        do {
            let id = try await link.accountID(forCallerToken: token)
            state.withLockedValue { state in
                if state.tokens.count >= 100_000 { state.tokens.removeAll() }
                state.tokens[tokenHash] = (id, nowMs)
            }
            return .account(id)
        } catch let error as RPCError where error.code == .unauthenticated && error.source == .remote {
            throw RPCError(.unauthenticated, "the store does not know this bearer token")
        } catch {
            // Store unreachable: an expired answer still serves within the staleness bound.
            if let cached { return .account(cached.accountID) }
            return .refused(.refused(.serverUnavailable, "the store cannot be reached to check the caller's token: \(error)"))
        }
    }

    /// Fetches the store's keys again when the receipt names a key not known
    /// yet (a rotation), at most once a second; a call that finds the fetch
    /// rate-limited waits for the next one (under a second) instead of calling
    /// a new key's receipt not authentic.
    private func refreshKeysIfUnknown(_ receipt: [UInt8]) async -> Bool {
        guard let signed = try? ReceiptV1.SignedReceipt(serializedBytes: receipt), !signed.keyID.isEmpty else { return false }
        for _ in 0..<2 {
            let wait = state.withLockedValue { state -> Duration?? in
                guard !state.verifier.knows(keyID: signed.keyID) else { return .some(nil) }  // known now: done
                let now = ContinuousClock.now
                if let last = state.lastKeyRefresh, now - last < .seconds(1) { return .some(.seconds(1) - (now - last)) }
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
        let verifier = ReceiptVerifier(keys: keys, environment: configuration.environment, acceptSandbox: configuration.acceptSandbox)
        state.withLockedValue { state in
            state.verifier = verifier
            state.keysKnown = keys.count
        }
    }

    /// True once the store's keys and its revocation feed have both been received.
    var isReady: Bool { state.withLockedValue { $0.keysKnown > 0 && $0.lastHeardMs != nil } }

    func apply(_ revocation: StoreV1.Revocation) {
        let nowMs = now
        state.withLockedValue { state in
            state.lastHeardMs = nowMs
            state.cursor = max(state.cursor, revocation.cursor)
            guard !revocation.transactionID.isEmpty else { return }  // a heartbeat
            state.revoked.insert(revocation.transactionID)
            state.cache.evict(transactionID: revocation.transactionID)
        }
    }

    /// Keeps keys and revocations current until cancelled: fetches the keys,
    /// follows `WatchRevocations` from the last cursor, and starts again after
    /// any failure (the RPC client reconnects with backoff).
    func followStore() async {
        var failures = 0
        while !Task.isCancelled {
            do {
                install(keys: try await link.publicKeys())
                let cursor = state.withLockedValue { $0.cursor }
                for try await revocation in link.revocations(since: cursor) {
                    apply(revocation)
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
                storeSilenceMs: state.lastHeardMs.map { nowMs - $0 } ?? 0, revocationCursor: state.cursor)
        }
    }
}
