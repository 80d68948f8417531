import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

@Suite(.timeLimit(.minutes(1))) struct ReceiptVerificationTests {
    @Test func everyFlippedBitOfPayloadOrSignatureIsNotAuthentic() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let receipt = try #require(try await store.buy("filter.sepia", token: token).transaction).signedReceipt
            let signed = try ReceiptV1.SignedReceipt(serializedBytes: receipt)
            var checked = 0
            for field in ["payload", "signature"] {
                let bytes = field == "payload" ? signed.payload : signed.signature
                for index in bytes.indices {
                    for bit in 0..<8 {
                        var tampered = signed
                        var changed = bytes
                        changed[index] ^= UInt8(1 << bit)
                        if field == "payload" { tampered.payload = changed } else { tampered.signature = changed }
                        let result = try await store.store.verifyReceipt(tampered.serializedBytes()).check
                        #expect(
                            result.status.rawValue == 21003,
                            "\(field) byte \(index) bit \(bit): \(result.status) \(result.message)")
                        checked += 1
                    }
                }
            }
            #expect(checked == (signed.payload.count + 64) * 8)
            // And through the RPC, one of each.
            var tampered = signed
            tampered.signature[0] ^= 1
            #expect(try await store.verify(tampered.serializedBytes(), token: token).status == 21003)
            tampered = signed
            tampered.keyID = "ed25519-0000000000000000"
            #expect(try await store.verify(tampered.serializedBytes(), token: token).status == 21003)
        }
    }

    @Test func truncatedOrGarbageReceiptsAreMalformed() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let receipt = try #require(try await store.buy("filter.sepia", token: token).transaction).signedReceipt
            for length in 0..<receipt.count {
                let result = try await store.store.verifyReceipt(Array(receipt[..<length])).check
                #expect(result.status.rawValue == 21002, "truncated to \(length) bytes: \(result.status)")
            }
            for garbage in [[UInt8](), [0xFF], Array("hello".utf8), [UInt8](repeating: 0, count: 100)] {
                #expect(try await store.verify(garbage, token: token).status == 21002)
            }
        }
    }

    @Test func aNewKeyVerifiesAtOnceEvenRightAfterAJunkKeyID() async throws {
        try await StoreFixture.with { fixture in
            let token = try fixture.newAccount()
            let account = try await fixture.store.authenticate(token: token)
            let real = try #require(try await fixture.buy("filter.sepia", token: token).transaction).signedReceipt
            // A receipt naming an unknown key makes the store reload its keys now …
            var junk = try ReceiptV1.SignedReceipt(serializedBytes: real)
            junk.keyID = "junk-key"
            #expect(try await fixture.store.verifyReceipt(junk.serializedBytes()).check.status == .notAuthentic)
            // … then `keys rotate` runs in another process, and a receipt is signed with the new key.
            let other = try Store(
                configuration: StoreConfiguration(dataDirectory: fixture.dataDirectory, catalog: testCatalog)
                    .onTestLedger())
            _ = try other.rotateKeys()
            let fresh = try #require(
                try other.mintReceipts(accountID: account.id, productID: "filter.sepia", count: 1).first)
            // Within the reload's rate limit it is still valid: the call waits for the next reload instead of refusing it.
            #expect(try await fixture.store.verifyReceipt(fresh).check.status == .valid)
        }
    }

    @Test func sandboxAndProductionReceiptsAreToldApart() async throws {
        try await StoreFixture.with(environment: .sandbox) { sandbox in
            try await StoreFixture.with(environment: .production) { production in
                let sandboxToken = try sandbox.newAccount()
                let productionToken = try production.newAccount()
                let sandboxReceipt = try #require(
                    try await sandbox.buy("filter.sepia", token: sandboxToken).transaction
                ).signedReceipt
                let productionReceipt = try #require(
                    try await production.buy("filter.sepia", method: liveCard, token: productionToken).transaction
                ).signedReceipt
                let atProduction = try await production.verify(sandboxReceipt, token: productionToken)
                #expect(atProduction.status == 21007)
                #expect(atProduction.receipt?.environment == .sandbox)
                #expect(try await sandbox.verify(productionReceipt, token: sandboxToken).status == 21008)
                #expect(try await production.verify(productionReceipt, token: productionToken).status == 0)
            }
        }
    }

    @Test func refundedReceiptIsValidWithRevocationAndIsWatched() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let transaction = try #require(try await store.buy("filter.sepia", token: token).transaction)
            var metadata = Metadata()
            metadata.add(
                "authorization",
                "Bearer \(try store.store.createServiceCredential(role: .content, name: "feed").secret)")
            var feed = store.client.serverStreaming(
                "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(since: 0),
                response: StoreV1.Revocation.self, options: CallOptions(metadata: metadata)
            ).makeAsyncIterator()
            let refundTask = Task {
                try await store.store.refund(transactionID: transaction.transactionID, reason: "customer request")
            }
            let revocation = try #require(try await nextRevocation(&feed))
            #expect(revocation.transactionID == transaction.transactionID)
            #expect(revocation.reason == "customer request")
            #expect(revocation.cursor == 1)
            _ = try await refundTask.value
            let verified = try await store.verify(transaction.signedReceipt, token: token)
            #expect(verified.status == 0)
            #expect(verified.revocationDateMs > 0)
            #expect(verified.revocationReason == "customer request")
            #expect(try await store.restore(token: token).isEmpty, "a refunded purchase is not restored")
            // A watcher resuming from its cursor sees nothing twice.
            let second = try await store.store.ledger.revocations(after: revocation.cursor)
            #expect(second.isEmpty)
            await #expect(throws: StoreError.self) {
                try await store.store.refund(transactionID: transaction.transactionID, reason: "again")
            }
        }
    }

    @Test func refundedCreditsAreTakenBackWithinTheBalance() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let transaction = try #require(try await store.buy("credits.10", quantity: 2, token: token).transaction)
            _ = try await store.call(
                "SpendCredits", StoreV1.SpendCreditsRequest(amount: 15), as: StoreV1.SpendCreditsResponse.self,
                token: token)
            _ = try await store.store.refund(transactionID: transaction.transactionID, reason: "chargeback")
            #expect(try await store.balance(token) == 0)
            let account = try await store.store.authenticate(token: token)
            #expect(try store.store.ledger.creditMovementsTotal(accountID: account.id) == 0)
        }
    }

    @Test func receiptOfAnUnknownAccountIs21010() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let payload = ReceiptV1.ReceiptPayload(
                transactionID: "tx_ghost", originalTransactionID: "tx_ghost", productID: "filter.sepia",
                productType: .nonConsumable,
                quantity: 1, purchaseDateMs: store.clock.now, accountID: "acct_ghost", bundleID: "com.example.monkeys",
                environment: .sandbox)
            let receipt = try store.store.keys.activeKey().sign(payload).serializedBytes()
            #expect(try await store.verify(receipt, token: token).status == 21010)
        }
    }

    @Test func rotatedKeysKeepVerifyingOldReceipts() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let old = try #require(try await store.buy("credits.5", token: token).transaction).signedReceipt
            let newKey = try store.store.rotateKeys()
            let fresh = try #require(try await store.buy("credits.5", token: token).transaction).signedReceipt
            #expect(try ReceiptV1.SignedReceipt(serializedBytes: fresh).keyID == newKey.id)
            #expect(try ReceiptV1.SignedReceipt(serializedBytes: old).keyID != newKey.id)
            #expect(try await store.verify(old, token: token).status == 0)
            #expect(try await store.verify(fresh, token: token).status == 0)
            let keys = try await store.call(
                "PublicKeys", StoreV1.PublicKeysRequest(), as: StoreV1.PublicKeysResponse.self, token: token)
            #expect(keys.keys.count == 2)
            #expect(keys.keys.last?.keyID == newKey.id)
            #expect(keys.keys.allSatisfy { $0.ed25519PublicKey.count == 32 })
            // An offline verifier with the exported keys agrees.
            let verifier = ReceiptVerifier(
                keys: keys.keys.map {
                    ReceiptPublicKey(id: $0.keyID, rawRepresentation: $0.ed25519PublicKey, notBeforeMs: $0.notBeforeMs)
                },
                environment: .sandbox)
            #expect(verifier.verify(old, nowMs: store.clock.now).status == .valid)
            // Private keys are kept 0600.
            let attributes = try FileManager.default.attributesOfItem(
                atPath: store.dataDirectory + "/keys/\(newKey.id).ed25519")
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        }
    }
}
