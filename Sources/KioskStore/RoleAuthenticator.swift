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
        let token = context.metadata.bearerToken
        let caller: Caller
        if let token, !token.isEmpty, !token.hasPrefix(Store.serviceCredentialPrefix) {
            // An account's token: its account is read once a process (``Store/authenticatedAccount(token:)``).
            caller = .account(try await store.authenticatedAccount(token: token))
        } else {
            caller = try await store.caller(token: token)
        }
        guard roles.contains(caller.role) else {
            let allowed = roles.map(\.rawValue).sorted().joined(separator: " or ")
            throw RPCError(
                .permissionDenied, "\(context.method) is for callers of role \(allowed), not \(caller.role.rawValue)")
        }
        return caller
    }

    /// The account the runtime authenticated for this call. Its id is what a handler acts on; its other fields are
    /// as this process first read them (``Store/authenticatedAccount(token:)``): read the account for their values now.
    static func account(_ context: ServerContext) throws -> AccountRecord {
        guard case .account(let account)? = context.principal as? Caller else {
            throw RPCError(.unauthenticated, "the call was not authenticated as an account")
        }
        return account
    }
}
