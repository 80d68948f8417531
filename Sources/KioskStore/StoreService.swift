import KioskAPI
import KioskRPC
import KioskWire

/// The store's RPC service, `kiosk.store.v1.Store`.
///
/// Every method but `ListProducts` needs `authorization: Bearer <token>`;
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

    static func method(_ name: String) -> String { "/\(Self.name)/\(name)" }

    public func register(in router: inout RPCRouter) {
        let store = self.store
        // Every method but ListProducts: the bearer token is checked from HEADERS, before the request is decoded.
        let auth = StoreAuthenticator(store: store)
        router.registerUnary(Self.method("ListProducts"), request: StoreV1.ListProductsRequest.self, response: StoreV1.ListProductsResponse.self) { request, _ in
            let (found, invalid) = store.products(ids: request.productIDs)
            return StoreV1.ListProductsResponse(products: found.map(\.message), invalidProductIDs: invalid)
        }
        router.registerUnary(Self.method("GetAccount"), request: StoreV1.GetAccountRequest.self, response: StoreV1.Account.self, authenticator: auth) { _, context in
            let account = try StoreAuthenticator.account(context)
            return StoreV1.Account(accountID: account.id, paymentsAllowed: account.paymentsAllowed, creditBalance: account.creditBalance)
        }
        router.registerUnary(Self.method("Purchase"), request: StoreV1.PurchaseRequest.self, response: StoreV1.PurchaseResponse.self, authenticator: auth) { request, context in
            let account = try StoreAuthenticator.account(context)
            return try await store.purchase(
                account: account, productID: request.productID, quantity: request.quantity, paymentMethod: request.paymentMethod,
                idempotencyKey: context.metadata["idempotency-key"]).message
        }
        router.registerUnary(Self.method("Unfinished"), request: StoreV1.UnfinishedRequest.self, response: StoreV1.UnfinishedResponse.self, authenticator: auth) { request, context in
            let account = try StoreAuthenticator.account(context)
            let page = try await store.ledger.page(.unfinished, accountID: account.id, pageSize: Ledger.pageSize(request.pageSize), pageToken: request.pageToken)
            return StoreV1.UnfinishedResponse(transactions: page.transactions.map(\.message), nextPageToken: page.nextPageToken, hasMore: page.hasMore)
        }
        router.registerUnary(Self.method("Finish"), request: StoreV1.FinishRequest.self, response: StoreV1.FinishResponse.self, authenticator: auth) { request, context in
            let account = try StoreAuthenticator.account(context)
            return StoreV1.FinishResponse(alreadyFinished: try await store.finish(account: account, transactionID: request.transactionID))
        }
        router.registerServerStreaming(Self.method("Restore"), request: StoreV1.RestoreRequest.self, response: StoreV1.Transaction.self, authenticator: auth) { request, writer, context in
            let account = try StoreAuthenticator.account(context)
            // Read a page at a time: memory stays bounded however many transactions the account has.
            var remaining = request.pageSize == 0 ? Int.max : Int(request.pageSize)
            var token = request.pageToken
            while remaining > 0 {
                let page = try await store.ledger.page(.restorable, accountID: account.id, pageSize: min(remaining, Ledger.maxPageSize), pageToken: token)
                for record in page.transactions { try await writer.send(record.message) }
                remaining -= page.transactions.count
                guard page.hasMore else { break }
                token = page.nextPageToken
            }
        }
        router.registerUnary(Self.method("History"), request: StoreV1.HistoryRequest.self, response: StoreV1.HistoryResponse.self, authenticator: auth) { request, context in
            let account = try StoreAuthenticator.account(context)
            let page = try await store.ledger.page(.history, accountID: account.id, pageSize: Ledger.pageSize(request.pageSize), pageToken: request.pageToken)
            return StoreV1.HistoryResponse(transactions: page.transactions.map(\.message), nextPageToken: page.nextPageToken, hasMore: page.hasMore)
        }
        router.registerUnary(Self.method("SpendCredits"), request: StoreV1.SpendCreditsRequest.self, response: StoreV1.SpendCreditsResponse.self, authenticator: auth) { request, context in
            let account = try StoreAuthenticator.account(context)
            return try await store.spendCredits(account: account, amount: request.amount, idempotencyKey: context.metadata["idempotency-key"]).message
        }
        router.registerUnary(Self.method("VerifyReceipt"), request: StoreV1.VerifyReceiptRequest.self, response: StoreV1.VerifyReceiptResponse.self, authenticator: auth) { request, _ in
            try await store.verifyReceipt(request.signedReceipt).message
        }
        router.registerUnary(Self.method("PublicKeys"), request: StoreV1.PublicKeysRequest.self, response: StoreV1.PublicKeysResponse.self, authenticator: auth) { _, _ in
            let keys = try store.publicKeys().map {
                StoreV1.PublicKey(keyID: $0.id, ed25519PublicKey: $0.rawRepresentation, notBeforeMs: $0.notBeforeMs)
            }
            return StoreV1.PublicKeysResponse(keys: keys)
        }
        router.registerServerStreaming(Self.method("WatchRevocations"), request: StoreV1.WatchRevocationsRequest.self, response: StoreV1.Revocation.self, authenticator: auth) { request, writer, context in
            var cursor = request.since
            var lastHeartbeat: ContinuousClock.Instant?
            let heartbeat = store.configuration.revocationHeartbeat
            // Ends when the server shuts down, so a graceful shutdown need not wait for it.
            while !Task.isCancelled, !context.isShuttingDown {
                let generation = store.revocationGeneration
                let batch = try await store.ledger.revocations(after: cursor)
                for revocation in batch {
                    try await writer.send(revocation.message)
                    cursor = revocation.cursor
                }
                guard batch.isEmpty else { continue }
                // Caught up: say so (an empty transaction id), at once and then about every `heartbeat`.
                if lastHeartbeat.map({ $0.duration(to: .now) >= heartbeat }) ?? true {
                    try await writer.send(StoreV1.Revocation(cursor: cursor))
                    lastHeartbeat = .now
                }
                try await store.waitForRevocations(after: generation)
            }
        }
    }
}

/// The store's accounts: resolves `authorization: Bearer <token>` to the
/// account before a request is decoded; handlers read it back from the context.
struct StoreAuthenticator: RPCAuthenticator {
    let store: Store

    func authenticate(_ context: ServerContext) async throws -> (any Sendable)? {
        try await store.authenticate(token: context.metadata.bearerToken)
    }

    /// The account the runtime authenticated for this call.
    static func account(_ context: ServerContext) throws -> AccountRecord {
        guard let account = context.principal as? AccountRecord else {
            throw RPCError(.unauthenticated, "the call was not authenticated")
        }
        return account
    }
}
