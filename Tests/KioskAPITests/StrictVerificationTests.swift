import Crypto
import KioskAPI
import KioskSigning
import KioskWire
import Testing

/// The verifier's strict checks (#13 point 4): an environment it knows, the app's bundle id,
/// and a key that was valid when it signed.
@Suite struct StrictVerificationTests {
    let signer = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: 1_800_000_000_000)
    let now: Int64 = 1_800_000_100_000

    func payload(
        environment: ReceiptV1.Environment = .production, bundleID: String = "com.example.monkeys",
        purchasedAtMs: Int64 = 1_800_000_050_000
    ) -> ReceiptV1.ReceiptPayload {
        ReceiptV1.ReceiptPayload(
            transactionID: "tx_1", originalTransactionID: "tx_1", productID: "filter.sepia",
            productType: .nonConsumable, quantity: 1,
            purchaseDateMs: purchasedAtMs, accountID: "acct_1", bundleID: bundleID, environment: environment)
    }

    func publicKey(notAfterMs: Int64 = 0) -> ReceiptPublicKey {
        var key = signer.publicKey
        key.notAfterMs = notAfterMs
        return key
    }

    func receipt(_ payload: ReceiptV1.ReceiptPayload, signedAtMs: Int64? = 1_800_000_050_000) throws -> [UInt8] {
        try signer.sign(payload, signedAtMs: signedAtMs).serializedBytes()
    }

    // MARK: Environment

    @Test func unspecifiedEnvironmentIsMalformed() throws {
        let bytes = try receipt(payload(environment: .environmentUnspecified))
        for verifier in [
            ReceiptVerifier(keys: [signer.publicKey], environment: .production),
            ReceiptVerifier(keys: [signer.publicKey], environment: .production, acceptSandbox: true),
            ReceiptVerifier(keys: [signer.publicKey], environment: .sandbox),
        ] {
            let check = verifier.verify(bytes, nowMs: now)
            #expect(check.status == .malformed)
            #expect(check.message.contains("no environment"), "\(check.message)")
        }
    }

    @Test func unknownEnvironmentValueIsMalformed() throws {
        let bytes = try receipt(payload(environment: ReceiptV1.Environment(rawValue: 7)))
        let check = ReceiptVerifier(keys: [signer.publicKey], environment: .production, acceptSandbox: true).verify(
            bytes, nowMs: now)
        #expect(check.status == .malformed)
        #expect(check.message.contains("unknown environment 7"), "\(check.message)")
    }

    // MARK: Bundle id

    @Test func bundleIDMismatchIsRefusedOnlyWhenConfigured() throws {
        let other = try receipt(payload(bundleID: "com.example.other"))
        let mine = try receipt(payload(bundleID: "com.example.monkeys"))
        let strict = ReceiptVerifier(
            keys: [signer.publicKey], environment: .production, bundleID: "com.example.monkeys")
        let refused = strict.verify(other, nowMs: now)
        #expect(refused.status == .notAuthentic)
        #expect(
            refused.message.contains("com.example.other") && refused.message.contains("com.example.monkeys"),
            "\(refused.message)")
        #expect(strict.verify(mine, nowMs: now).status == .valid)
        let open = ReceiptVerifier(keys: [signer.publicKey], environment: .production)
        #expect(open.bundleID == nil)
        #expect(open.verify(other, nowMs: now).status == .valid)
    }

    // MARK: The key's validity window

    @Test func signerRecordsTheSigningTime() throws {
        let signed = try signer.sign(payload(), signedAtMs: 1_800_000_060_000)
        #expect(try ReceiptV1.ReceiptPayload(serializedBytes: signed.payload).signedDateMs == 1_800_000_060_000)
    }

    @Test func receiptSignedBeforeTheKeysNotBeforeIsNotAuthentic() throws {
        let early = try receipt(payload(), signedAtMs: signer.notBeforeMs - 1)
        let check = ReceiptVerifier(keys: [signer.publicKey], environment: .production).verify(early, nowMs: now)
        #expect(check.status == .notAuthentic)
        #expect(
            check.message.contains(signer.id) && check.message.contains("\(signer.notBeforeMs)"), "\(check.message)")
        let onTime = try receipt(payload(), signedAtMs: signer.notBeforeMs)
        #expect(
            ReceiptVerifier(keys: [signer.publicKey], environment: .production).verify(onTime, nowMs: now).status
                == .valid)
    }

    @Test func receiptSignedAfterTheKeysRetirementIsNotAuthentic() throws {
        let retiredAt: Int64 = 1_800_000_070_000
        let verifier = ReceiptVerifier(keys: [publicKey(notAfterMs: retiredAt)], environment: .production)
        let late = verifier.verify(try receipt(payload(), signedAtMs: retiredAt + 1), nowMs: now)
        #expect(late.status == .notAuthentic)
        #expect(late.message.contains(signer.id) && late.message.contains("\(retiredAt)"), "\(late.message)")
        // Signed before (or at) the retirement: still valid, also once the retirement is past.
        #expect(verifier.verify(try receipt(payload(), signedAtMs: retiredAt - 1), nowMs: now).status == .valid)
        #expect(verifier.verify(try receipt(payload(), signedAtMs: retiredAt), nowMs: now).status == .valid)
        // The same late receipt verifies with the key before it was retired.
        let before = ReceiptVerifier(keys: [publicKey()], environment: .production)
        #expect(before.verify(try receipt(payload(), signedAtMs: retiredAt + 1), nowMs: now).status == .valid)
        // The signature is still checked first: a forgery claiming a time inside the window fails on it.
        let other = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: 1)
        var forged = try other.sign(payload(), signedAtMs: retiredAt - 1)
        forged.keyID = signer.id
        let forgery = verifier.verify(try forged.serializedBytes(), nowMs: now)
        #expect(
            forgery.status == .notAuthentic && forgery.message == "receipt signature does not verify"
                && forgery.payload == nil)
    }

    @Test func receiptWithoutSigningTimeIsJudgedByItsPurchaseDate() throws {
        // Receipts of older stores have no signed_date_ms: the purchase date stands for it.
        let retiredAt: Int64 = 1_800_000_070_000
        let verifier = ReceiptVerifier(keys: [publicKey(notAfterMs: retiredAt)], environment: .production)
        let after = try receipt(payload(purchasedAtMs: retiredAt + 1), signedAtMs: nil)
        #expect(verifier.verify(after, nowMs: now).status == .notAuthentic)
        let before = try receipt(payload(purchasedAtMs: retiredAt - 1), signedAtMs: nil)
        #expect(verifier.verify(before, nowMs: now).status == .valid)
        // A purchase settled after a rotation is signed by a key newer than its purchase date: not refused.
        let settledLater = try receipt(payload(purchasedAtMs: signer.notBeforeMs - 5_000), signedAtMs: nil)
        #expect(verifier.verify(settledLater, nowMs: now).status == .valid)
    }
}
