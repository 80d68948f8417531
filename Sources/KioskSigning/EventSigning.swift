import Crypto
import KioskAPI
import KioskWire

/// The bytes signed for an event: this prefix, then the encoded `Event`. It
/// keeps an event signature from ever being a receipt's or an access token's.
public let eventSignaturePrefix: [UInt8] = Array("KIOSK-EVENT-V1\n".utf8)

extension StoreV1.SignedEvent {
    /// Signs `event` with `key`.
    public static func sign(_ event: StoreV1.Event, key: ReceiptSigningKey) throws -> StoreV1.SignedEvent {
        let bytes = event.serializedBytes()
        let signature = try key.privateKey.signature(for: eventSignaturePrefix + bytes)
        return StoreV1.SignedEvent(event: bytes, signature: Array(signature), keyID: key.id)
    }

    /// Why a signed event was refused.
    public struct VerificationError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// The event, when its signature verifies with one of `keys` (the store's
    /// `PublicKeys`). The store signs an event when it sends it, with its
    /// signing key of that moment, so the same event may arrive signed by
    /// different keys across a rotation; both verify.
    /// - Throws: ``VerificationError`` naming what failed: an unknown key, a bad
    ///   signature, undecodable bytes.
    public func verified(with keys: [ReceiptPublicKey]) throws -> StoreV1.Event {
        guard let key = keys.first(where: { $0.id == keyID }) else {
            throw VerificationError(description: "event signed with unknown key \(keyID.isEmpty ? "(none)" : keyID)")
        }
        guard let publicKey = try? Curve25519.Signing.PublicKey(rawRepresentation: key.rawRepresentation),
            publicKey.isValidSignature(signature, for: eventSignaturePrefix + event)
        else {
            throw VerificationError(description: "event signature does not verify with key \(keyID)")
        }
        let decoded: StoreV1.Event
        do {
            decoded = try StoreV1.Event(serializedBytes: event)
        } catch {
            throw VerificationError(description: "signed event does not decode: \(error)")
        }
        return decoded
    }
}
