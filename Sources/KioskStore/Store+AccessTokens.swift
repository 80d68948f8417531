import KioskAPI
import KioskSigning

extension Store {
    /// How long a new signing key is published before it signs access tokens:
    /// content services learn it from the revocation feed within that time.
    static let accessTokenKeySettleMs: Int64 = 5_000

    /// Signs a short-lived access token for `account` and `audience` (only
    /// `content`, which an empty audience means), which that service verifies offline.
    /// - Throws: ``StoreError`` INVALID_ARGUMENT for another audience.
    public func issueAccessToken(account: AccountRecord, audience: String) throws -> (token: String, expiresMs: Int64) {
        let audience = audience.isEmpty ? AccessToken.contentAudience : audience
        guard audience == AccessToken.contentAudience else {
            throw StoreError.invalid("unknown audience \(audience.debugDescription): access tokens are for \"content\"")
        }
        let nowMs = now
        let key = try keys.accessTokenKey(nowMs: nowMs, settle: Self.accessTokenKeySettleMs)
        return try AccessToken.issue(
            accountID: account.id, audience: audience, environment: configuration.environment.wire, nowMs: nowMs,
            lifetimeMs: configuration.accessTokenLifetime.wholeMilliseconds, key: key)
    }
}
