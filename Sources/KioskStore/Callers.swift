import Foundation
import KioskRPC

/// The kinds of caller the store knows. Every method declares which it
/// serves (``StoreService``, ``AdminService``); a caller of another kind is
/// refused with PERMISSION_DENIED (7) before the request is decoded.
public enum CallerRole: String, Hashable, Sendable, CaseIterable {
    /// A buyer: purchases, restores, spends, reads its own data.
    case account
    /// A content service: the revocation feed.
    case content
    /// An operator: refunds, approvals, accounts, keys.
    case admin

    /// The roles a service credential can have.
    public static let serviceRoles: [CallerRole] = [.content, .admin]
}

/// A service credential: a content service or an admin tool calling the store.
/// Only the hash of its secret is kept.
public struct ServiceCredentialRecord: Hashable, Sendable {
    /// The credential's id (`svc_…`), for listing and revoking.
    public var id: String
    /// What it may do.
    public var role: CallerRole
    /// A label for people ("content-1").
    public var name: String
    /// When it was created, ms since 1970.
    public var createdMs: Int64
    /// When it was revoked (0: in use).
    public var revokedMs: Int64

    init(row: LedgerRow) throws {
        id = try row["id"]
        // The table's CHECK allows content and admin only; anything else gets the role with no service method.
        role = CallerRole(rawValue: try row["role"]) ?? .account
        name = try row["name"]
        createdMs = try row["created_ms"]
        revokedMs = try row["revoked_ms"]
    }
}

/// Who is calling: what the store's authenticator hands a method.
public enum Caller: Sendable {
    /// A buyer's account (its bearer token).
    case account(AccountRecord)
    /// A service credential.
    case service(ServiceCredentialRecord)

    /// The caller's role.
    public var role: CallerRole {
        switch self {
        case .account: .account
        case .service(let credential): credential.role
        }
    }
}

extension Ledger {
    /// Service credentials, hashed (v3 is key retirement).

    func addServiceCredential(id: String, role: CallerRole, name: String, tokenHash: [UInt8], nowMs: Int64) throws {
        try backend.write { db in
            try db.execute(
                "INSERT INTO service_credentials (id, role, name, token_hash, created_ms) VALUES (?, ?, ?, ?, ?)", [id, role.rawValue, name, tokenHash, nowMs])
        }
    }

    /// The credential a secret's hash belongs to, unless revoked.
    func serviceCredential(tokenHash: [UInt8]) async throws -> ServiceCredentialRecord? {
        try await backend.read { db in
            try db.fetchOne("SELECT * FROM service_credentials WHERE token_hash = ? AND revoked_ms = 0", [tokenHash]).map(ServiceCredentialRecord.init)
        }
    }

    /// The ids of the revoked service credentials.
    static func revokedServiceCredentialIDs(_ db: any LedgerDatabase) throws -> Set<String> {
        Set(try db.values(String.self, "SELECT id FROM service_credentials WHERE revoked_ms > 0"))
    }

    /// Every service credential, revoked ones included, oldest first.
    public func serviceCredentials() throws -> [ServiceCredentialRecord] {
        try backend.read { db in
            try db.fetchAll("SELECT * FROM service_credentials ORDER BY created_ms, id").map(ServiceCredentialRecord.init)
        }
    }

    /// Marks a credential revoked; false when there is no such credential.
    func revokeServiceCredential(id: String, nowMs: Int64) throws -> Bool {
        try backend.write { db in
            if try db.execute("UPDATE service_credentials SET revoked_ms = ? WHERE id = ? AND revoked_ms = 0", [nowMs, id]) > 0 {
                try Self.announceChange(db)
                return true
            }
            return try db.value(Bool.self, "SELECT 1 FROM service_credentials WHERE id = ?", [id]) ?? false
        }
    }
}

extension Store {
    /// The prefix of service credentials; account tokens start with `kiosk_`.
    static let serviceCredentialPrefix = "ksvc_"

    /// Issues a service credential with `role`; returns its id and secret (shown
    /// once: the ledger keeps only the secret's hash).
    public func createServiceCredential(role: CallerRole, name: String) throws -> (id: String, secret: String) {
        guard role != .account else { throw StoreError.invalid("a service credential's role is content or admin") }
        let id = "svc_" + Self.randomHex(bytes: 8)
        let secret = Self.serviceCredentialPrefix + Self.randomHex(bytes: 32)
        try ledger.addServiceCredential(id: id, role: role, name: name.isEmpty ? role.rawValue : name, tokenHash: Self.hash(secret), nowMs: now)
        return (id, secret)
    }

    /// Revokes a service credential: its calls are refused from now on, and a
    /// revocation feed it holds open ends (16) within the feed's poll interval.
    public func revokeServiceCredential(id: String) throws {
        guard try ledger.revokeServiceCredential(id: id, nowMs: now) else { throw StoreError.notFound("no service credential \(id)") }
    }

    /// Who a bearer token belongs to: an account or a service credential.
    /// - Throws: ``StoreError`` UNAUTHENTICATED (16) for a missing or unknown token.
    public func caller(token: String?) async throws -> Caller {
        guard let token, !token.isEmpty else {
            throw StoreError.unauthenticated("missing metadata \"authorization: Bearer <token>\"")
        }
        if token.hasPrefix(Self.serviceCredentialPrefix) {
            guard let credential = try await ledger.serviceCredential(tokenHash: Self.hash(token)) else {
                throw StoreError.unauthenticated("the service credential is not valid (unknown or revoked)")
            }
            return .service(credential)
        }
        return .account(try await authenticate(token: token))
    }
}

/// Resolves `authorization: Bearer <token>` to the caller before a request is
/// decoded and refuses callers whose role the method does not serve:
/// UNAUTHENTICATED (16) for an unknown token, PERMISSION_DENIED (7) for a known
/// one of the wrong role. Handlers read the caller back from the context.
struct RoleAuthenticator: RPCAuthenticator {
    let store: Store
    let roles: Set<CallerRole>

    init(store: Store, _ roles: CallerRole...) {
        self.store = store
        self.roles = Set(roles)
    }

    func authenticate(_ context: ServerContext) async throws -> (any Sendable)? {
        let caller = try await store.caller(token: context.metadata.bearerToken)
        guard roles.contains(caller.role) else {
            let allowed = roles.map(\.rawValue).sorted().joined(separator: " or ")
            throw RPCError(.permissionDenied, "\(context.method) is for callers of role \(allowed), not \(caller.role.rawValue)")
        }
        return caller
    }

    /// The account the runtime authenticated for this call.
    static func account(_ context: ServerContext) throws -> AccountRecord {
        guard case .account(let account)? = context.principal as? Caller else {
            throw RPCError(.unauthenticated, "the call was not authenticated as an account")
        }
        return account
    }
}
