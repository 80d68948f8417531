import KioskAPI
import KioskRPC
import KioskWire

/// The store's operator RPCs, `kiosk.store.v1.Admin`: refunds and refund requests, approvals,
/// accounts, keys. Admin callers only (a service credential of role `admin`,
/// `kiosk-store service create --role admin`); any other caller is refused with
/// PERMISSION_DENIED (7) before the request is decoded. The same operations are
/// `kiosk-store` commands on the data dir.
public struct AdminService: RPCService {
    /// The service name.
    public static let name = "kiosk.store.v1.Admin"
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
        let admins = RoleAuthenticator(store: store, .admin)
        // Every handler acts as its caller (``Store/acting(as:_:)``): what it records names the admin credential.
        func register<Request: WireMessage, Response: WireMessage>(
            _ name: String, _ request: Request.Type, _ response: Response.Type,
            _ handler: @escaping @Sendable (Request) async throws -> Response
        ) {
            router.registerUnary(Self.method(name), request: request, response: response, authenticator: admins) {
                request, context in
                guard case .service(let credential)? = context.principal as? Caller else {
                    throw RPCError(.unauthenticated, "the call was not authenticated as an admin credential")
                }
                return try await store.acting(
                    as: Store.actorName(via: "admin-rpc", credentialID: credential.id, name: credential.name)
                ) {
                    try await handler(request)
                }
            }
        }
        register("Refund", StoreV1.RefundRequest.self, StoreV1.Revocation.self) { request in
            try request.checkLimits()
            guard !request.transactionID.isEmpty, !request.reason.isEmpty else {
                throw StoreError.invalid("transaction_id and reason are required")
            }
            return try await store.refund(transactionID: request.transactionID, reason: request.reason).message
        }
        register("ListRefundRequests", StoreV1.ListRefundRequestsRequest.self, StoreV1.ListRefundRequestsResponse.self)
        { request in
            try request.checkLimits()
            guard
                let state = request.state == .unspecified
                    ? .pending : RefundRequest.State(rawValue: request.state.rawValue)
            else {
                throw StoreError.invalid("state \(request.state.rawValue) is not PENDING, GRANTED or DENIED")
            }
            let page = try await store.ledger.offload {
                try store.ledger.refundRequests(state: state, limit: request.limit, pageToken: request.pageToken)
            }
            return StoreV1.ListRefundRequestsResponse(
                requests: page.requests.map(\.message), nextPageToken: page.nextPageToken, hasMore: page.hasMore)
        }
        register("DenyRefund", StoreV1.DenyRefundRequest.self, StoreV1.RefundRequestStatus.self) { request in
            try request.checkLimits()
            return try await store.denyRefund(transactionID: request.transactionID, reason: request.reason).message
        }
        register("Approve", StoreV1.ApproveRequest.self, StoreV1.Transaction.self) { request in
            try request.checkLimits()
            guard !request.transactionID.isEmpty else { throw StoreError.invalid("transaction_id is required") }
            return try await store.approve(transactionID: request.transactionID).message
        }
        register("CreateAccount", StoreV1.CreateAccountRequest.self, StoreV1.CreateAccountResponse.self) { request in
            let (id, token) = try await store.ledger.offload {
                try store.createAccount(paymentsAllowed: !request.paymentsDisabled, storefront: request.storefront)
            }
            return StoreV1.CreateAccountResponse(accountID: id, token: token)
        }
        register("RotateKey", StoreV1.RotateKeyRequest.self, StoreV1.PublicKey.self) { _ in
            try await store.ledger.offload { try store.rotateKeys() }.message
        }
        register("RetireKey", StoreV1.RetireKeyRequest.self, StoreV1.PublicKey.self) { request in
            try request.checkLimits()
            guard !request.keyID.isEmpty else { throw StoreError.invalid("key_id is required") }
            return try await store.ledger.offload {
                try store.retireKey(id: request.keyID, atMs: request.atMs == 0 ? nil : request.atMs)
            }.message
        }
        register("ExtendSubscription", StoreV1.ExtendSubscriptionRequest.self, StoreV1.SubscriptionStatus.self) {
            request in
            try request.checkLimits()
            let row = try await store.extendSubscription(
                originalID: request.originalTransactionID, days: Int(request.days), reason: request.reason)
            return try await store.ledger.offload { try store.statusMessage(row) }
        }
        register("ExtendSubscriptions", StoreV1.ExtendSubscriptionsRequest.self, StoreV1.ExtensionJob.self) {
            request in
            try request.checkLimits()
            let job = try await store.startExtensionJob(
                productID: request.productID, days: Int(request.days), reason: request.reason, jobID: request.jobID)
            // It runs on in the store's background (and in the renewal pass of any store, should this one stop).
            Task { try? await store.runExtensionJob(id: job.id) }
            return try await store.extensionJobMessage(job)
        }
        register("GetExtensionJob", StoreV1.GetExtensionJobRequest.self, StoreV1.ExtensionJob.self) { request in
            try request.checkLimits()
            guard let job = try await store.ledger.extensionJob(id: request.jobID) else {
                throw StoreError.notFound("no extension job \(request.jobID)")
            }
            return try await store.extensionJobMessage(job)
        }
        register("CreateOfferCodes", StoreV1.CreateOfferCodesRequest.self, StoreV1.CreateOfferCodesResponse.self) {
            request in
            try request.checkLimits()
            let made = try await store.createOfferCodes(
                batchID: request.batchID, productID: request.productID, count: Int(request.count),
                customCode: request.customCode.isEmpty ? nil : request.customCode, limit: Int(request.limit),
                price: request.price.isEmpty ? "0" : request.price,
                period: request.period.isEmpty ? nil : request.period, quantity: max(1, request.quantity),
                expiresMs: request.expiresMs)
            return StoreV1.CreateOfferCodesResponse(batch: made.batch.message, codes: made.codes)
        }
        register(
            "ListOfferCodeBatches", StoreV1.ListOfferCodeBatchesRequest.self, StoreV1.ListOfferCodeBatchesResponse.self
        ) { _ in
            StoreV1.ListOfferCodeBatchesResponse(batches: try await store.ledger.offerCodeBatches().map(\.message))
        }
        register("RevokeOfferCodes", StoreV1.RevokeOfferCodesRequest.self, StoreV1.OfferCodeBatch.self) { request in
            try request.checkLimits()
            try await store.revokeOfferCodes(batchID: request.batchID)
            guard let batch = try await store.ledger.offerCodeBatch(id: request.batchID) else {
                throw StoreError.notFound("no offer code batch \(request.batchID)")
            }
            return batch.message
        }
        register("GrantEntitlement", StoreV1.GrantEntitlementRequest.self, StoreV1.Transaction.self) { request in
            try request.checkLimits()
            return try await store.grantEntitlement(
                accountID: request.accountID, entitlementID: request.entitlementID, days: Int(request.days),
                reason: request.reason
            ).message
        }
    }
}
