import Crypto
import KioskAPI
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
    /// strings (a whole outcome copied, and the original destroyed, on verification's return path
    /// would cost a retain and a release per string).
    private var decoded: DecodedPayload?

    private final class DecodedPayload: Sendable {
        let payload: ReceiptV1.ReceiptPayload
        init(_ payload: ReceiptV1.ReceiptPayload) { self.payload = payload }
    }

    /// Creates an outcome.
    public init(status: ReceiptStatus, message: String, payload: ReceiptV1.ReceiptPayload? = nil) {
        self.status = status
        self.message = message
        self.decoded = payload.map(DecodedPayload.init)
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
        /// The same keys by their ids' bytes, for ids of up to 32 bytes (every id a store makes): a
        /// receipt's key id is looked up where protobuf-c unpacked it, without a Swift string of it
        /// (a malloc for an id over 15 bytes) and its hashing.
        let keysByBytes: [InlineKeyID: TrustedKey]
        let environment: ReceiptV1.Environment
        let acceptSandbox: Bool
        let bundleID: String?

        init(keys: [String: TrustedKey], environment: ReceiptV1.Environment, acceptSandbox: Bool, bundleID: String?) {
            self.keys = keys
            var byBytes: [InlineKeyID: TrustedKey] = [:]
            for (id, key) in keys {
                var id = id
                if let inline = id.withUTF8({ InlineKeyID(UnsafeRawBufferPointer($0)) }) { byBytes[inline] = key }
            }
            self.keysByBytes = byBytes
            self.environment = environment
            self.acceptSandbox = acceptSandbox
            self.bundleID = bundleID
        }

        /// The key whose id is `id`'s UTF-8 bytes.
        func key(id: UnsafeRawBufferPointer) -> TrustedKey? {
            if let inline = InlineKeyID(id) { return keysByBytes[inline] }
            return keys[String(decoding: id, as: UTF8.self)]
        }
    }

    /// A key id of up to 32 bytes, held inline.
    private struct InlineKeyID: Hashable, Sendable {
        private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        private let count: Int

        init?(_ bytes: UnsafeRawBufferPointer) {
            guard bytes.count <= 32 else { return nil }
            count = bytes.count
            withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: bytes) }
        }

        static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.count == rhs.count && lhs.words.0 == rhs.words.0 && lhs.words.1 == rhs.words.1
                && lhs.words.2 == rhs.words.2 && lhs.words.3 == rhs.words.3
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
            hasher.combine(count)
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
    public init(
        keys: [ReceiptPublicKey], environment: ReceiptV1.Environment, acceptSandbox: Bool = false,
        bundleID: String? = nil
    ) {
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
        verifyEncoded(receipt, nowMs: nowMs) { status, message, payload in
            // The payload's strings were checked: it decodes.
            ReceiptCheck(
                status: status, message: message,
                payload: payload.flatMap { try? ReceiptV1.ReceiptPayload(cStruct: $0) })
        }
    }

    /// Checks an encoded `SignedReceipt` as ``verify(_:nowMs:)`` does, without a Swift value of the
    /// payload (seven strings, most of them a malloc each): for a valid receipt, `keep` reads the fields
    /// its caller keeps from the payload as protobuf-c unpacked it (valid only inside `keep`). The
    /// outcome carries no ``ReceiptCheck/payload``; `kept` is nil unless the receipt is valid.
    @inlinable
    public func verify<Kept>(
        _ receipt: [UInt8], nowMs: Int64,
        keeping keep: (borrowing ReceiptV1.ReceiptPayload.CStruct) throws(WireError) -> Kept
    ) -> (check: ReceiptCheck, kept: Kept?) {
        // Inlinable around a non-generic core: specialised in the caller's module, where `Kept` is known.
        var outcome: (check: ReceiptCheck, kept: Kept?) = (ReceiptCheck(status: .malformed, message: ""), nil)
        readEncoded(receipt, nowMs: nowMs) { status, message, payload in
            guard status == .valid, let payload else {
                outcome.check = ReceiptCheck(status: status, message: message)
                return
            }
            do throws(WireError) {
                outcome = (ReceiptCheck(status: status, message: message), try keep(payload))
            } catch {
                outcome.check = ReceiptCheck(status: .malformed, message: "receipt payload is not a valid receipt")
            }
        }
        return outcome
    }

    /// ``verify(_:nowMs:keeping:)``'s core: the outcome of an encoded receipt, and its payload where
    /// protobuf-c unpacked it when it decoded.
    @usableFromInline
    func readEncoded(
        _ receipt: [UInt8], nowMs: Int64, _ finish: (ReceiptStatus, String, ReceiptV1.ReceiptPayload.CStruct?) -> Void
    ) {
        verifyEncoded(receipt, nowMs: nowMs, finish)
    }

    /// Checks a decoded `SignedReceipt`.
    public func verify(_ signed: ReceiptV1.SignedReceipt, nowMs: Int64) -> ReceiptCheck {
        var keyID = signed.keyID
        return signed.payload.withUnsafeBytes { payload in
            signed.signature.withUnsafeBytes { signature in
                keyID.withUTF8 { keyID in
                    check(payload: payload, signature: signature, keyID: UnsafeRawBufferPointer(keyID), nowMs: nowMs) {
                        status, message, payload in
                        ReceiptCheck(
                            status: status, message: message,
                            payload: payload.flatMap { try? ReceiptV1.ReceiptPayload(cStruct: $0) })
                    }
                }
            }
        }
    }

    /// Checks an encoded `SignedReceipt` and hands `finish` the outcome, with the payload where
    /// protobuf-c unpacked it when it decoded (valid only inside `finish`). The envelope is read in
    /// place too: no arrays for its payload and signature, no string for its key id.
    private func verifyEncoded<Result>(
        _ receipt: [UInt8], nowMs: Int64, _ finish: (ReceiptStatus, String, ReceiptV1.ReceiptPayload.CStruct?) -> Result
    ) -> Result {
        do {
            return try receipt.withUnsafeBytes { bytes throws(WireError) -> Result in
                try ReceiptV1.SignedReceipt.withUnpacked(bytes) { signed throws(WireError) -> Result in
                    guard CField.isValidUTF8(signed.key_id) else {
                        throw WireError(.malformedMessage, "SignedReceipt.key_id is not valid UTF-8")
                    }
                    return check(
                        payload: CField.view(signed.payload), signature: CField.view(signed.signature),
                        keyID: CField.utf8View(signed.key_id), nowMs: nowMs, finish)
                }
            }
        } catch {
            return finish(.malformed, "receipt is not a signed receipt (\(receipt.count) bytes)", nil)
        }
    }

    /// Checks 1 (past decoding) to 7 of the list above for a receipt's parts (`keyID`: UTF-8).
    private func check<Result>(
        payload bytes: UnsafeRawBufferPointer, signature: UnsafeRawBufferPointer, keyID: UnsafeRawBufferPointer,
        nowMs: Int64,
        _ finish: (ReceiptStatus, String, ReceiptV1.ReceiptPayload.CStruct?) -> Result
    ) -> Result {
        guard !bytes.isEmpty, signature.count == 64, !keyID.isEmpty else {
            return finish(.malformed, "receipt lacks a payload, a 64-byte signature or a key id", nil)
        }
        guard let key = storage.key(id: keyID) else {
            // Not one of the keys: a receipt of the other environment is answered as such (21007 / 21008).
            let mismatched = try? ReceiptV1.ReceiptPayload.withUnpacked(bytes) { payload throws(WireError) -> Result? in
                guard Self.stringsAreValid(payload), let status = environmentMismatch(Self.environment(of: payload))
                else { return nil }
                return finish(status, mismatchMessage(status), copy payload)
            }
            if let mismatched { return mismatched }
            return finish(
                .notAuthentic, "receipt is signed by unknown key \(String(decoding: keyID, as: UTF8.self))", nil)
        }
        // The signed bytes: the domain prefix, then the payload.
        let authentic = withUnsafeTemporaryAllocation(
            byteCount: receiptSignaturePrefix.count + bytes.count, alignment: 1
        ) { message in
            receiptSignaturePrefix.withUnsafeBytes { message.copyMemory(from: $0) }
            UnsafeMutableRawBufferPointer(rebasing: message[receiptSignaturePrefix.count...]).copyMemory(from: bytes)
            return key.verifying.isValidSignature(signature, for: UnsafeRawBufferPointer(message))
        }
        guard authentic else {
            return finish(.notAuthentic, "receipt signature does not verify", nil)
        }
        // The payload is read where protobuf-c unpacked it: its strings are checked for UTF-8 (as decoding
        // them into a Swift value would), and only the fields a caller keeps become Swift values.
        do {
            return try ReceiptV1.ReceiptPayload.withUnpacked(bytes) { payload throws(WireError) -> Result in
                guard Self.stringsAreValid(payload), CField.sameBytes(CField.utf8View(payload.key_id), keyID) else {
                    throw WireError(.malformedMessage, "not a valid receipt payload")
                }
                let (status, message) = judge(payload, key: key.entry, nowMs: nowMs)
                return finish(status, message, copy payload)
            }
        } catch {
            return finish(.malformed, "receipt payload is not a valid receipt", nil)
        }
    }

    /// True when every string of `payload` is valid UTF-8, as its Swift value requires.
    private static func stringsAreValid(_ payload: borrowing ReceiptV1.ReceiptPayload.CStruct) -> Bool {
        guard CField.isValidUTF8(payload.transaction_id), CField.isValidUTF8(payload.original_transaction_id),
            CField.isValidUTF8(payload.product_id), CField.isValidUTF8(payload.account_id),
            CField.isValidUTF8(payload.bundle_id),
            CField.isValidUTF8(payload.key_id), CField.isValidUTF8(payload.offer_id)
        else { return false }
        return true
    }

    private static func environment(of payload: borrowing ReceiptV1.ReceiptPayload.CStruct) -> ReceiptV1.Environment {
        ReceiptV1.Environment(rawValue: Int32(truncatingIfNeeded: payload.environment.rawValue))
    }

    /// Checks 3 (an environment named) to 7 of the list above, for a payload whose signature verified.
    private func judge(
        _ payload: borrowing ReceiptV1.ReceiptPayload.CStruct, key: ReceiptPublicKey, nowMs: Int64
    ) -> (ReceiptStatus, String) {
        let environment = Self.environment(of: payload)
        guard environment == .sandbox || environment == .production else {
            let named =
                environment == .environmentUnspecified
                ? "no environment" : "unknown environment \(environment.rawValue)"
            return (.malformed, "receipt payload names \(named) (expected sandbox or production)")
        }
        if let refusal = windowRefusal(
            signedDateMs: payload.signed_date_ms, purchaseDateMs: payload.purchase_date_ms, key: key)
        {
            return (.notAuthentic, refusal)
        }
        if let bundleID = storage.bundleID, !Self.string(payload.bundle_id, is: bundleID) {
            let named = (try? CField.string(payload.bundle_id, field: "ReceiptPayload.bundle_id")) ?? ""
            return (.notAuthentic, "receipt is for bundle id \"\(named)\", not this app's \"\(bundleID)\"")
        }
        if let status = environmentMismatch(environment) {
            return (status, mismatchMessage(status))
        }
        if payload.expires_date_ms > 0, payload.expires_date_ms <= nowMs {
            return (.subscriptionExpired, "subscription expired")
        }
        return (.valid, "valid")
    }

    /// True when a protobuf-c string field holds `string`'s UTF-8 bytes.
    private static func string(_ field: UnsafePointer<CChar>?, is string: String) -> Bool {
        var string = string
        return string.withUTF8 { CField.sameBytes(CField.utf8View(field), UnsafeRawBufferPointer($0)) }
    }

    /// Why the key was not valid when it signed the receipt, or nil when it was.
    private func windowRefusal(signedDateMs: Int64, purchaseDateMs: Int64, key: ReceiptPublicKey) -> String? {
        var window: String { "validity window \(key.validityWindow) (ms since 1970)" }
        if signedDateMs != 0 {
            guard !key.isValid(atMs: signedDateMs) else { return nil }
            return "receipt was signed at \(signedDateMs) by key \(key.id), outside the key's \(window)"
        }
        // A receipt of an older store: its purchase date is when it was signed, or earlier.
        guard key.isRetired, purchaseDateMs > key.notAfterMs else { return nil }
        return
            "receipt (no signing time; purchased at \(purchaseDateMs)) is after the retirement of key \(key.id), \(window)"
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
