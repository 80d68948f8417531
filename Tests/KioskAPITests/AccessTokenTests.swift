import Crypto
import Foundation
import KioskAPI
import KioskSigning
import KioskWire
import Testing

/// Access tokens: issued by the store, checked offline by the content service.
@Suite struct AccessTokenTests {
    let key = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: 1_800_000_000_000)
    let now: Int64 = 1_800_000_100_000

    func verifier(
        keys: [ReceiptPublicKey]? = nil, environments: Set<ReceiptV1.Environment> = [.sandbox]
    ) -> AccessTokenVerifier {
        AccessTokenVerifier(
            keys: keys ?? [key.publicKey], audience: AccessToken.contentAudience, environments: environments)
    }

    func issue(
        audience: String = AccessToken.contentAudience, environment: ReceiptV1.Environment = .sandbox,
        at issuedMs: Int64? = nil,
        lifetimeMs: Int64 = 600_000, signer: ReceiptSigningKey? = nil
    ) throws -> String {
        try AccessToken.issue(
            accountID: "acct_1", audience: audience, environment: environment, nowMs: issuedMs ?? now,
            lifetimeMs: lifetimeMs, key: signer ?? key
        ).token
    }

    func refusal(_ token: String, _ verifier: AccessTokenVerifier? = nil, at nowMs: Int64? = nil) -> AccessTokenRefusal?
    {
        do {
            _ = try (verifier ?? self.verifier()).verify(token, nowMs: nowMs ?? now)
            return nil
        } catch let refusal as AccessTokenRefusal {
            return refusal
        } catch {
            Issue.record("unexpected \(error)")
            return nil
        }
    }

    @Test func aFreshTokenNamesItsAccountUntilItExpires() throws {
        let token = try issue()
        #expect(token.hasPrefix("kat1."))
        #expect(!token.contains("+") && !token.contains("/") && !token.contains("="), "base64url without padding")
        #expect(try verifier().verify(token, nowMs: now).accountID == "acct_1")
        #expect(try verifier().verify(token, nowMs: now + 599_999).accountID == "acct_1")
        #expect(refusal(token, at: now + 600_000) == .expired)
        // Issued in the future beyond the skew allowed.
        #expect(refusal(try issue(at: now + 120_000)) == .notYetValid)
    }

    @Test func everyForgeryIsRefusedWithItsReason() throws {
        let token = try issue()
        #expect(refusal("kiosk_0123456789abcdef") == .malformed)
        #expect(refusal("kat1.!!!not base64!!!") == .malformed)
        #expect(refusal("kat1." + String(repeating: "A", count: 2000)) == .malformed)
        #expect(refusal(try issue(audience: "store")) == .wrongAudience("store"))
        #expect(refusal(try issue(environment: .production)) == .wrongEnvironment(.production))
        let stranger = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: 1_800_000_000_000)
        #expect(refusal(try issue(signer: stranger)) == .unknownKey(stranger.id))

        // Same key id, another key's signature: the signature check catches it.
        let forged = try issue(signer: stranger)
        var signed = try ReceiptV1.SignedAccessToken(serializedBytes: Self.decode(forged))
        var payload = try ReceiptV1.AccessTokenPayload(serializedBytes: signed.payload)
        payload.keyID = key.id
        signed.payload = payload.serializedBytes()
        signed.keyID = key.id
        #expect(refusal(Self.encode(signed)) == .badSignature)

        // A genuine token with its account changed.
        var tampered = try ReceiptV1.SignedAccessToken(serializedBytes: Self.decode(token))
        var claims = try ReceiptV1.AccessTokenPayload(serializedBytes: tampered.payload)
        claims.accountID = "acct_2"
        tampered.payload = claims.serializedBytes()
        #expect(refusal(Self.encode(tampered)) == .badSignature)

        // A receipt signature is never a token signature (different prefixes).
        let receipt = try key.sign(
            ReceiptV1.ReceiptPayload(transactionID: "tx", accountID: "acct_1", environment: .sandbox))
        let lookalike = ReceiptV1.SignedAccessToken(
            payload: ReceiptV1.AccessTokenPayload(
                accountID: "acct_1", audience: "content", issuedMs: now, expiresMs: now + 1000,
                keyID: key.id, environment: .sandbox
            ).serializedBytes(),
            signature: receipt.signature, keyID: key.id)
        #expect(refusal(Self.encode(lookalike)) == .badSignature)
    }

    @Test func aRetiredKeysTokensIssuedAfterItsRetirementAreRefused() throws {
        var retired = key.publicKey
        retired.notAfterMs = now - 1
        #expect(refusal(try issue(), verifier(keys: [retired])) == .unknownKey(key.id))
        #expect(try verifier(keys: [retired]).verify(try issue(at: now - 10), nowMs: now).accountID == "acct_1")
    }

    @Test func aProductionServiceAcceptingSandboxTakesBoth() throws {
        let both = verifier(environments: [.production, .sandbox])
        #expect(try both.verify(try issue(environment: .sandbox), nowMs: now).accountID == "acct_1")
        #expect(try both.verify(try issue(environment: .production), nowMs: now).accountID == "acct_1")
        #expect(
            refusal(try issue(environment: .environmentUnspecified), both) == .wrongEnvironment(.environmentUnspecified)
        )
    }

    static func decode(_ token: String) -> [UInt8] {
        AccessToken.decode(token)?.serializedBytes() ?? []
    }

    static func encode(_ signed: ReceiptV1.SignedAccessToken) -> String { AccessToken.encode(signed) }
}
