import Crypto
import KioskWire

/// The outcome of checking a receipt.
public struct ReceiptCheck: Hashable, Sendable {
    /// The verification status.
    public var status: ReceiptStatus
    /// A readable reason.
    public var message: String
    /// The decoded payload, when the receipt could be decoded.
    public var payload: ReceiptV1.ReceiptPayload? {
        get { decoded?.payload }
        set { decoded = newValue.map(DecodedPayload.init) }
    }

    /// The payload, in a box: an outcome is copied as two references, not the payload's seven
    /// strings (the optimiser copied a whole outcome and destroyed the original on verification's
    /// return path, a retain and a release per string).
    @usableFromInline
    var decoded: DecodedPayload?

    @usableFromInline
    final class DecodedPayload: Sendable {
        @usableFromInline
        let payload: ReceiptV1.ReceiptPayload
        init(_ payload: ReceiptV1.ReceiptPayload) { self.payload = payload }
    }

    /// Creates an outcome.
    public init(status: ReceiptStatus, message: String, payload: ReceiptV1.ReceiptPayload? = nil) {
        self.status = status
        self.message = message
        self.decoded = payload.map(DecodedPayload.init)
    }

    /// `body`'s result for the decoded payload, read in place (``payload`` returns a copy); nil without one.
    @inlinable
    public func withPayload<Result>(_ body: (borrowing ReceiptV1.ReceiptPayload) throws -> Result) rethrows -> Result? {
        guard let decoded else { return nil }
        return try body(decoded.payload)
    }

    public static func == (lhs: ReceiptCheck, rhs: ReceiptCheck) -> Bool {
        lhs.status == rhs.status && lhs.message == rhs.message && lhs.payload == rhs.payload
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(status)
        hasher.combine(message)
        hasher.combine(payload)
    }
}

/// Verifies signed receipts offline against a set of public keys.
///
/// The checks run in an order that makes every tampering visible as such:
/// 1. the envelope must decode, with a 64-byte signature and a key id (else 21002);
/// 2. a known key must verify the signature over the exact payload bytes
///    (else 21003) — before the payload is trusted for anything;
/// 3. the payload must decode, name the same key and name an environment,
///    sandbox or production (else 21002);
/// 4. the key must have been valid when it signed: the payload's signing time
///    (`signedDateMs`) not before the key's `notBeforeMs` and, for a retired
///    key, not after its `notAfterMs` (else 21003). Receipts of older stores
///    carry no signing time: their purchase date stands for it, checked against
///    `notAfterMs` only (a purchase settled later — reconciled, or charged while
///    a key rotated — is signed by a key newer than its purchase date);
/// 5. with a configured bundle id, the receipt must be for that app (else 21003:
///    not authentic *for this app*, as Apple's `SignedDataVerifier` answers
///    `INVALID_APP_IDENTIFIER`, a verification failure; verifyReceipt has no own code for it);
/// 6. its environment must be the verifier's (21007 / 21008);
/// 7. a subscription must not have expired (21006).
///
/// A receipt signed by an unknown key whose payload says it is from the other
/// environment gets 21007 / 21008, as Apple's production server does for
/// sandbox receipts it cannot verify itself.
public struct ReceiptVerifier: Sendable {
    /// A key the verifier trusts. A class: a lookup hands out a reference instead of copying the
    /// key's bytes and id (a retain each) on every verification.
    private final class TrustedKey: Sendable {
        let verifying: Curve25519.Signing.PublicKey
        let entry: ReceiptPublicKey

        init(verifying: Curve25519.Signing.PublicKey, entry: ReceiptPublicKey) {
            self.verifying = verifying
            self.entry = entry
        }
    }

    /// The keys and settings, shared by every copy of the verifier: a copy (a gate takes one out of its
    /// lock on every call) retains one reference instead of the dictionary and the bundle id.
    private final class Storage: Sendable {
        let keys: [String: TrustedKey]
        let environment: ReceiptV1.Environment
        let acceptSandbox: Bool
        let bundleID: String?

        init(keys: [String: TrustedKey], environment: ReceiptV1.Environment, acceptSandbox: Bool, bundleID: String?) {
            self.keys = keys
            self.environment = environment
            self.acceptSandbox = acceptSandbox
            self.bundleID = bundleID
        }
    }

    private let storage: Storage
    /// The environment receipts must be from.
    public var environment: ReceiptV1.Environment { storage.environment }
    /// A production verifier that also accepts sandbox receipts.
    public var acceptSandbox: Bool { storage.acceptSandbox }
    /// The app receipts must be for; `nil` accepts any bundle id.
    public var bundleID: String? { storage.bundleID }

    /// Creates a verifier. Keys that are not valid Ed25519 public keys are skipped.
    /// - Parameters:
    ///   - keys: the store's public keys, with their validity windows.
    ///   - environment: the environment receipts must be from.
    ///   - acceptSandbox: a production verifier that also accepts sandbox receipts.
    ///   - bundleID: when set, a receipt for another bundle id is refused with 21003.
    public init(keys: [ReceiptPublicKey], environment: ReceiptV1.Environment, acceptSandbox: Bool = false, bundleID: String? = nil) {
        var byID: [String: TrustedKey] = [:]
        for key in keys {
            if let publicKey = try? Curve25519.Signing.PublicKey(rawRepresentation: key.rawRepresentation) {
                byID[key.id] = TrustedKey(verifying: publicKey, entry: key)
            }
        }
        storage = Storage(keys: byID, environment: environment, acceptSandbox: acceptSandbox, bundleID: bundleID)
    }

    /// True when `keyID` is one of the verifier's keys (retired ones included).
    public func knows(keyID: String) -> Bool { storage.keys[keyID] != nil }

    /// Checks an encoded `SignedReceipt`.
    /// - Parameter nowMs: the current time, for subscription expiry.
    public func verify(_ receipt: [UInt8], nowMs: Int64) -> ReceiptCheck {
        // The envelope is read in place where protobuf-c unpacked it: no arrays for its payload and
        // signature, and the signed bytes are put together on the stack (three mallocs a call less).
        do {
            return try receipt.withUnsafeBytes { bytes throws(WireError) -> ReceiptCheck in
                try ReceiptV1.SignedReceipt.withUnpacked(bytes) { signed throws(WireError) -> ReceiptCheck in
                    check(payload: CField.view(signed.payload), signature: CField.view(signed.signature),
                          keyID: try CField.string(signed.key_id, field: "SignedReceipt.key_id"), nowMs: nowMs)
                }
            }
        } catch {
            return ReceiptCheck(status: .malformed, message: "receipt is not a signed receipt (\(receipt.count) bytes)")
        }
    }

    /// Checks a decoded `SignedReceipt`.
    public func verify(_ signed: ReceiptV1.SignedReceipt, nowMs: Int64) -> ReceiptCheck {
        signed.payload.withUnsafeBytes { payload in
            signed.signature.withUnsafeBytes { signature in
                check(payload: payload, signature: signature, keyID: signed.keyID, nowMs: nowMs)
            }
        }
    }

    /// Checks 1 (past decoding) to 7 of the list above for a receipt's parts.
    private func check(payload bytes: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer, keyID: String, nowMs: Int64) -> ReceiptCheck {
        guard !bytes.isEmpty, signature.count == 64, !keyID.isEmpty else {
            return ReceiptCheck(status: .malformed, message: "receipt lacks a payload, a 64-byte signature or a key id")
        }
        guard let key = storage.keys[keyID] else {
            if let payload = try? ReceiptV1.ReceiptPayload(serializedBytes: bytes),
               let status = environmentMismatch(payload.environment) {
                return ReceiptCheck(status: status, message: mismatchMessage(status), payload: payload)
            }
            return ReceiptCheck(status: .notAuthentic, message: "receipt is signed by unknown key \(keyID)")
        }
        // The signed bytes: the domain prefix, then the payload.
        let authentic = withUnsafeTemporaryAllocation(byteCount: receiptSignaturePrefix.count + bytes.count, alignment: 1) { message in
            receiptSignaturePrefix.withUnsafeBytes { message.copyMemory(from: $0) }
            UnsafeMutableRawBufferPointer(rebasing: message[receiptSignaturePrefix.count...]).copyMemory(from: bytes)
            return key.verifying.isValidSignature(signature, for: UnsafeRawBufferPointer(message))
        }
        guard authentic else {
            return ReceiptCheck(status: .notAuthentic, message: "receipt signature does not verify")
        }
        let payload: ReceiptV1.ReceiptPayload
        do {
            payload = try ReceiptV1.ReceiptPayload(serializedBytes: bytes)
        } catch {
            return ReceiptCheck(status: .malformed, message: "receipt payload is not a valid receipt")
        }
        guard payload.keyID == keyID else {
            return ReceiptCheck(status: .malformed, message: "receipt payload is not a valid receipt")
        }
        // Judged with the payload borrowed, then moved into the outcome once: building an outcome per
        // branch made the optimiser copy the whole payload (a retain per string) and destroy the original.
        let (status, message) = judge(payload, key: key.entry, nowMs: nowMs)
        return ReceiptCheck(status: status, message: message, payload: payload)
    }

    /// Checks 3 (an environment named) to 7 of the list above, for a payload whose signature verified.
    private func judge(_ payload: borrowing ReceiptV1.ReceiptPayload, key: ReceiptPublicKey, nowMs: Int64) -> (ReceiptStatus, String) {
        guard payload.environment == .sandbox || payload.environment == .production else {
            let named = payload.environment == .environmentUnspecified ? "no environment" : "unknown environment \(payload.environment.rawValue)"
            return (.malformed, "receipt payload names \(named) (expected sandbox or production)")
        }
        if let refusal = windowRefusal(payload, key: key) {
            return (.notAuthentic, refusal)
        }
        if let bundleID = storage.bundleID, payload.bundleID != bundleID {
            return (.notAuthentic, "receipt is for bundle id \"\(payload.bundleID)\", not this app's \"\(bundleID)\"")
        }
        if let status = environmentMismatch(payload.environment) {
            return (status, mismatchMessage(status))
        }
        if payload.expiresDateMs > 0, payload.expiresDateMs <= nowMs {
            return (.subscriptionExpired, "subscription expired")
        }
        return (.valid, "valid")
    }

    /// Why the key was not valid when it signed the receipt, or nil when it was.
    private func windowRefusal(_ payload: borrowing ReceiptV1.ReceiptPayload, key: ReceiptPublicKey) -> String? {
        var window: String { "validity window \(key.validityWindow) (ms since 1970)" }
        if payload.signedDateMs != 0 {
            guard !key.isValid(atMs: payload.signedDateMs) else { return nil }
            return "receipt was signed at \(payload.signedDateMs) by key \(key.id), outside the key's \(window)"
        }
        // A receipt of an older store: its purchase date is when it was signed, or earlier.
        guard key.isRetired, payload.purchaseDateMs > key.notAfterMs else { return nil }
        return "receipt (no signing time; purchased at \(payload.purchaseDateMs)) is after the retirement of key \(key.id), \(window)"
    }

    private func environmentMismatch(_ receiptEnvironment: ReceiptV1.Environment) -> ReceiptStatus? {
        switch (storage.environment, receiptEnvironment) {
        case (.production, .sandbox):
            return storage.acceptSandbox ? nil : .sandboxReceiptInProduction
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
