import Crypto
import Foundation
import KioskAPI
import KioskWire

/// The bytes signed for an access token: this prefix, then the encoded
/// payload. It keeps a token signature from ever being a receipt's, and back.
public let accessTokenSignaturePrefix: [UInt8] = Array("KIOSK-ACCESS-TOKEN-V1\n".utf8)

/// Short-lived access tokens: the store signs one for an account and one
/// audience (the content service), and that service checks it offline with the
/// store's public keys, so an account's long-lived bearer token never leaves
/// the store's hands and no token costs the store a call.
///
/// On the wire: `authorization: Bearer kat1.<base64url(SignedAccessToken)>`.
public enum AccessToken {
    /// The text before the encoded token.
    public static let scheme = "kat1."
    /// The audience of the content service.
    public static let contentAudience = "content"
    /// The longest token accepted, in characters: a token is about 200; this
    /// bounds what a bad one costs to decode.
    public static let maximumLength = 1024

    /// Signs a token for `accountID` and `audience`, valid from `nowMs` for `lifetimeMs`.
    public static func issue(
        accountID: String, audience: String, environment: ReceiptV1.Environment, nowMs: Int64, lifetimeMs: Int64,
        key: ReceiptSigningKey
    ) throws -> (token: String, expiresMs: Int64) {
        let payload = ReceiptV1.AccessTokenPayload(
            accountID: accountID, audience: audience, issuedMs: nowMs, expiresMs: nowMs + lifetimeMs, keyID: key.id,
            environment: environment)
        let bytes = payload.serializedBytes()
        let signature = try key.privateKey.signature(for: accessTokenSignaturePrefix + bytes)
        let signed = ReceiptV1.SignedAccessToken(payload: bytes, signature: Array(signature), keyID: key.id)
        return (encode(signed), payload.expiresMs)
    }

    /// The token as it travels: `kat1.` + base64url of the encoded signed token, no padding.
    public static func encode(_ signed: ReceiptV1.SignedAccessToken) -> String {
        scheme + base64URL(signed.serializedBytes())
    }

    /// The signed token inside `token`, if it has the form of one (nothing is verified).
    public static func decode(_ token: String) -> ReceiptV1.SignedAccessToken? {
        guard token.count <= maximumLength, looksLikeAccessToken(token),
            let bytes = fromBase64URL(token.dropFirst(scheme.count))
        else { return nil }
        return try? ReceiptV1.SignedAccessToken(serializedBytes: bytes)
    }

    /// True when `token` has the form of an access token (not an account's bearer token).
    public static func looksLikeAccessToken(_ token: String) -> Bool { token.hasPrefix(scheme) }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func fromBase64URL(_ text: Substring) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64).map(Array.init)
    }
}

/// Why an access token was refused.
public enum AccessTokenRefusal: Error, Hashable, Sendable, CustomStringConvertible {
    /// Not `kat1.` followed by a decodable signed token.
    case malformed
    /// Signed by a key the verifier does not know, or outside the key's validity window.
    case unknownKey(String)
    /// The signature does not verify.
    case badSignature
    /// For another service.
    case wrongAudience(String)
    /// From a store of the other environment.
    case wrongEnvironment(ReceiptV1.Environment)
    /// Past its expiry.
    case expired
    /// Issued later than now by more than the clock skew allowed.
    case notYetValid

    public var description: String {
        switch self {
        case .malformed: "the access token is malformed"
        case .unknownKey(let id):
            "the access token is signed by key \(id.isEmpty ? "(none)" : id), which this service does not accept"
        case .badSignature: "the access token's signature does not verify"
        case .wrongAudience(let audience):
            "the access token is for \(audience.isEmpty ? "no service" : "\"\(audience)\""), not this service"
        case .wrongEnvironment(let environment): "the access token is from a \(environment.name) store"
        case .expired: "the access token has expired: ask the store for a new one"
        case .notYetValid: "the access token is issued in the future: the store's clock and this service's disagree"
        }
    }
}

/// Checks access tokens offline against the store's public keys. Cheap
/// refusals come first: a token that is malformed, names an unknown key or has
/// expired costs no signature check; any other costs exactly one.
public struct AccessTokenVerifier: Sendable {
    private let keys: [String: (key: Curve25519.Signing.PublicKey, window: ReceiptPublicKey)]
    /// The audience tokens must name.
    public let audience: String
    /// The environments whose stores' tokens are accepted.
    public let environments: Set<ReceiptV1.Environment>
    /// How far in the future an issue time may lie (clocks of two machines differ).
    public let clockSkewMs: Int64

    /// Creates a verifier. Keys that are not valid Ed25519 public keys are skipped.
    public init(
        keys: [ReceiptPublicKey], audience: String, environments: Set<ReceiptV1.Environment>,
        clockSkewMs: Int64 = 60_000
    ) {
        var byID: [String: (Curve25519.Signing.PublicKey, ReceiptPublicKey)] = [:]
        for key in keys {
            if let publicKey = try? Curve25519.Signing.PublicKey(rawRepresentation: key.rawRepresentation) {
                byID[key.id] = (publicKey, key)
            }
        }
        self.keys = byID
        self.audience = audience
        self.environments = environments
        self.clockSkewMs = clockSkewMs
    }

    /// The token's payload when it is valid at `nowMs`.
    /// - Throws: ``AccessTokenRefusal``.
    public func verify(_ token: String, nowMs: Int64) throws -> ReceiptV1.AccessTokenPayload {
        guard let signed = AccessToken.decode(token), signed.signature.count == 64, !signed.payload.isEmpty
        else { throw AccessTokenRefusal.malformed }
        guard let entry = keys[signed.keyID] else { throw AccessTokenRefusal.unknownKey(signed.keyID) }
        guard let payload = try? ReceiptV1.AccessTokenPayload(serializedBytes: signed.payload),
            payload.keyID == signed.keyID,
            !payload.accountID.isEmpty
        else { throw AccessTokenRefusal.malformed }
        // Refusals read from the payload before its signature is checked are safe
        // (a forger gains nothing by being refused) and spare the signature check.
        guard payload.audience == audience else { throw AccessTokenRefusal.wrongAudience(payload.audience) }
        guard environments.contains(payload.environment) else {
            throw AccessTokenRefusal.wrongEnvironment(payload.environment)
        }
        guard payload.expiresMs > nowMs else { throw AccessTokenRefusal.expired }
        guard payload.issuedMs <= nowMs + clockSkewMs else { throw AccessTokenRefusal.notYetValid }
        guard entry.window.isValid(atMs: payload.issuedMs) else { throw AccessTokenRefusal.unknownKey(signed.keyID) }
        guard entry.key.isValidSignature(signed.signature, for: accessTokenSignaturePrefix + signed.payload) else {
            throw AccessTokenRefusal.badSignature
        }
        return payload
    }
}
