import Crypto
import KioskAPI
import KioskSigning
import KioskWire
import Testing

@Suite struct ReceiptTests {
    let key = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: 1)
    let now: Int64 = 1_800_000_000_000

    func payload(environment: ReceiptV1.Environment = .production, expires: Int64 = 0) -> ReceiptV1.ReceiptPayload {
        ReceiptV1.ReceiptPayload(
            transactionID: "tx_1", originalTransactionID: "tx_1", productID: "book.swift", productType: .nonConsumable,
            quantity: 1,
            purchaseDateMs: now - 1000, expiresDateMs: expires, accountID: "acct_1", bundleID: "com.example",
            environment: environment)
    }

    @Test func signedReceiptVerifiesOffline() throws {
        let receipt = try key.sign(payload()).serializedBytes()
        let verifier = ReceiptVerifier(keys: [key.publicKey], environment: .production)
        let check = verifier.verify(receipt, nowMs: now)
        #expect(check.status == .valid)
        #expect(check.payload?.keyID == key.id)
        #expect(check.payload?.productID == "book.swift")
    }

    @Test func signatureCoversThePrefixedPayload() throws {
        let signed = try key.sign(payload())
        let raw = try Curve25519.Signing.PublicKey(rawRepresentation: key.publicKey.rawRepresentation)
        #expect(raw.isValidSignature(signed.signature, for: Array("KIOSK-RECEIPT-V1\n".utf8) + signed.payload))
        #expect(!raw.isValidSignature(signed.signature, for: signed.payload))
    }

    @Test func keyIDIsDerivedFromThePublicKey() {
        #expect(key.id.hasPrefix("ed25519-"))
        #expect(key.id.count == "ed25519-".count + 16)
        #expect(ReceiptPublicKey.keyID(for: key.publicKey.rawRepresentation) == key.id)
    }

    @Test func environmentMatrix() throws {
        let sandboxReceipt = try key.sign(payload(environment: .sandbox)).serializedBytes()
        let productionReceipt = try key.sign(payload(environment: .production)).serializedBytes()
        let production = ReceiptVerifier(keys: [key.publicKey], environment: .production)
        let productionAcceptingSandbox = ReceiptVerifier(
            keys: [key.publicKey], environment: .production, acceptSandbox: true)
        let sandbox = ReceiptVerifier(keys: [key.publicKey], environment: .sandbox)
        #expect(production.verify(sandboxReceipt, nowMs: now).status == .sandboxReceiptInProduction)
        #expect(productionAcceptingSandbox.verify(sandboxReceipt, nowMs: now).status == .valid)
        #expect(sandbox.verify(productionReceipt, nowMs: now).status == .productionReceiptInSandbox)
        #expect(sandbox.verify(sandboxReceipt, nowMs: now).status == .valid)
        // A verifier without the other environment's key still names the environment.
        let stranger = ReceiptVerifier(keys: [], environment: .production)
        #expect(stranger.verify(sandboxReceipt, nowMs: now).status == .sandboxReceiptInProduction)
        #expect(stranger.verify(productionReceipt, nowMs: now).status == .notAuthentic)
    }

    @Test func expiredSubscriptionIs21006() throws {
        let verifier = ReceiptVerifier(keys: [key.publicKey], environment: .production)
        let live = try key.sign(payload(expires: now + 1)).serializedBytes()
        let expired = try key.sign(payload(expires: now)).serializedBytes()
        #expect(verifier.verify(live, nowMs: now).status == .valid)
        #expect(verifier.verify(expired, nowMs: now).status == .subscriptionExpired)
    }

    @Test func signatureOfAnotherKeyIsNotAuthentic() throws {
        let other = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: 1)
        var forged = try other.sign(payload())
        forged.keyID = key.id  // claims the trusted key
        let verifier = ReceiptVerifier(keys: [key.publicKey], environment: .production)
        #expect(verifier.verify(try forged.serializedBytes(), nowMs: now).status == .notAuthentic)
    }

    /// An encoded receipt is checked where protobuf-c unpacked it, a decoded one from its arrays: both
    /// give the same answer, malformed and forged ones included.
    @Test func encodedAndDecodedReceiptsGetTheSameAnswer() throws {
        let verifier = ReceiptVerifier(keys: [key.publicKey], environment: .production)
        let good = try key.sign(payload())
        var tampered = good
        tampered.payload[tampered.payload.count - 1] ^= 1
        var shortSignature = good
        shortSignature.signature.removeLast()
        var noKeyID = good
        noKeyID.keyID = ""
        var unknownKey = good
        unknownKey.keyID = "ed25519-0000000000000000"
        var noPayload = good
        noPayload.payload = []
        let cases: [(ReceiptV1.SignedReceipt, ReceiptStatus)] = [
            (good, .valid), (tampered, .notAuthentic), (shortSignature, .malformed), (noKeyID, .malformed),
            (unknownKey, .notAuthentic), (noPayload, .malformed),
        ]
        for (signed, status) in cases {
            let fromBytes = verifier.verify(try signed.serializedBytes(), nowMs: now)
            #expect(fromBytes.status == status)
            #expect(fromBytes == verifier.verify(signed, nowMs: now))
        }
        let decoded = try ReceiptV1.ReceiptPayload(serializedBytes: good.payload)
        #expect(verifier.verify(try good.serializedBytes(), nowMs: now).payload == decoded)

        // An envelope whose key id is not UTF-8, and bytes that are no message at all: not a signed receipt.
        func field(_ number: UInt8, _ bytes: [UInt8]) -> [UInt8] {
            var out: [UInt8] = [number << 3 | 2]
            var length = bytes.count
            while length >= 0x80 {
                out.append(UInt8(length & 0x7f) | 0x80)
                length >>= 7
            }
            return out + [UInt8(length)] + bytes
        }
        let badKeyID = field(1, good.payload) + field(2, good.signature) + field(3, [0xff, 0xfe])
        #expect(
            verifier.verify(badKeyID, nowMs: now)
                == ReceiptCheck(
                    status: .malformed, message: "receipt is not a signed receipt (\(badKeyID.count) bytes)"))
        #expect(verifier.verify([0xff, 0xff], nowMs: now).status == .malformed)
    }

    /// The reading the content service's cache uses (`verify(_:nowMs:keeping:)`) answers as `verify(_:nowMs:)`
    /// does, and reads a payload only for a valid receipt: payload strings that are not UTF-8, a payload
    /// naming another key, another app's receipt and a key id over 32 bytes included.
    @Test func keepingReadsValidReceiptsOnlyAndAgrees() throws {
        func signedRaw(_ payload: [UInt8], keyID: String? = nil) -> [UInt8] {
            let signature = try! key.privateKey.signature(for: receiptSignaturePrefix + payload)
            return try! ReceiptV1.SignedReceipt(payload: payload, signature: Array(signature), keyID: keyID ?? key.id)
                .serializedBytes()
        }
        var stamped = payload()
        stamped.keyID = key.id
        // offer_id (field 14) holding a byte that is no UTF-8, after an otherwise valid payload.
        let notUTF8 = signedRaw(stamped.serializedBytes() + [14 << 3 | 2, 2, 0x41, 0xff])
        let nonASCII = signedRaw(stamped.serializedBytes() + [14 << 3 | 2, 3] + Array("é!".utf8))
        var otherKeyID = stamped
        otherKeyID.keyID = "ed25519-ffffffffffffffff"
        var otherApp = payload()
        otherApp.bundleID = "com.other"
        let verifier = ReceiptVerifier(keys: [key.publicKey], environment: .production, bundleID: "com.example")
        let cases: [([UInt8], ReceiptStatus)] = [
            (try key.sign(payload()).serializedBytes(), .valid), (nonASCII, .valid), (notUTF8, .malformed),
            (signedRaw(otherKeyID.serializedBytes()), .malformed),
            (try key.sign(otherApp).serializedBytes(), .notAuthentic),
            (try key.sign(payload(expires: now)).serializedBytes(), .subscriptionExpired),
            (try key.sign(payload(environment: .sandbox)).serializedBytes(), .sandboxReceiptInProduction),
        ]
        for (receipt, status) in cases {
            let full = verifier.verify(receipt, nowMs: now)
            let (check, kept) = verifier.verify(receipt, nowMs: now) { payload throws(WireError) in
                try CField.string(payload.transaction_id, field: "transaction_id")
            }
            #expect(full.status == status)
            #expect(check.status == full.status && check.message == full.message)
            #expect(check.payload == nil)
            #expect(kept == (status == .valid ? "tx_1" : nil))
            #expect(full == verifier.verify(try ReceiptV1.SignedReceipt(serializedBytes: receipt), nowMs: now))
        }
        #expect(verifier.verify(try key.sign(otherApp).serializedBytes(), nowMs: now).message.contains("\"com.other\""))

        // A key id over 32 bytes is looked up by its string.
        let longID = ReceiptPublicKey(
            id: String(repeating: "k", count: 40), rawRepresentation: key.publicKey.rawRepresentation, notBeforeMs: 1)
        var long = payload()
        long.keyID = longID.id
        let longReceipt = signedRaw(long.serializedBytes(), keyID: longID.id)
        #expect(
            ReceiptVerifier(keys: [longID], environment: .production).verify(longReceipt, nowMs: now).status == .valid)
        #expect(verifier.verify(longReceipt, nowMs: now).status == .notAuthentic)
    }

    @Test func generatedMessagesRoundTrip() throws {
        let response = StoreV1.VerifyReceiptResponse(
            status: 21006, message: "subscription expired ⌛", receipt: payload(expires: 5),
            revocationDateMs: -1, revocationReason: "")
        #expect(try StoreV1.VerifyReceiptResponse(serializedBytes: response.serializedBytes()) == response)
        let list = StoreV1.ListProductsResponse(
            products: [
                StoreV1.Product(
                    id: "a", type: .consumable, title: "Ä", price: "0.99", currency: "EUR", creditsPerUnit: .max,
                    maxQuantity: 10, hostedContent: true)
            ],
            invalidProductIDs: ["x", "", "ü"])
        #expect(try StoreV1.ListProductsResponse(serializedBytes: list.serializedBytes()) == list)
        #expect(try StoreV1.GetAccountRequest(serializedBytes: []) == StoreV1.GetAccountRequest())
        #expect(ReceiptStatus(rawValue: 21007) == .sandboxReceiptInProduction)
        #expect(ReceiptStatus.notAuthentic.description == "21003 (not_authentic)")
    }
}
