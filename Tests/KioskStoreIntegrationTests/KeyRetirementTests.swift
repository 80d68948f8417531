import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskWire
import Testing

@testable import KioskStore

/// `keys retire`: a retired key stops verifying what it signed after its retirement, keeps verifying
/// what it signed before, and never signs again; the active key cannot be retired.
@Suite(.timeLimit(.minutes(1))) struct KeyRetirementTests {
    /// A receipt for `accountID` signed by `key` at `signedAtMs`, as the store signs them.
    func receipt(
        by key: ReceiptSigningKey, signedAtMs: Int64, accountID: String, transactionID: String
    ) throws -> [UInt8] {
        let payload = ReceiptV1.ReceiptPayload(
            transactionID: transactionID, originalTransactionID: transactionID, productID: "filter.sepia",
            productType: .nonConsumable,
            quantity: 1, purchaseDateMs: signedAtMs, accountID: accountID, bundleID: testCatalog.bundleID,
            environment: .sandbox)
        return try key.sign(payload, signedAtMs: signedAtMs).serializedBytes()
    }

    @Test func retiredKeyStopsVerifyingReceiptsSignedAfterItsRetirement() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let account = try await store.store.authenticate(token: token)
            let old = try #require(try await store.buy("credits.5", token: token).transaction).signedReceipt
            let first = try store.store.keys.activeKey()
            #expect(
                try ReceiptV1.ReceiptPayload(serializedBytes: ReceiptV1.SignedReceipt(serializedBytes: old).payload)
                    .signedDateMs == store.clock.now)

            store.clock.advance(byMs: 1_000)
            let second = try store.store.rotateKeys()
            store.clock.advance(byMs: 1_000)
            let retiredAt = store.clock.now
            let beforeRetirement = try receipt(
                by: first, signedAtMs: retiredAt - 1, accountID: account.id, transactionID: "tx_before")
            let afterRetirement = try receipt(
                by: first, signedAtMs: retiredAt + 1, accountID: account.id, transactionID: "tx_after")
            #expect(try await store.verify(afterRetirement, token: token).status == 0)

            let retired = try store.store.retireKey(id: first.id)
            #expect(retired.id == first.id && retired.notAfterMs == retiredAt)
            #expect(try store.store.publicKeys().map(\.notAfterMs) == [retiredAt, 0])
            #expect(retired.message.notAfterMs == retiredAt)

            // This store's VerifyReceipt applies it at once.
            let refused = try await store.verify(afterRetirement, token: token)
            #expect(refused.status == 21003)
            #expect(
                refused.message.contains(first.id) && refused.message.contains("\(retiredAt)"), "\(refused.message)")
            #expect(try await store.verify(old, token: token).status == 0)
            #expect(try await store.verify(beforeRetirement, token: token).status == 0)

            // The store signs with the newer key, never with the retired one.
            store.clock.advance(byMs: 1_000)
            #expect(try store.store.keys.activeKey().id == second.id)
            let fresh = try #require(try await store.buy("credits.5", token: token).transaction).signedReceipt
            #expect(try ReceiptV1.SignedReceipt(serializedBytes: fresh).keyID == second.id)
            #expect(try await store.verify(fresh, token: token).status == 0)
        }
    }

    @Test func theActiveKeyCannotBeRetiredUntilANewerOneSigns() async throws {
        try await StoreFixture.with { store in
            let only = try store.store.keys.activeKey()
            let refused = try #require(throws: StoreError.self) { try store.store.retireKey(id: only.id) }
            #expect(refused.kind == .conflict)
            #expect(
                refused.message.contains("active key") && refused.message.contains("rotate first"), "\(refused.message)"
            )
            #expect(try store.store.publicKeys().allSatisfy { !$0.isRetired })

            store.clock.advance(byMs: 1_000)
            let newer = try store.store.rotateKeys()
            // The newest key is the active one in turn.
            let newest = try #require(throws: StoreError.self) { try store.store.retireKey(id: newer.id) }
            #expect(newest.kind == .conflict)
            // Not before the key started signing.
            let early = try #require(throws: StoreError.self) {
                try store.store.retireKey(id: only.id, atMs: only.notBeforeMs - 1)
            }
            #expect(early.kind == .invalidRequest)
            #expect(early.message.contains("\(only.notBeforeMs)"), "\(early.message)")
            // Now the first key can go; again at the same time is a no-op, later is refused.
            #expect(try store.store.retireKey(id: only.id, atMs: store.clock.now).notAfterMs == store.clock.now)
            #expect(try store.store.retireKey(id: only.id, atMs: store.clock.now).notAfterMs == store.clock.now)
            let later = try #require(throws: StoreError.self) {
                try store.store.retireKey(id: only.id, atMs: store.clock.now + 1)
            }
            #expect(later.kind == .conflict)
        }
    }

    @Test func anUnknownKeyIDIsNotFound() async throws {
        try await StoreFixture.with { store in
            let error = try #require(throws: StoreError.self) {
                try store.store.retireKey(id: "ed25519-0000000000000000")
            }
            #expect(error.kind == .notFound)
            #expect(error.message.contains("ed25519-0000000000000000"), "\(error.message)")
            #expect(error.code == .notFound)
        }
    }

    @Test func keysRetireOnTheCommandLine() async throws {
        try await StoreFixture.with { store in
            let dir = store.dataDirectory
            let token = try store.newAccount()
            let account = try await store.store.authenticate(token: token)
            let old = try #require(try await store.buy("credits.5", token: token).transaction).signedReceipt
            let first = try store.store.keys.activeKey()

            // The active key: refused, with what to do.
            let active = try await StoreProcess.outcome(["keys", "retire", first.id, "--data-dir", dir])
            #expect(active.status != 0)
            #expect(active.errors.contains("rotate first"), "\(active.errors)")
            let unknown = try await StoreProcess.outcome([
                "keys", "retire", "ed25519-0000000000000000", "--data-dir", dir,
            ])
            #expect(unknown.status != 0)
            #expect(unknown.errors.contains("no signing key ed25519-0000000000000000"), "\(unknown.errors)")

            _ = try await StoreProcess.run(["keys", "rotate", "--data-dir", dir])
            let badTime = try await StoreProcess.outcome([
                "keys", "retire", first.id, "--at", "yesterday", "--data-dir", dir,
            ])
            #expect(badTime.status == 64)
            #expect(badTime.errors.contains("--at must be ISO 8601"), "\(badTime.errors)")
            // The test clock starts at 1_800_000_000_000 ms = 2027-01-15T08:00:00Z; retire one second later.
            let retiredAt = store.clock.now + 1_000
            let retired = try await StoreProcess.run([
                "keys", "retire", first.id, "--at", "2027-01-15T08:00:01Z", "--data-dir", dir,
            ])
            #expect(retired.contains(first.id) && retired.contains("\(retiredAt)"), "\(retired)")

            let exported = try await StoreProcess.run(["keys", "export", "--data-dir", dir])
            let json = try JSONSerialization.jsonObject(with: Data(exported.utf8)) as? [String: Any]
            let entries = try #require(json?["keys"] as? [[String: Any]])
            #expect(entries.map { ($0["not_after_ms"] as? Int).map(Int64.init) } == [retiredAt, 0])

            // A verifier with the exported keys (as a content service gets them) honours the retirement.
            let keys = try entries.map { entry in
                let base64 = try #require(entry["ed25519_public_key"] as? String)
                return ReceiptPublicKey(
                    id: try #require(entry["key_id"] as? String),
                    rawRepresentation: Array(try #require(Data(base64Encoded: base64))),
                    notBeforeMs: Int64(try #require(entry["not_before_ms"] as? Int)),
                    notAfterMs: Int64(try #require(entry["not_after_ms"] as? Int)))
            }
            let verifier = ReceiptVerifier(keys: keys, environment: .sandbox, bundleID: testCatalog.bundleID)
            let late = try receipt(
                by: first, signedAtMs: retiredAt + 1, accountID: account.id, transactionID: "tx_late")
            let early = try receipt(by: first, signedAtMs: retiredAt, accountID: account.id, transactionID: "tx_early")
            #expect(verifier.verify(late, nowMs: store.clock.now).status == .notAuthentic)
            #expect(verifier.verify(early, nowMs: store.clock.now).status == .valid)
            #expect(verifier.verify(old, nowMs: store.clock.now).status == .valid)

            // So does a store opened on the data dir afterwards (a restarted process).
            let reopened = try Store(configuration: store.store.configuration)
            #expect(try await reopened.verifyReceipt(late).check.status == .notAuthentic)
            #expect(try await reopened.verifyReceipt(old).check.status == .valid)
        }
    }
}
