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
        router.registerUnary(
            Self.method("Refund"), request: StoreV1.RefundRequest.self, response: StoreV1.Revocation.self,
            authenticator: admins
        ) { request, _ in
            try request.checkLimits()
            guard !request.transactionID.isEmpty, !request.reason.isEmpty else {
                throw StoreError.invalid("transaction_id and reason are required")
            }
            return try await store.refund(transactionID: request.transactionID, reason: request.reason).message
        }
        router.registerUnary(
            Self.method("ListRefundRequests"), request: StoreV1.ListRefundRequestsRequest.self,
            response: StoreV1.ListRefundRequestsResponse.self, authenticator: admins
        ) { request, _ in
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
        router.registerUnary(
            Self.method("DenyRefund"), request: StoreV1.DenyRefundRequest.self,
            response: StoreV1.RefundRequestStatus.self, authenticator: admins
        ) { request, _ in
            try request.checkLimits()
            return try await store.denyRefund(transactionID: request.transactionID, reason: request.reason).message
        }
        router.registerUnary(
            Self.method("Approve"), request: StoreV1.ApproveRequest.self, response: StoreV1.Transaction.self,
            authenticator: admins
        ) { request, _ in
            try request.checkLimits()
            guard !request.transactionID.isEmpty else { throw StoreError.invalid("transaction_id is required") }
            return try await store.approve(transactionID: request.transactionID).message
        }
        router.registerUnary(
            Self.method("CreateAccount"), request: StoreV1.CreateAccountRequest.self,
            response: StoreV1.CreateAccountResponse.self, authenticator: admins
        ) { request, _ in
            let (id, token) = try await store.ledger.offload {
                try store.createAccount(paymentsAllowed: !request.paymentsDisabled)
            }
            return StoreV1.CreateAccountResponse(accountID: id, token: token)
        }
        router.registerUnary(
            Self.method("RotateKey"), request: StoreV1.RotateKeyRequest.self, response: StoreV1.PublicKey.self,
            authenticator: admins
        ) { _, _ in
            try await store.ledger.offload { try store.rotateKeys() }.message
        }
        router.registerUnary(
            Self.method("RetireKey"), request: StoreV1.RetireKeyRequest.self, response: StoreV1.PublicKey.self,
            authenticator: admins
        ) { request, _ in
            try request.checkLimits()
            guard !request.keyID.isEmpty else { throw StoreError.invalid("key_id is required") }
            return try await store.ledger.offload {
                try store.retireKey(id: request.keyID, atMs: request.atMs == 0 ? nil : request.atMs)
            }.message
        }
    }
}
