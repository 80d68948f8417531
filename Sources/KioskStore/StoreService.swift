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
        router.registerUnary(Self.method("ListProducts"), request: StoreV1.ListProductsRequest.self, response: StoreV1.ListProductsResponse.self) { request, _ in
            let (found, invalid) = store.products(ids: request.productIDs)
            return StoreV1.ListProductsResponse(products: found.map(\.message), invalidProductIDs: invalid)
        }
        router.registerUnary(Self.method("GetAccount"), request: StoreV1.GetAccountRequest.self, response: StoreV1.Account.self) { _, context in
            let account = try await store.authenticate(token: context.metadata.bearerToken)
            return StoreV1.Account(accountID: account.id, paymentsAllowed: account.paymentsAllowed, creditBalance: account.creditBalance)
        }
        router.registerUnary(Self.method("Purchase"), request: StoreV1.PurchaseRequest.self, response: StoreV1.PurchaseResponse.self) { request, context in
            let account = try await store.authenticate(token: context.metadata.bearerToken)
            return try await store.purchase(
                account: account, productID: request.productID, quantity: request.quantity, paymentMethod: request.paymentMethod,
                idempotencyKey: context.metadata["idempotency-key"])
        }
        router.registerUnary(Self.method("Unfinished"), request: StoreV1.UnfinishedRequest.self, response: StoreV1.UnfinishedResponse.self) { _, context in
            let account = try await store.authenticate(token: context.metadata.bearerToken)
            return StoreV1.UnfinishedResponse(transactions: try await store.ledger.unfinished(accountID: account.id).map(\.message))
        }
        router.registerUnary(Self.method("Finish"), request: StoreV1.FinishRequest.self, response: StoreV1.FinishResponse.self) { request, context in
            let account = try await store.authenticate(token: context.metadata.bearerToken)
            return StoreV1.FinishResponse(alreadyFinished: try await store.finish(account: account, transactionID: request.transactionID))
        }
        router.registerServerStreaming(Self.method("Restore"), request: StoreV1.RestoreRequest.self, response: StoreV1.Transaction.self) { _, writer, context in
            let account = try await store.authenticate(token: context.metadata.bearerToken)
            for record in try await store.ledger.restorable(accountID: account.id) {
                try await writer.send(record.message)
            }
        }
        router.registerUnary(Self.method("SpendCredits"), request: StoreV1.SpendCreditsRequest.self, response: StoreV1.SpendCreditsResponse.self) { request, context in
            let account = try await store.authenticate(token: context.metadata.bearerToken)
            return try await store.spendCredits(account: account, amount: request.amount, idempotencyKey: context.metadata["idempotency-key"])
        }
        router.registerUnary(Self.method("VerifyReceipt"), request: StoreV1.VerifyReceiptRequest.self, response: StoreV1.VerifyReceiptResponse.self) { request, context in
            _ = try await store.authenticate(token: context.metadata.bearerToken)
            return try await store.verifyReceipt(request.signedReceipt)
        }
        router.registerUnary(Self.method("PublicKeys"), request: StoreV1.PublicKeysRequest.self, response: StoreV1.PublicKeysResponse.self) { _, context in
            _ = try await store.authenticate(token: context.metadata.bearerToken)
            let keys = try store.publicKeys().map {
                StoreV1.PublicKey(keyID: $0.id, ed25519PublicKey: $0.rawRepresentation, notBeforeMs: $0.notBeforeMs)
            }
            return StoreV1.PublicKeysResponse(keys: keys)
        }
        router.registerServerStreaming(Self.method("WatchRevocations"), request: StoreV1.WatchRevocationsRequest.self, response: StoreV1.Revocation.self) { request, writer, context in
            _ = try await store.authenticate(token: context.metadata.bearerToken)
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
