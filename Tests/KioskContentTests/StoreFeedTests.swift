import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStore
import KioskWire
import Testing

@testable import KioskContent

/// The content service and its store: refunds, rotation, outages.
@Suite(.timeLimit(.minutes(1))) struct StoreFeedTests {
    /// Authorizes until `done` says so, at most `attempts` times; returns the elapsed time.
    func until(
        _ fixture: ContentFixture, receipt: [UInt8], token: String, attempts: Int = 500,
        _ done: (ContentV1.AuthorizeResponse) -> Bool
    ) async throws -> Duration {
        let start = ContinuousClock.now
        for _ in 0..<attempts {
            if done(try await fixture.authorize(receipt, product: "book.swift", token: token)) {
                return start.duration(to: .now)
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("condition not reached after \(attempts) attempts")
        return start.duration(to: .now)
    }

    @Test func refundFromTheCommandLineIsRefusedWithinOneSecond() async throws {
        try await ContentFixture.with(files: ["book.swift": proseBytes(1000)]) { fixture in
            let token = try fixture.newAccount()
            let transaction = try await fixture.buy("book.swift", token: token)
            #expect(try await fixture.authorize(transaction.signedReceipt, product: "book.swift", token: token).allowed)
            // `kiosk-store refund`, a separate process on the running store's data dir.
            let me =
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? CommandLine.arguments[0]
            let binary = URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent("kiosk-store").path
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = [
                "refund", transaction.transactionID, "--reason", "customer request", "--data-dir",
                fixture.storeDirectory,
            ]
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    process.waitUntilExit()
                    continuation.resume()
                }
            }
            #expect(process.terminationStatus == 0)
            let elapsed = try await until(fixture, receipt: transaction.signedReceipt, token: token) { !$0.allowed }
            #expect(elapsed < .seconds(1), "refused \(elapsed) after the refund")
            let answer = try await fixture.authorize(transaction.signedReceipt, product: "book.swift", token: token)
            #expect(answer.refusal == "revoked")
            let error = await #expect(throws: RPCError.self) {
                _ = try await fixture.download("book.swift", receipt: transaction.signedReceipt, token: token)
            }
            #expect(error?.metadata["kiosk-refusal"] == "revoked")
            #expect(fixture.content.stats.revocationsKnown == 1)
        }
    }

    @Test func rotatedKeyIsFetchedOnFirstSight() async throws {
        try await ContentFixture.with(files: ["book.swift": [1]]) { fixture in
            _ = try fixture.store.store.rotateKeys()
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            #expect(fixture.content.stats.keysKnown == 2)
        }
    }

    /// `keys retire` reaches the content service on the feed (keys_changed): a receipt the retired key signed after
    /// its retirement stops opening content within a second, even one verified and cached before.
    @Test func aKeyRetirementReachesTheContentServiceThroughTheFeed() async throws {
        try await ContentFixture.with(files: ["book.swift": [1, 2, 3]]) { fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            #expect(
                try await fixture.authorize(receipt, product: "book.swift", token: token).allowed, "verified and cached"
            )
            let signed = try ReceiptV1.SignedReceipt(serializedBytes: receipt)
            let payload = try ReceiptV1.ReceiptPayload(serializedBytes: signed.payload)
            _ = try fixture.store.store.rotateKeys()
            _ = try fixture.store.store.retireKey(id: signed.keyID, atMs: payload.signedDateMs - 1)
            let retired = ContinuousClock.now
            // The access token was signed by the retired key after its retirement too: the caller gets a new one
            // (from the new key, which the content service learns on the same feed message).
            var refusedCached = false
            fixture.accessTokens.withLockedValue { $0.removeAll() }
            for _ in 0..<200 where !refusedCached {
                do {
                    refusedCached =
                        try await fixture.authorize(receipt, product: "book.swift", token: token).status
                        == ReceiptStatus.notAuthentic.rawValue
                } catch let error as RPCError where error.code == .unauthenticated {
                    // The new key's token reached the content service before the feed message did.
                }
                if !refusedCached { try await Task.sleep(for: .milliseconds(5)) }
            }
            let elapsed = retired.duration(to: .now)
            #expect(refusedCached && elapsed < .seconds(1), "refused \(elapsed) after the retirement")
            #expect(fixture.content.stats.keysKnown == 2)
        }
    }

    @Test func storeOutageServesWithinTheStalenessBoundThen21005ThenRecovers() async throws {
        try await ContentFixture.with(files: ["book.swift": proseBytes(300_000)], maximumStaleness: .seconds(60)) {
            fixture in
            let token = try fixture.newAccount()
            let receipt = try await fixture.buy("book.swift", token: token).signedReceipt
            #expect(try await fixture.authorize(receipt, product: "book.swift", token: token).allowed)
            let port = try #require(fixture.store.port)

            await fixture.store.shutdown()
            // Within the bound: served on the last known keys and revocations.
            fixture.advanceClock(by: .seconds(59))
            #expect(
                try await fixture.download("book.swift", receipt: receipt, token: token).bytes == proseBytes(300_000))
            // Past it: 21005.
            fixture.advanceClock(by: .seconds(2))
            let stale = try await fixture.authorize(receipt, product: "book.swift", token: token)
            #expect(stale.status == 21005 && !stale.allowed)
            let error = await #expect(throws: RPCError.self) {
                _ = try await fixture.download("book.swift", receipt: receipt, token: token)
            }
            #expect(error?.code == .unavailable)
            #expect(error?.metadata["kiosk-receipt-status"] == "21005")

            // The store comes back on the same port and data dir: the content service recovers by itself.
            let revived = try StoreServer(
                store: StoreConfiguration(
                    dataDirectory: fixture.storeDirectory, catalog: hostedCatalog, environment: .sandbox,
                    revocationHeartbeat: .milliseconds(100)),
                server: ServerConfiguration(
                    port: port,
                    tls: try ServerTLSIdentity(
                        certificateChainPath: fixtureCertificates.serverCertificatePath,
                        privateKeyPath: fixtureCertificates.serverKeyPath)))
            try await revived.start()
            _ = try await until(fixture, receipt: receipt, token: token) { $0.allowed }
            #expect(try await fixture.download("book.swift", receipt: receipt, token: token).bytes.count == 300_000)
            await revived.shutdown()
        }
    }

    /// Fetching keys is not hearing about revocations: with only the feed failing, the content service
    /// must not count itself current, or refunded receipts would keep downloading with no staleness bound.
    @Test func keysWithoutTheRevocationFeedAreNotEnough() async throws {
        let storeDirectory = temporaryDirectory("feedless-store")
        let contentDirectory = try makeContentDirectory(files: ["book.swift": Array("a book".utf8)])
        defer {
            try? FileManager.default.removeItem(atPath: storeDirectory)
            try? FileManager.default.removeItem(atPath: contentDirectory)
        }
        let store = try Store(
            configuration: StoreConfiguration(
                dataDirectory: storeDirectory, catalog: hostedCatalog, environment: .sandbox))
        let server = RPCServer(services: [FeedlessStore(inner: StoreService(store: store))])
        try await server.start()
        let credential = try store.createServiceCredential(role: .content, name: "feedless").secret
        let content = try ContentServer(
            configuration: ContentConfiguration(
                contentDirectory: contentDirectory, storePort: try #require(server.port), storeCredential: credential,
                maximumStaleness: .seconds(1)))
        try await content.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(content.port))
        do {
            // The keys arrive, the feed never does: not ready.
            #expect(await content.waitUntilReady(timeout: .seconds(2)) == false)
            #expect(content.stats.keysKnown > 0)
            let buyer = try store.createAccount()
            let receipt = try #require(
                try store.mintReceipts(accountID: buyer.id, productID: "book.swift", count: 1).first)
            var metadata = Metadata()
            let access = try store.issueAccessToken(
                account: try await store.authenticate(token: buyer.token), audience: AccessToken.contentAudience)
            metadata.add("authorization", "Bearer \(access.token)")
            let answer = try await client.unary(
                "/kiosk.content.v1.Content/Authorize",
                request: ContentV1.AuthorizeRequest(signedReceipt: receipt, productID: "book.swift"),
                response: ContentV1.AuthorizeResponse.self,
                options: CallOptions(timeout: .seconds(10), metadata: metadata))
            #expect(!answer.allowed)
            #expect(answer.status == ReceiptStatus.serverUnavailable.rawValue)
        } catch {
            Issue.record(error)
        }
        await client.close()
        await content.shutdown()
        await server.shutdown()
    }
}

/// The store as the content service sees it, with its revocation feed down:
/// PublicKeys answers, WatchEvents always fails.
private struct FeedlessStore: RPCService {
    let inner: StoreService
    var serviceName: String { inner.serviceName }
    func register(in router: inout RPCRouter) {
        inner.register(in: &router)
        router.registerServerStreaming(
            "/kiosk.store.v1.Store/WatchEvents", request: StoreV1.WatchEventsRequest.self,
            response: StoreV1.WatchEventsResponse.self
        ) { _, _, _ in
            throw RPCError(.unavailable, "the revocation feed is down")
        }
    }
}
