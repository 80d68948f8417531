import Foundation

/// A promotional subscription offer as the app's server signs it for one buyer (StoreKit's
/// `Product.SubscriptionOffer.Signature`), and as the store checks it.
///
/// The signature is Ed25519 over `KIOSK-OFFER-V1\n` followed by bundle id, key id, product id,
/// offer id, account id, nonce and the timestamp in decimal milliseconds, joined by `\n`, UTF-8.
/// The key's public half is listed in the store's catalog (`offer_keys`); its private half stays
/// on the app's server, which signs with `sign(privateKey:…)` of `KioskSigning`.
public struct PromotionalOfferSignature: Hashable, Sendable {
    /// The promotional offer's id in the catalog.
    public var offerID: String
    /// The signing key's id in the catalog's `offer_keys`.
    public var keyID: String
    /// Single use: 8 to 64 of `[A-Za-z0-9-]` (a UUID will do).
    public var nonce: String
    /// When it was signed, milliseconds since 1970.
    public var timestampMs: Int64
    /// The 64-byte Ed25519 signature.
    public var signature: [UInt8]

    public init(offerID: String, keyID: String, nonce: String, timestampMs: Int64, signature: [UInt8]) {
        self.offerID = offerID
        self.keyID = keyID
        self.nonce = nonce
        self.timestampMs = timestampMs
        self.signature = signature
    }

    /// The bytes signed.
    public static func message(
        bundleID: String, keyID: String, productID: String, offerID: String, accountID: String,
        nonce: String, timestampMs: Int64
    ) -> [UInt8] {
        Array(
            ["KIOSK-OFFER-V1", bundleID, keyID, productID, offerID, accountID, nonce, String(timestampMs)].joined(
                separator: "\n"
            ).utf8)
    }

    /// True for a nonce the store accepts: 8 to 64 of `[A-Za-z0-9-]`.
    public static func isWellFormed(nonce: String) -> Bool {
        (8...64).contains(nonce.utf8.count)
            && nonce.utf8.allSatisfy {
                $0 == UInt8(ascii: "-") || ($0 < 128 && Character(Unicode.Scalar($0)).isLetter)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
            }
    }
}
