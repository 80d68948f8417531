import KioskRPC

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
            throw RPCError(
                .permissionDenied, "\(context.method) is for callers of role \(allowed), not \(caller.role.rawValue)")
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
