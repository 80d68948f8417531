import Crypto
import Foundation
import KioskAPI

// Signing and checking promotional offers (Ed25519): the app's server signs, the store checks. Apart from
// ``PromotionalOfferSignature`` itself (KioskAPI), so that the SDK, which only carries a signature, builds without
// swift-crypto.

extension PromotionalOfferSignature {
    /// Signs an offer for `accountID` (on the app's server).
    public static func sign(
        privateKey: Curve25519.Signing.PrivateKey, keyID: String, bundleID: String, productID: String, offerID: String,
        accountID: String, nonce: String = UUID().uuidString, timestampMs: Int64
    ) throws -> PromotionalOfferSignature {
        let bytes = message(
            bundleID: bundleID, keyID: keyID, productID: productID, offerID: offerID, accountID: accountID,
            nonce: nonce, timestampMs: timestampMs)
        return PromotionalOfferSignature(
            offerID: offerID, keyID: keyID, nonce: nonce, timestampMs: timestampMs,
            signature: Array(try privateKey.signature(for: bytes)))
    }

    /// True when `signature` is `publicKey`'s over this offer for the buyer.
    public func isValid(
        publicKey: Curve25519.Signing.PublicKey, bundleID: String, productID: String, accountID: String
    ) -> Bool {
        let bytes = Self.message(
            bundleID: bundleID, keyID: keyID, productID: productID, offerID: offerID, accountID: accountID,
            nonce: nonce, timestampMs: timestampMs)
        return signature.count == 64 && publicKey.isValidSignature(signature, for: bytes)
    }
}
