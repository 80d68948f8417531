import Crypto
import KioskAPI
import KioskWire

/// The bytes signed for a receipt: this prefix, then the encoded payload.
/// The prefix keeps a receipt signature from ever being valid for anything else.
public let receiptSignaturePrefix: [UInt8] = Array("KIOSK-RECEIPT-V1\n".utf8)

/// An Ed25519 key that signs receipts.
public struct ReceiptSigningKey: Sendable {
    /// The key's id, derived from its public key (see ``ReceiptPublicKey/keyID(for:)``).
    public let id: String
    /// The private key.
    public let privateKey: Curve25519.Signing.PrivateKey
    /// When the key started signing, in milliseconds since 1970.
    public let notBeforeMs: Int64

    /// Wraps a private key.
    public init(privateKey: Curve25519.Signing.PrivateKey, notBeforeMs: Int64) {
        self.privateKey = privateKey
        self.id = ReceiptPublicKey.keyID(for: Array(privateKey.publicKey.rawRepresentation))
        self.notBeforeMs = notBeforeMs
    }

    /// The public half, for verifiers.
    public var publicKey: ReceiptPublicKey {
        ReceiptPublicKey(
            id: id, rawRepresentation: Array(privateKey.publicKey.rawRepresentation), notBeforeMs: notBeforeMs)
    }

    /// Signs `payload` (its `keyID` is set to this key's id) into a receipt.
    /// - Parameter signedAtMs: when the key signs, in milliseconds since 1970, written to the
    ///   payload's `signedDateMs`: verifiers check it against the key's validity window
    ///   (``ReceiptPublicKey/notBeforeMs`` … ``ReceiptPublicKey/notAfterMs``). The store passes
    ///   its clock. `nil` keeps the payload's own `signedDateMs` (0 when unset: verifiers then
    ///   take its purchase date for the signing time).
    public func sign(_ payload: ReceiptV1.ReceiptPayload, signedAtMs: Int64? = nil) throws -> ReceiptV1.SignedReceipt {
        var payload = payload
        payload.keyID = id
        if let signedAtMs { payload.signedDateMs = signedAtMs }
        let bytes = payload.serializedBytes()
        let signature = try privateKey.signature(for: receiptSignaturePrefix + bytes)
        return ReceiptV1.SignedReceipt(payload: bytes, signature: Array(signature), keyID: id)
    }
}

/// An Ed25519 public key that verifies receipts.
public struct ReceiptPublicKey: Hashable, Sendable {
    /// The key id receipts name.
    public var id: String
    /// The raw 32-byte Ed25519 public key.
    public var rawRepresentation: [UInt8]
    /// When the key started signing, in milliseconds since 1970: receipts signed before do not verify with it.
    public var notBeforeMs: Int64
    /// When the key was retired, in milliseconds since 1970: receipts signed after do not verify
    /// with it (those signed before, or at that millisecond, still do). 0: not retired.
    public var notAfterMs: Int64

    /// Creates a public key entry.
    public init(id: String, rawRepresentation: [UInt8], notBeforeMs: Int64, notAfterMs: Int64 = 0) {
        self.id = id
        self.rawRepresentation = rawRepresentation
        self.notBeforeMs = notBeforeMs
        self.notAfterMs = notAfterMs
    }

    /// True when the key has been retired (``notAfterMs`` is set).
    public var isRetired: Bool { notAfterMs != 0 }

    /// True when a receipt signed at `signingTimeMs` lies inside the key's validity window:
    /// not before ``notBeforeMs`` and, once retired, not after ``notAfterMs``.
    public func isValid(atMs signingTimeMs: Int64) -> Bool {
        signingTimeMs >= notBeforeMs && (notAfterMs == 0 || signingTimeMs <= notAfterMs)
    }

    /// The validity window as a person reads it, e.g. `[1800000000000, 1800000500000]` or `[1800000000000, not retired]`.
    public var validityWindow: String {
        "[\(notBeforeMs), \(notAfterMs == 0 ? "not retired" : String(notAfterMs))]"
    }

    /// The id of a public key: "ed25519-" and the first 8 bytes of its SHA-256, in hex.
    public static func keyID(for rawPublicKey: [UInt8]) -> String {
        let digest = SHA256.hash(data: rawPublicKey)
        return "ed25519-" + digest.prefix(8).hexString
    }
}
