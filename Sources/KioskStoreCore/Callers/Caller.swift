/// Who calls the store: buyers' accounts and service credentials, and the roles they have.

/// The kinds of caller the store knows. Every RPC method declares which it
/// serves; a caller of another kind is refused with PERMISSION_DENIED (7)
/// before the request is decoded.
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

    public init(id: String, role: CallerRole, name: String, createdMs: Int64, revokedMs: Int64 = 0) {
        self.id = id
        self.role = role
        self.name = name
        self.createdMs = createdMs
        self.revokedMs = revokedMs
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
