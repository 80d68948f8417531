import Foundation
import KioskAPI
import KioskRPC
import KioskStoreCore
import KioskWire

/// The store's RPC service, `kiosk.store.v1.Store`.
///
/// Each method declares the callers it serves (``CallerRole``): `ListProducts`,
/// `PublicKeys` (and Health) are open to anyone; `WatchRevocations` is for
/// content services, `WatchEvents` for content and admin services;
/// `VerifyReceipt` and `ListEvents` for accounts and services (an account
/// lists its own events); `GetTransaction` for accounts (their own) and
/// admins; the rest for accounts. The bearer token is resolved from HEADERS, before the request is
/// decoded: unknown → UNAUTHENTICATED (16), wrong role → PERMISSION_DENIED (7).
/// `Purchase` and `SpendCredits` honour the `idempotency-key` metadata.
public struct StoreService: RPCService {
    /// The service name.
    public static let name = "kiosk.store.v1.Store"
    public var serviceName: String { Self.name }

    /// The store behind the service.
    public let store: Store

    /// Serves `store`.
    public init(store: Store) {
        self.store = store
    }

    /// The address part of a peer's `host:port` (`[v6]:port` too): what offer-code guesses are counted by.
    static func host(of peer: String) -> String {
        guard let colon = peer.lastIndex(of: ":") else { return peer }
        return String(peer[..<colon]).trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
    }

    static func method(_ name: String) -> String { "/\(Self.name)/\(name)" }

    public func register(in router: inout RPCRouter) {
        let store = self.store
        // The bearer token is checked from HEADERS, before the request is decoded.
        let auth = RoleAuthenticator(store: store, .account)
        let verifiers = RoleAuthenticator(store: store, .account, .content, .admin)
        let contentServices = RoleAuthenticator(store: store, .content)
        let services = RoleAuthenticator(store: store, .content, .admin)
        let accountsAndAdmins = RoleAuthenticator(store: store, .account, .admin)
        router.registerUnary(
            Self.method("ListProducts"), request: StoreV1.ListProductsRequest.self,
            response: StoreV1.ListProductsResponse.self
        ) { request, context in
            try request.checkLimits()
            let storefront = try await store.listingStorefront(
                requested: request.storefront, token: context.metadata.bearerToken)
            let (found, invalid) = store.products(ids: request.productIDs, storefront: storefront)
            return StoreV1.ListProductsResponse(
                products: found.map(\.message), invalidProductIDs: invalid, storefront: storefront)
        }
        router.registerUnary(
            Self.method("GetAccount"), request: StoreV1.GetAccountRequest.self, response: StoreV1.Account.self,
            authenticator: auth
        ) { _, context in
            // As the account is now: the authenticated record's settings and balance may be older.
            let id = try RoleAuthenticator.account(context).id
            guard let account = try await store.ledger.offload({ try store.ledger.account(id: id) }) else {
                throw StoreError.unauthenticated("account \(id) no longer exists")
            }
            return StoreV1.Account(
                accountID: account.id, paymentsAllowed: account.paymentsAllowed, creditBalance: account.creditBalance,
                storefront: store.storefront(of: account))
        }
        router.registerUnary(
            Self.method("SetStorefront"), request: StoreV1.SetStorefrontRequest.self, response: StoreV1.Account.self,
            authenticator: auth
        ) { request, context in
            let account = try await store.setStorefront(
                account: try RoleAuthenticator.account(context), to: request.storefront)
            return StoreV1.Account(
                accountID: account.id, paymentsAllowed: account.paymentsAllowed, creditBalance: account.creditBalance,
                storefront: store.storefront(of: account))
        }
        router.registerUnary(
            Self.method("Purchase"), request: StoreV1.PurchaseRequest.self, response: StoreV1.PurchaseResponse.self,
            authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            try FieldLimits.requireIdempotencyKey(context.metadata["idempotency-key"])
            return try await store.purchase(
                account: account, productID: request.productID, quantity: request.quantity,
                paymentMethod: request.paymentMethod,
                idempotencyKey: context.metadata["idempotency-key"], offer: request.offer
            ).message
        }
        router.registerUnary(
            Self.method("Unfinished"), request: StoreV1.UnfinishedRequest.self,
            response: StoreV1.UnfinishedResponse.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            let page = try await store.ledger.page(
                .unfinished, accountID: account.id, pageSize: Ledger.pageSize(request.pageSize),
                pageToken: request.pageToken)
            return StoreV1.UnfinishedResponse(
                transactions: page.transactions.map(\.message), nextPageToken: page.nextPageToken, hasMore: page.hasMore
            )
        }
        router.registerUnary(
            Self.method("Finish"), request: StoreV1.FinishRequest.self, response: StoreV1.FinishResponse.self,
            authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            return StoreV1.FinishResponse(
                alreadyFinished: try await store.finish(account: account, transactionID: request.transactionID))
        }
        router.registerServerStreaming(
            Self.method("Restore"), request: StoreV1.RestoreRequest.self, response: StoreV1.Transaction.self,
            authenticator: auth
        ) { request, writer, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            // Read a page at a time: memory stays bounded however many transactions the account has.
            var remaining = request.pageSize == 0 ? Int.max : Int(request.pageSize)
            var token = request.pageToken
            while remaining > 0 {
                let page = try await store.ledger.page(
                    .restorable, accountID: account.id, pageSize: min(remaining, Ledger.maxPageSize), pageToken: token)
                for record in page.transactions { try await writer.send(record.message) }
                remaining -= page.transactions.count
                guard page.hasMore else { break }
                token = page.nextPageToken
            }
        }
        router.registerUnary(
            Self.method("History"), request: StoreV1.HistoryRequest.self, response: StoreV1.HistoryResponse.self,
            authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            let page = try await store.ledger.page(
                .history, accountID: account.id, pageSize: Ledger.pageSize(request.pageSize),
                pageToken: request.pageToken)
            return StoreV1.HistoryResponse(
                transactions: page.transactions.map(\.message), nextPageToken: page.nextPageToken, hasMore: page.hasMore
            )
        }
        router.registerUnary(
            Self.method("SpendCredits"), request: StoreV1.SpendCreditsRequest.self,
            response: StoreV1.SpendCreditsResponse.self, authenticator: auth
        ) { request, context in
            let account = try RoleAuthenticator.account(context)
            try FieldLimits.requireIdempotencyKey(context.metadata["idempotency-key"])
            return try await store.spendCredits(
                account: account, amount: request.amount, idempotencyKey: context.metadata["idempotency-key"]
            ).message
        }
        router.registerUnary(
            Self.method("VerifyReceipt"), request: StoreV1.VerifyReceiptRequest.self,
            response: StoreV1.VerifyReceiptResponse.self, authenticator: verifiers
        ) { request, context in
            try request.checkLimits()
            // An account learns its own entitlements only, not those of whoever's receipt it holds; a content
            // service needs none; an admin may ask of any.
            let asker = context.principal as? Caller
            let mayAsk: Bool
            switch asker {
            case .account?: mayAsk = true
            case .service(let credential)?: mayAsk = credential.role == .admin
            case nil: mayAsk = false
            }
            var verdict = try await store.verifyReceipt(
                request.signedReceipt, includingEntitlements: request.includeEntitlements && mayAsk)
            if case .account(let account)? = asker, verdict.check.payload?.accountID != account.id {
                verdict.entitlements = []
            }
            return verdict.message
        }
        router.registerUnary(
            Self.method("RedeemOfferCode"), request: StoreV1.RedeemOfferCodeRequest.self,
            response: StoreV1.PurchaseResponse.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            try FieldLimits.requireIdempotencyKey(context.metadata["idempotency-key"])
            return try await store.redeemOfferCode(
                account: account, code: request.code, paymentMethod: request.paymentMethod,
                idempotencyKey: context.metadata["idempotency-key"], source: Self.host(of: context.remoteAddress)
            ).message
        }
        router.registerUnary(
            Self.method("Entitlements"), request: StoreV1.EntitlementsRequest.self,
            response: StoreV1.EntitlementsResponse.self, authenticator: auth
        ) { _, context in
            let account = try RoleAuthenticator.account(context)
            let asOfMs = store.configuration.clock.nowMs
            let held = try await store.entitlements(accountID: account.id)
            return StoreV1.EntitlementsResponse(entitlements: held.map(\.message), asOfMs: asOfMs)
        }
        // Public keys are public: anyone may verify receipts offline.
        router.registerUnary(
            Self.method("PublicKeys"), request: StoreV1.PublicKeysRequest.self,
            response: StoreV1.PublicKeysResponse.self
        ) { _, _ in
            StoreV1.PublicKeysResponse(keys: try await store.ledger.offload { try store.publicKeys() }.map(\.message))
        }
        router.registerUnary(
            Self.method("AccessToken"), request: StoreV1.AccessTokenRequest.self,
            response: StoreV1.AccessTokenResponse.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            let issued = try await store.ledger.offload {
                try store.issueAccessToken(account: account, audience: request.audience)
            }
            return StoreV1.AccessTokenResponse(accessToken: issued.token, expiresMs: issued.expiresMs)
        }
        router.registerUnary(
            Self.method("SubscriptionStatus"), request: StoreV1.SubscriptionStatusRequest.self,
            response: StoreV1.SubscriptionStatusResponse.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            let statuses = try await store.ledger.offload {
                try store.subscriptionStatuses(account: account, originalID: request.originalTransactionID)
            }
            return StoreV1.SubscriptionStatusResponse(subscriptions: statuses)
        }
        router.registerUnary(
            Self.method("SetAutoRenew"), request: StoreV1.SetAutoRenewRequest.self,
            response: StoreV1.SubscriptionStatus.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            return try await store.setAutoRenew(
                account: account, originalID: request.originalTransactionID, request.autoRenew)
        }
        router.registerUnary(
            Self.method("SetPaymentMethod"), request: StoreV1.SetPaymentMethodRequest.self,
            response: StoreV1.SetPaymentMethodResponse.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            let saved = try await store.setPaymentMethod(account: account, paymentMethod: request.paymentMethod)
            return StoreV1.SetPaymentMethodResponse(
                paymentMethod: saved.paymentMethod, subscriptions: UInt32(clamping: saved.subscriptions))
        }
        router.registerUnary(
            Self.method("ConfirmRenewal"), request: StoreV1.SetAutoRenewRequest.self,
            response: StoreV1.SubscriptionStatus.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            return try await store.confirmRenewal(account: account, originalID: request.originalTransactionID)
        }
        router.registerUnary(
            Self.method("ConsentToPriceIncrease"), request: StoreV1.SetAutoRenewRequest.self,
            response: StoreV1.SubscriptionStatus.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            return try await store.consentToPriceIncrease(account: account, originalID: request.originalTransactionID)
        }
        router.registerServerStreaming(
            Self.method("WatchEvents"), request: StoreV1.WatchEventsRequest.self,
            response: StoreV1.WatchEventsResponse.self, authenticator: services
        ) { request, writer, context in
            try await Self.watchEvents(store: store, request, writer, context)
        }
        router.registerUnary(
            Self.method("ListEvents"), request: StoreV1.ListEventsRequest.self,
            response: StoreV1.ListEventsResponse.self, authenticator: verifiers
        ) { request, context in
            // A service pages the whole log; an account only its own events.
            let accountID: String? =
                if case .account(let account)? = context.principal as? Caller { account.id } else { nil }
            let page = try await store.listEvents(
                after: request.since, limit: request.limit, accountID: accountID,
                types: try Self.eventTypes(request.types))
            // An account is not told which operator acted (their credential, their name): services are.
            let events =
                accountID == nil
                ? page.events
                : page.events.map { event -> EventRecord in
                    var event = event
                    event.actor = ""
                    return event
                }
            return StoreV1.ListEventsResponse(
                events: try events.map(store.signed), cursor: page.cursor, hasMore: page.hasMore)
        }
        router.registerUnary(
            Self.method("GetTransaction"), request: StoreV1.GetTransactionRequest.self,
            response: StoreV1.Transaction.self, authenticator: accountsAndAdmins
        ) { request, context in
            try request.checkLimits()
            guard !request.transactionID.isEmpty else { throw StoreError.invalid("transaction_id is required") }
            let found = try await store.ledger.offload { try store.ledger.transaction(id: request.transactionID) }
            // Another account's transaction is as unknown as one that does not exist.
            if case .account(let account)? = context.principal as? Caller, found?.accountID != account.id {
                throw StoreError.notFound("no transaction \(request.transactionID) for this account")
            }
            guard let found else { throw StoreError.notFound("no transaction \(request.transactionID)") }
            return found.message
        }
        router.registerUnary(
            Self.method("ListTransactions"), request: StoreV1.ListTransactionsRequest.self,
            response: StoreV1.ListTransactionsResponse.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            let page = try await store.ledger.listTransactions(
                accountID: account.id, filter: try TransactionFilter(request), limit: request.limit,
                pageToken: request.pageToken, revision: request.revision)
            return StoreV1.ListTransactionsResponse(
                transactions: page.transactions.map(\.message), nextPageToken: page.nextPageToken,
                hasMore: page.hasMore, revision: page.revision)
        }
        router.registerUnary(
            Self.method("RequestRefund"), request: StoreV1.RequestRefundRequest.self,
            response: StoreV1.RefundRequestStatus.self, authenticator: auth
        ) { request, context in
            try request.checkLimits()
            let account = try RoleAuthenticator.account(context)
            return try await store.requestRefund(
                accountID: account.id, transactionID: request.transactionID, reason: request.reason
            ).message
        }
        router.registerServerStreaming(
            Self.method("WatchRevocations"), request: StoreV1.WatchRevocationsRequest.self,
            response: StoreV1.Revocation.self, authenticator: contentServices
        ) { request, writer, context in
            let feed = store.feed
            try await Self.follow(store: store, context: context, from: request.since) { cursor in
                (try await feed.revocations(after: cursor), cursor)
            } send: { revocation in
                try await writer.send(revocation.message)
                return revocation.cursor
            } notice: { cursor, keysChanged in
                // A heartbeat is a revocation with an empty transaction id.
                try await writer.send(StoreV1.Revocation(cursor: cursor, keysChanged: keysChanged))
            }
        }
    }

    /// WatchEvents: the backlog after `since`, then each new event, exactly once and in order, with
    /// heartbeats when caught up and a keys_changed notice when the signing keys change.
    static func watchEvents(
        store: Store, _ request: StoreV1.WatchEventsRequest, _ writer: ServerStreamWriter<StoreV1.WatchEventsResponse>,
        _ context: ServerContext
    ) async throws {
        let feed = store.feed
        let types = try eventTypes(request.types)
        try await follow(store: store, context: context, from: request.since) { cursor in
            let (batch, through) = try await feed.events(after: cursor, types: types)
            // Events the type filter left out move the cursor too (the next heartbeat says so).
            return (batch, through)
        } send: { event in
            try await writer.send(StoreV1.WatchEventsResponse(event: event.signed, cursor: event.record.id))
            return event.record.id
        } notice: { cursor, keysChanged in
            try await writer.send(StoreV1.WatchEventsResponse(cursor: cursor, keysChanged: keysChanged))
        }
    }

    /// The loop WatchEvents and WatchRevocations share: the backlog after `cursor` from the store's feed,
    /// a batch at a time, then each new item as the feed learns of it; a notice (`keysChanged`) at once when
    /// the signing keys change, and, when caught up, a heartbeat at once and then about every
    /// ``StoreConfiguration/revocationHeartbeat``. The first heartbeat says keys_changed, so a rotation
    /// between the watcher's PublicKeys call and this stream is never missed. Ends when the server shuts
    /// down (a graceful shutdown need not wait for it); UNAUTHENTICATED once the caller's service credential
    /// is revoked; UNAVAILABLE while the feed cannot read the ledger.
    /// - Parameters:
    ///   - batch: the items after a cursor, and the cursor the read reached (at least the last item's).
    ///   - send: sends an item; answers its cursor.
    ///   - notice: sends a heartbeat or key-change notice at a cursor.
    static func follow<Item>(
        store: Store, context: ServerContext, from start: UInt64,
        batch: (UInt64) async throws -> (items: [Item], through: UInt64),
        send: (Item) async throws -> UInt64,
        notice: (_ cursor: UInt64, _ keysChanged: Bool) async throws -> Void
    ) async throws {
        let feed = store.feed
        feed.start()
        let credentialID: String? =
            if case .service(let credential)? = context.principal as? Caller { credential.id } else { nil }
        var cursor = start
        var keyGeneration: UInt64?
        var lastHeartbeat: ContinuousClock.Instant?
        let heartbeat = store.configuration.revocationHeartbeat
        while !Task.isCancelled, !context.isShuttingDown {
            if let credentialID, feed.isRevoked(credentialID: credentialID) {
                throw RPCError(.unauthenticated, "the service credential \(credentialID) was revoked")
            }
            try feed.requireCurrent()
            let generation = feed.generation
            // A key change is announced at once, even in the middle of a backlog.
            if let known = keyGeneration, feed.keyGeneration != known {
                keyGeneration = feed.keyGeneration
                try await notice(cursor, true)
            }
            let (items, through) = try await batch(cursor)
            for item in items { cursor = try await send(item) }
            cursor = max(cursor, through)
            guard items.isEmpty else { continue }
            if keyGeneration == nil || lastHeartbeat.map({ $0.duration(to: .now) >= heartbeat }) ?? true {
                try await notice(cursor, keyGeneration == nil)
                keyGeneration = keyGeneration ?? feed.keyGeneration
                lastHeartbeat = .now
            }
            try await feed.waitForNews(after: generation, timeout: heartbeat)
        }
    }

    /// A request's event types, each once; a list longer than there are types is refused (3 INVALID_ARGUMENT). A type
    /// this version does not know stays in the filter (a newer replica on the same ledger may record it).
    static func eventTypes(_ requested: [StoreV1.EventType]) throws -> [EventKind] {
        guard requested.count <= 64 else {
            throw StoreError.invalid("types lists \(requested.count) event types; there are fewer than 64")
        }
        var seen = Set<EventKind>()
        return requested.map(EventKind.init(wire:)).filter { seen.insert($0).inserted }
    }
}
