import Foundation
import KioskAPI
import NIOConcurrencyHelpers

/// A capability of the app the catalog declares ("pro"), as the account holds it: ask for the entitlement, not the
/// products that grant it (a monthly or yearly subscription, a lifetime purchase, a redeemed code, a grant).
///
/// ```swift
/// if try await kiosk.entitlements["pro"].isActive { unlockPro() }
/// ```
public struct Entitlement: Hashable, Sendable, Identifiable {
    /// What gives an account an entitlement. Open: a newer store may name a source this version does not know.
    public struct Source: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The store's name for it (`purchase`, `subscription`, `offer_code`, `grant`).
        public var rawValue: String
        /// The source the store names `rawValue`.
        public init(rawValue: String) { self.rawValue = rawValue }
        /// A non-consumable or a non-renewing subscription bought.
        public static let purchase = Source(rawValue: "purchase")
        /// An auto-renewable subscription, paid up or in its grace period.
        public static let subscription = Source(rawValue: "subscription")
        /// A redeemed offer code.
        public static let offerCode = Source(rawValue: "offer_code")
        /// An operator's grant.
        public static let grant = Source(rawValue: "grant")
        /// The store's name for it.
        public var description: String { rawValue }
    }

    /// The catalog's entitlement id.
    public var id: String
    /// True when the account holds it: as the store answered, or, from the cache, until its expiration date has
    /// passed by the time elapsed since the store last confirmed it.
    public var isActive: Bool
    /// What grants it; nil when not active.
    public var source: Source?
    /// The product of the granting transaction; nil when not active.
    public var productID: String?
    /// The granting transaction (a subscription's latest); nil when not active.
    public var transactionID: String?
    /// The granting transaction's original id; nil when not active.
    public var originalTransactionID: String?
    /// When it ends unless renewed; nil when it never does (a lifetime purchase) or is not active.
    public var expirationDate: Date?
    /// When the granting transaction was bought.
    public var purchaseDate: Date?
    /// True when an auto-renewable subscription grants it and will renew.
    public var willRenew: Bool

    /// An entitlement the account does not hold.
    public static func inactive(_ id: String) -> Entitlement {
        Entitlement(
            id: id, isActive: false, source: nil, productID: nil, transactionID: nil, originalTransactionID: nil,
            expirationDate: nil, purchaseDate: nil, willRenew: false)
    }

    init(
        id: String, isActive: Bool, source: Source?, productID: String?, transactionID: String?,
        originalTransactionID: String?, expirationDate: Date?, purchaseDate: Date?, willRenew: Bool
    ) {
        self.id = id
        self.isActive = isActive
        self.source = source
        self.productID = productID
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.expirationDate = expirationDate
        self.purchaseDate = purchaseDate
        self.willRenew = willRenew
    }

    init(_ message: StoreV1.Entitlement) {
        self.init(
            id: message.entitlementID, isActive: true, source: Source(rawValue: message.source),
            productID: message.productID, transactionID: message.transactionID,
            originalTransactionID: message.originalTransactionID,
            expirationDate: message.expiresMs > 0 ? Date(milliseconds: message.expiresMs) : nil,
            purchaseDate: message.purchaseMs > 0 ? Date(milliseconds: message.purchaseMs) : nil,
            willRenew: message.willRenew)
    }
}

/// The account's entitlements, as ``KioskClient/entitlements`` answers them: from the store, or from the copy kept
/// in the state directory when the store cannot be reached.
public struct EntitlementInfos: Hashable, Sendable {
    /// The entitlements the account holds, by id.
    public var active: [String: Entitlement]
    /// When the store last confirmed them, by its clock.
    public var confirmedDate: Date
    /// True when read from the state directory's copy because the store could not be reached.
    public var isCached: Bool

    /// The entitlement with `id`: an inactive one when the account does not hold it (or the catalog has none such).
    public subscript(id: String) -> Entitlement { active[id] ?? .inactive(id) }
}

/// The state directory's copy of the last answer: the store's clock then, and this machine's.
struct CachedEntitlements: Codable {
    var accountID: String
    var asOfMs: Int64
    var fetchedAtMs: Int64
    var entitlements: [Item]

    struct Item: Codable {
        var id: String
        var source: String
        var productID: String
        var transactionID: String
        var originalTransactionID: String
        var expiresMs: Int64
        var purchaseMs: Int64
        var willRenew: Bool
    }

    init(accountID: String, response: StoreV1.EntitlementsResponse, fetchedAtMs: Int64) {
        self.accountID = accountID
        asOfMs = response.asOfMs
        self.fetchedAtMs = fetchedAtMs
        entitlements = response.entitlements.map {
            Item(
                id: $0.entitlementID, source: $0.source, productID: $0.productID, transactionID: $0.transactionID,
                originalTransactionID: $0.originalTransactionID, expiresMs: $0.expiresMs, purchaseMs: $0.purchaseMs,
                willRenew: $0.willRenew)
        }
    }

    /// The entitlements as they stand `localNowMs` on this machine's clock: the store's time then is its time at the
    /// answer plus what elapsed here since. A clock set back before the answer cannot be trusted to tell how much
    /// time passed: then only entitlements without an end stay active.
    func infos(localNowMs: Int64) -> EntitlementInfos {
        let clockSetBack = localNowMs < fetchedAtMs
        let storeNowMs = asOfMs + max(0, localNowMs - fetchedAtMs)
        var active: [String: Entitlement] = [:]
        for item in entitlements where item.expiresMs == 0 || (!clockSetBack && item.expiresMs > storeNowMs) {
            active[item.id] = Entitlement(
                StoreV1.Entitlement(
                    entitlementID: item.id, productID: item.productID, transactionID: item.transactionID,
                    originalTransactionID: item.originalTransactionID, source: item.source, expiresMs: item.expiresMs,
                    purchaseMs: item.purchaseMs, willRenew: item.willRenew))
        }
        return EntitlementInfos(active: active, confirmedDate: Date(milliseconds: asOfMs), isCached: true)
    }
}

/// Fans entitlement changes out to every listener of ``KioskClient/entitlementUpdates``; a new listener first gets
/// the last value seen, if any.
final class EntitlementBroadcast: Sendable {
    private struct State {
        var listeners: [Int: AsyncStream<EntitlementInfos>.Continuation] = [:]
        var next = 0
        var last: EntitlementInfos?
        var finished = false
    }

    private let state = NIOLockedValueBox(State())

    /// Yields `infos` when what is active differs from the last value yielded; an answer older than it (by the
    /// store's clock: two reads that crossed) is dropped. Yielded under the lock, so listeners see answers in order.
    func offer(_ infos: EntitlementInfos) {
        state.withLockedValue { state in
            if let last = state.last, last.confirmedDate > infos.confirmedDate { return }
            let changed = state.last.map { $0.active != infos.active } ?? true
            state.last = infos
            guard changed else { return }
            for listener in state.listeners.values { listener.yield(infos) }
        }
    }

    func subscribe() -> AsyncStream<EntitlementInfos> {
        let (stream, continuation) = AsyncStream.makeStream(of: EntitlementInfos.self)
        let id = state.withLockedValue { state -> Int? in
            guard !state.finished else { return nil }
            state.next += 1
            state.listeners[state.next] = continuation
            if let last = state.last { continuation.yield(last) }
            return state.next
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLockedValue { $0.listeners.removeValue(forKey: id) }
        }
        return stream
    }

    func finish() {
        let listeners = state.withLockedValue { state in
            state.finished = true
            defer { state.listeners.removeAll() }
            return Array(state.listeners.values)
        }
        for listener in listeners { listener.finish() }
    }
}
