import Crypto
import KioskWire

/// The outcome of checking a receipt.
public struct ReceiptCheck: Hashable, Sendable {
    /// The verification status.
    public var status: ReceiptStatus
    /// A readable reason.
    public var message: String
    /// The decoded payload, when the receipt could be decoded.
    public var payload: ReceiptV1.ReceiptPayload?

    /// Creates an outcome.
    public init(status: ReceiptStatus, message: String, payload: ReceiptV1.ReceiptPayload? = nil) {
        self.status = status
        self.message = message
        self.payload = payload
    }
}

/// Verifies signed receipts offline against a set of public keys.
///
/// The checks run in an order that makes every tampering visible as such:
/// 1. the envelope must decode, with a 64-byte signature and a key id (else 21002);
/// 2. a known key must verify the signature over the exact payload bytes
///    (else 21003) — before the payload is trusted for anything;
/// 3. the payload must decode and name the same key (else 21002);
/// 4. its environment must be the verifier's (21007 / 21008);
/// 5. a subscription must not have expired (21006).
///
/// A receipt signed by an unknown key whose payload says it is from the other
/// environment gets 21007 / 21008, as Apple's production server does for
/// sandbox receipts it cannot verify itself.
public struct ReceiptVerifier: Sendable {
    private let keys: [String: Curve25519.Signing.PublicKey]
    /// The environment receipts must be from.
    public let environment: ReceiptV1.Environment
    /// A production verifier that also accepts sandbox receipts.
    public let acceptSandbox: Bool

    /// Creates a verifier. Keys that are not valid Ed25519 public keys are skipped.
    public init(keys: [ReceiptPublicKey], environment: ReceiptV1.Environment, acceptSandbox: Bool = false) {
        var byID: [String: Curve25519.Signing.PublicKey] = [:]
        for key in keys {
            if let publicKey = try? Curve25519.Signing.PublicKey(rawRepresentation: key.rawRepresentation) {
                byID[key.id] = publicKey
            }
        }
        self.keys = byID
        self.environment = environment
        self.acceptSandbox = acceptSandbox
    }

    /// True when `keyID` is one of the verifier's keys.
    public func knows(keyID: String) -> Bool { keys[keyID] != nil }

    /// Checks an encoded `SignedReceipt`.
    /// - Parameter nowMs: the current time, for subscription expiry.
    public func verify(_ receipt: [UInt8], nowMs: Int64) -> ReceiptCheck {
        guard let signed = try? ReceiptV1.SignedReceipt(serializedBytes: receipt) else {
            return ReceiptCheck(status: .malformed, message: "receipt is not a signed receipt (\(receipt.count) bytes)")
        }
        return verify(signed, nowMs: nowMs)
    }

    /// Checks a decoded `SignedReceipt`.
    public func verify(_ signed: ReceiptV1.SignedReceipt, nowMs: Int64) -> ReceiptCheck {
        guard !signed.payload.isEmpty, signed.signature.count == 64, !signed.keyID.isEmpty else {
            return ReceiptCheck(status: .malformed, message: "receipt lacks a payload, a 64-byte signature or a key id")
        }
        guard let key = keys[signed.keyID] else {
            if let payload = try? ReceiptV1.ReceiptPayload(serializedBytes: signed.payload),
               let status = environmentMismatch(payload.environment) {
                return ReceiptCheck(status: status, message: mismatchMessage(status), payload: payload)
            }
            return ReceiptCheck(status: .notAuthentic, message: "receipt is signed by unknown key \(signed.keyID)")
        }
        guard key.isValidSignature(signed.signature, for: receiptSignaturePrefix + signed.payload) else {
            return ReceiptCheck(status: .notAuthentic, message: "receipt signature does not verify")
        }
        guard let payload = try? ReceiptV1.ReceiptPayload(serializedBytes: signed.payload), payload.keyID == signed.keyID else {
            return ReceiptCheck(status: .malformed, message: "receipt payload is not a valid receipt")
        }
        if let status = environmentMismatch(payload.environment) {
            return ReceiptCheck(status: status, message: mismatchMessage(status), payload: payload)
        }
        if payload.expiresDateMs > 0, payload.expiresDateMs <= nowMs {
            return ReceiptCheck(status: .subscriptionExpired, message: "subscription expired", payload: payload)
        }
        return ReceiptCheck(status: .valid, message: "valid", payload: payload)
    }

    private func environmentMismatch(_ receiptEnvironment: ReceiptV1.Environment) -> ReceiptStatus? {
        switch (environment, receiptEnvironment) {
        case (.production, .sandbox):
            return acceptSandbox ? nil : .sandboxReceiptInProduction
        case (.sandbox, .production):
            return .productionReceiptInSandbox
        default:
            return nil
        }
    }

    private func mismatchMessage(_ status: ReceiptStatus) -> String {
        status == .sandboxReceiptInProduction
            ? "sandbox receipt sent to a production verifier; verify it against the sandbox"
            : "production receipt sent to a sandbox verifier; verify it against production"
    }
}

extension ReceiptV1.Environment {
    /// `sandbox` or `production`.
    public var name: String {
        switch self {
        case .sandbox: "sandbox"
        case .production: "production"
        default: "unspecified"
        }
    }

    /// Parses `sandbox` or `production`.
    public init?(name: String) {
        switch name.lowercased() {
        case "sandbox": self = .sandbox
        case "production": self = .production
        default: return nil
        }
    }
}
