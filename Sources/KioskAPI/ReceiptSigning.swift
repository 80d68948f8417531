import Crypto
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
        ReceiptPublicKey(id: id, rawRepresentation: Array(privateKey.publicKey.rawRepresentation), notBeforeMs: notBeforeMs)
    }

    /// Signs `payload` (its `keyID` is set to this key's id) into a receipt.
    public func sign(_ payload: ReceiptV1.ReceiptPayload) throws -> ReceiptV1.SignedReceipt {
        var payload = payload
        payload.keyID = id
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
    /// When the key started signing, in milliseconds since 1970.
    public var notBeforeMs: Int64

    /// Creates a public key entry.
    public init(id: String, rawRepresentation: [UInt8], notBeforeMs: Int64) {
        self.id = id
        self.rawRepresentation = rawRepresentation
        self.notBeforeMs = notBeforeMs
    }

    /// The id of a public key: "ed25519-" and the first 8 bytes of its SHA-256, in hex.
    public static func keyID(for rawPublicKey: [UInt8]) -> String {
        let digest = SHA256.hash(data: rawPublicKey)
        return "ed25519-" + digest.prefix(8).hexString
    }
}
