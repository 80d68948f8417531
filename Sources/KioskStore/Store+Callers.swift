import Foundation
import KioskRPC

extension Store {
    /// The prefix of service credentials; account tokens start with `kiosk_`.
    static let serviceCredentialPrefix = "ksvc_"

    /// Issues a service credential with `role`; returns its id and secret (shown
    /// once: the ledger keeps only the secret's hash).
    public func createServiceCredential(role: CallerRole, name: String) throws -> (id: String, secret: String) {
        guard role != .account else { throw StoreError.invalid("a service credential's role is content or admin") }
        let id = "svc_" + Self.randomHex(bytes: 8)
        let secret = Self.serviceCredentialPrefix + Self.randomHex(bytes: 32)
        try ledger.addServiceCredential(
            ServiceCredentialRecord(id: id, role: role, name: name.isEmpty ? role.rawValue : name, createdMs: now),
            tokenHash: Self.hash(secret))
        return (id, secret)
    }

    /// Revokes a service credential: its calls are refused from now on, and a
    /// revocation feed it holds open ends (16) within the feed's poll interval.
    public func revokeServiceCredential(id: String) throws {
        guard try ledger.revokeServiceCredential(id: id, nowMs: now) else {
            throw StoreError.notFound("no service credential \(id)")
        }
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
