import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStore
import KioskWire
import NIOPosix
import Testing

@testable import KioskContent

@Suite(.timeLimit(.minutes(1))) struct AccessTests {
    @Test func anotherAccountsRefundedReceiptSaysOnlyWhoseItIs() async throws {
        try await ContentFixture.with(files: ["book.swift": [1, 2, 3]]) { fixture in
            let owner = try fixture.newAccount()
            let stranger = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: owner).signedReceipt
            let transactionID = try ReceiptV1.ReceiptPayload(
                serializedBytes: try ReceiptV1.SignedReceipt(serializedBytes: receipt).payload
            ).transactionID
            _ = try await fixture.store.store.refund(transactionID: transactionID, reason: "test")
            // Bounded wait for the revocation feed to bring the refund.
            for _ in 0..<500 where fixture.content.stats.revocationsKnown == 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: owner).refusal == "revoked")
            let copied = try await fixture.authorize(receipt, product: "book.swift", token: stranger)
            #expect(
                copied.refusal == "wrong_account" && !copied.allowed,
                "a stranger learnt the receipt was refunded: \(copied.refusal)")
        }
    }

    @Test func refusalsCarryTheVerificationStatus() async throws {
        try await ContentFixture.with(files: ["book.swift": proseBytes(10_000), "file.one": [1]]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)

            var signed = try ReceiptV1.SignedReceipt(serializedBytes: receipt)
            signed.payload[signed.payload.count / 2] ^= 0x04
            let tampered = try await fixture.authorize(signed.serializedBytes(), product: "book.swift", token: token)
            #expect(tampered.status == 21003 && !tampered.allowed)

            let malformed = try await fixture.authorize(Array(receipt.prefix(20)), product: "book.swift", token: token)
            #expect(malformed.status == 21002 && !malformed.allowed)

            let stranger = try fixture.newAccount()
            let copied = try await fixture.authorize(receipt, product: "book.swift", token: stranger)
            #expect(copied.status == 0 && !copied.allowed && copied.refusal == "wrong_account")

            let otherProduct = try await fixture.authorize(receipt, product: "file.one", token: token)
            #expect(otherProduct.refusal == "wrong_product" && !otherProduct.allowed)

            // A refused download ends with a call status and the verification status in metadata.
            let error = await #expect(throws: RPCError.self) {
                _ = try await fixture.download("book.swift", receipt: signed.serializedBytes(), token: token)
            }
            #expect(error?.code == .permissionDenied)
            #expect(error?.metadata["kiosk-receipt-status"] == "21003")
            let copiedDownload = await #expect(throws: RPCError.self) {
                _ = try await fixture.download("book.swift", receipt: receipt, token: stranger)
            }
            #expect(copiedDownload?.metadata["kiosk-refusal"] == "wrong_account")
            // No token at all, or one the store does not know: UNAUTHENTICATED.
            for bad in [nil, "kiosk_forged"] as [String?] {
                let unauthenticated = await #expect(throws: RPCError.self) {
                    _ = try await fixture.authorize(receipt, product: "book.swift", token: bad)
                }
                #expect(unauthenticated?.code == .unauthenticated)
            }
        }
    }

    /// A connection's calls with the same HEADERS (the same access token) skip checking the token again
    /// only while it holds: once it expires, the next call on the same connection is refused.
    @Test func aConnectionReusesItsCallerOnlyUntilTheTokenExpires() async throws {
        try await ContentFixture.with(files: ["book.swift": [1, 2, 3]], maximumStaleness: .seconds(3600)) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            for _ in 0..<3 {
                #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            }
            // Past the access token's 600 s lifetime (the store's default), on the same connection, same HEADERS.
            // Twice the lifetime: the store issued the token by the real clock, which ran on (seconds, on a
            // loaded machine) while the content service's stayed where the fixture set it.
            fixture.advanceClock(by: .seconds(1200))
            let expired = await #expect(throws: RPCError.self) {
                _ = try await fixture.authorize(receipt, product: "book.swift", token: token)
            }
            #expect(expired?.code == .unauthenticated)
        }
    }

    /// ... and only while the key that signed it is trusted: a retirement reaches the content service on the
    /// feed, and the next call with the same token on the same connection is refused UNAUTHENTICATED, not
    /// answered from the connection's earlier check.
    @Test func aConnectionReusesItsCallerOnlyUntilTheTokensKeyIsRetired() async throws {
        try await ContentFixture.with(files: ["book.swift": [1, 2, 3]]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            for _ in 0..<3 {
                #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            }
            let signed = try ReceiptV1.SignedReceipt(serializedBytes: receipt)
            let payload = try ReceiptV1.ReceiptPayload(serializedBytes: signed.payload)
            _ = try fixture.store.store.rotateKeys()
            _ = try fixture.store.store.retireKey(id: signed.keyID, atMs: payload.signedDateMs - 1)
            var refused: RPCError?
            for _ in 0..<200 where refused == nil {
                do {
                    let answer = try await fixture.authorize(receipt, product: "book.swift", token: token)
                    // Until the feed brings the retirement: still allowed. Never a refusal of the receipt alone
                    // (which would mean the token was taken from the earlier check after the retirement).
                    #expect(answer.allowed, "answered \(answer.status) \(answer.refusal) with the retired key's token")
                    if !answer.allowed { break }
                    try await Task.sleep(for: .milliseconds(5))
                } catch let error as RPCError {
                    refused = error
                }
            }
            #expect(refused?.code == .unauthenticated)
        }
    }

    @Test func sandboxReceiptAtProductionIs21007UnlessAccepted() async throws {
        try await ContentFixture.with(files: ["book.swift": [1, 2, 3]], environment: .production) { fixture in
            let token = try fixture.newAccount()
            // The fixture's store is a sandbox store.
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            let answer = try await fixture.authorize(receipt, product: "book.swift", token: token)
            #expect(answer.status == 21007 && !answer.allowed)
            let error = await #expect(throws: RPCError.self) {
                _ = try await fixture.download("book.swift", receipt: receipt, token: token)
            }
            #expect(error?.code == .failedPrecondition)
            #expect(error?.metadata["kiosk-receipt-status"] == "21007")
        }
        try await ContentFixture.with(files: ["book.swift": [1, 2, 3]], environment: .production, acceptSandbox: true) {
            fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
        }
    }

    @Test func pathLikeOrUnknownProductIDsAreNotFound() async throws {
        try await ContentFixture.with(files: ["book.swift": [1]]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            for product in [
                "../../etc/passwd", "/etc/passwd", "files/book.swift.bin", "manifest.json", "", "book.swift/..",
            ] {
                let error = await #expect(throws: RPCError.self) {
                    _ = try await fixture.download(product, receipt: receipt, token: token)
                }
                #expect(error?.code == .notFound, "\(product)")
                let authorize = await #expect(throws: RPCError.self) {
                    _ = try await fixture.authorize(receipt, product: product, token: token)
                }
                #expect(authorize?.code == .notFound)
            }
        }
    }

    @Test func badManifestsAreRefusedAtLoad() throws {
        let outside = temporaryDirectory("outside")
        try Data("secret".utf8).write(to: URL(fileURLWithPath: outside + "/secret.txt"))
        defer { try? FileManager.default.removeItem(atPath: outside) }
        let cases: [(String, String)] = [
            (#"{"products": [{"product_id": "a", "file": "../secret.txt", "version": "1"}]}"#, "without '..'"),
            (#"{"products": [{"product_id": "a", "file": "\#(outside)/secret.txt", "version": "1"}]}"#, "without '..'"),
            (
                #"{"products": [{"product_id": "a", "file": "link.txt", "version": "1"}]}"#,
                "leads outside the content directory"
            ),
            (#"{"products": [{"product_id": "a", "file": "missing.bin", "version": "1"}]}"#, "does not exist"),
            (#"{"products": [{"product_id": "a", "file": "files", "version": "1"}]}"#, "not a readable regular file"),
            (#"{"products": [{"product_id": "a", "file": "files/x.bin"}]}"#, #"field "version""#),
            (#"{"products": [{"product_id": "../a", "file": "files/x.bin", "version": "1"}]}"#, #"field "product_id""#),
            (#"{"items": []}"#, "not a manifest"),
        ]
        for (manifest, expected) in cases {
            let directory = temporaryDirectory("manifest")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try FileManager.default.createDirectory(atPath: directory + "/files", withIntermediateDirectories: true)
            try Data([1]).write(to: URL(fileURLWithPath: directory + "/files/x.bin"))
            try FileManager.default.createSymbolicLink(
                atPath: directory + "/link.txt", withDestinationPath: outside + "/secret.txt")
            try Data(manifest.utf8).write(to: URL(fileURLWithPath: directory + "/manifest.json"))
            let error = #expect(throws: ManifestError.self) { try Manifest.load(contentDirectory: directory) }
            #expect(error?.message.contains(expected) == true, "\(error?.message ?? "") should contain \(expected)")
        }
        // A symlink that stays inside the directory is fine.
        let directory = temporaryDirectory("manifest")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Data([1]).write(to: URL(fileURLWithPath: directory + "/real.bin"))
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/alias.bin", withDestinationPath: directory + "/real.bin")
        try Data(#"{"products": [{"product_id": "a", "file": "alias.bin", "version": "1"}]}"#.utf8).write(
            to: URL(fileURLWithPath: directory + "/manifest.json"))
        #expect(try Manifest.load(contentDirectory: directory).entries.count == 1)
    }

    @Test func verifiedReceiptsAreCachedAndRevocationEvictsThem() async throws {
        try await ContentFixture.with(files: ["book.swift": [1, 2]], cacheSize: 2) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            let before = fixture.content.stats
            for _ in 0..<5 {
                #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            }
            let after = fixture.content.stats
            #expect(after.cacheMisses - before.cacheMisses == 1)
            #expect(after.cacheHits - before.cacheHits == 4)
            #expect(after.cacheEntries == 1)
            // The Stats method says the same, to the service's operator (its own credential) only.
            var operatorMetadata = Metadata()
            operatorMetadata.add("authorization", "Bearer \(fixture.serviceCredential)")
            let stats = try await fixture.contentClient.unary(
                "/kiosk.content.v1.Content/Stats", request: ContentV1.StatsRequest(),
                response: ContentV1.StatsResponse.self,
                options: CallOptions(metadata: operatorMetadata))
            #expect(stats.cacheHits == after.cacheHits && stats.cacheCapacity == 2)
            for token in [nil, token, fixture.serviceCredential + "x"] as [String?] {
                var metadata = Metadata()
                if let token { metadata.add("authorization", "Bearer \(token)") }
                let refused = await #expect(throws: RPCError.self) {
                    _ = try await fixture.contentClient.unary(
                        "/kiosk.content.v1.Content/Stats", request: ContentV1.StatsRequest(),
                        response: ContentV1.StatsResponse.self,
                        options: CallOptions(metadata: metadata))
                }
                #expect(refused?.code == .unauthenticated)
            }
            // A refund evicts the cached receipt as soon as the revocation arrives.
            let transactionID = try ReceiptV1.ReceiptPayload(
                serializedBytes: try ReceiptV1.SignedReceipt(serializedBytes: receipt).payload
            ).transactionID
            _ = try await fixture.store.store.refund(transactionID: transactionID, reason: "test")
            for _ in 0..<500 where fixture.content.stats.revocationsKnown == 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(fixture.content.stats.revocationsKnown == 1)
            #expect(fixture.content.stats.cacheEntries == 0, "evicted")
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).refusal == "revoked")
            // Bounded: three new receipts in a cache of two; the least recently used one is dropped.
            var buyers: [(token: String, receipt: [UInt8])] = []
            for _ in 0..<3 {
                let other = try fixture.newAccount()
                let bought = try await fixture.buy("book.swift", token: other).signedReceipt
                buyers.append((other, bought))
                #expect(try await fixture.authorize(bought, product: "book.swift", token: other).allowed)
            }
            #expect(fixture.content.stats.cacheEntries == 2)
            let beforeOldest = fixture.content.stats
            _ = try await fixture.authorize(buyers[0].receipt, product: "book.swift", token: buyers[0].token)
            #expect(fixture.content.stats.cacheMisses - beforeOldest.cacheMisses == 1, "the oldest was evicted")
            let beforeNewest = fixture.content.stats
            _ = try await fixture.authorize(buyers[2].receipt, product: "book.swift", token: buyers[2].token)
            #expect(fixture.content.stats.cacheHits - beforeNewest.cacheHits == 1, "the newest is still cached")
        }
    }

    @Test func theCacheKeyIsTheWholeReceiptAndLongReceiptsAreNotKept() async throws {
        // Equal bytes in two arrays are one key; one byte changed, at either end, is another.
        let bytes = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        #expect(ReceiptKey(bytes) == ReceiptKey(Array(bytes)))
        #expect(ReceiptKey(bytes).hashValue == ReceiptKey(Array(bytes)).hashValue)
        for index in [0, 150, 299] {
            var changed = bytes
            changed[index] ^= 1
            #expect(ReceiptKey(bytes) != ReceiptKey(changed))
        }
        #expect(ReceiptKey(bytes) != ReceiptKey(Array(bytes.dropLast())))
        #expect(ReceiptKey([]) == ReceiptKey([]))
        // A cached receipt with a byte of its signature changed (same length) is a miss, checked and refused.
        try await ContentFixture.with(files: ["book.swift": [1]]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            var signed = try ReceiptV1.SignedReceipt(serializedBytes: receipt)
            signed.signature[10] ^= 0x20
            let tampered = signed.serializedBytes()
            #expect(tampered.count == receipt.count && tampered != receipt)
            let before = fixture.content.stats
            let answer = try await fixture.authorize(tampered, product: "book.swift", token: token)
            #expect(!answer.allowed && answer.status == ReceiptStatus.notAuthentic.rawValue)
            #expect(fixture.content.stats.cacheMisses - before.cacheMisses == 1)
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            #expect(fixture.content.stats.cacheHits - before.cacheHits == 1)
            // The signature covers the payload only: a receipt padded with an unknown field still verifies, and
            // each padded copy is another key. Over ReceiptKey.largestCached bytes it is checked, never kept.
            #expect(receipt.count < ReceiptKey.largestCached, "a store's receipt is cached")
            var entries = fixture.content.stats.cacheEntries
            for (size, cached) in [(100, true), (2000, false), (100_000, false)] {
                let padded = receipt + [0x7A] + varint(size) + [UInt8](repeating: 0x55, count: size)  // field 15, bytes
                #expect((padded.count <= ReceiptKey.largestCached) == cached)
                let beforePadded = fixture.content.stats
                #expect(try await fixture.authorize(padded, product: "book.swift", token: token).allowed)
                #expect(try await fixture.authorize(padded, product: "book.swift", token: token).allowed)
                if cached { entries += 1 }
                #expect(fixture.content.stats.cacheEntries == entries)
                #expect(fixture.content.stats.cacheHits - beforePadded.cacheHits == (cached ? 1 : 0))
                #expect(fixture.content.stats.cacheMisses - beforePadded.cacheMisses == (cached ? 1 : 2))
            }
        }
    }

    private func varint(_ value: Int) -> [UInt8] {
        var value = UInt64(value)
        var bytes: [UInt8] = []
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        return bytes + [UInt8(value)]
    }

    /// On an event loop a verified receipt is cached once the answer is out. A key retirement in between
    /// empties the cache; the insert that follows must not put back a receipt verified with the old keys.
    @Test func aRetirementBetweenVerifyingAndCachingKeepsTheReceiptOut() async throws {
        try await ContentFixture.with(files: ["book.swift": [1]]) { fixture in
            let gate = fixture.content.gate
            // The store's keys with their retirement moved far ahead: every receipt still verifies, but the
            // windows changed, as with a retirement.
            let moved = try fixture.store.store.publicKeys().map { key in
                ReceiptPublicKey(
                    id: key.id, rawRepresentation: key.rawRepresentation, notBeforeMs: key.notBeforeMs,
                    notAfterMs: 4_000_000_000_000)
            }
            let loop = MultiThreadedEventLoopGroup.singleton.next()
            for retire in [false, true] {
                // A new buyer each time: a second purchase of the book would be the first one's receipt, cached.
                let token = try fixture.newAccount()
                let access = try #require(await fixture.contentToken(token))
                let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
                let allowed = try await loop.submit { () throws -> Bool in
                    let attempt = try gate.authorizeNow(receipt: receipt, productID: "book.swift", token: access)
                    // Before the loop runs the insert the answer left behind.
                    if retire { gate.install(keys: moved) }
                    guard case .decided(let decision) = attempt else { return false }
                    return decision.allowed
                }.get()
                #expect(allowed)
                try await loop.submit {}.get()  // after the insert
                // The first receipt was cached; the retirement emptied the cache, and the second stays out of it.
                #expect(
                    gate.stats.cacheEntries == (retire ? 0 : 1), retire ? "verified before the retirement" : "cached")
            }
        }
    }

    @Test func cacheSizeZeroTurnsCachingOff() async throws {
        try await ContentFixture.with(files: ["book.swift": [1]], cacheSize: 0) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            for _ in 0..<3 {
                #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            }
            #expect(fixture.content.stats.cacheHits == 0)
            #expect(fixture.content.stats.cacheEntries == 0)
        }
    }
}
