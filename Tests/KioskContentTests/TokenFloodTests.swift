import Crypto
import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStore
import KioskWire
import NIOConcurrencyHelpers
import Testing

@testable import KioskContent

/// Callers are resolved without amplification: bad tokens at the content service cost the store nothing.
@Suite(.timeLimit(.minutes(2))) struct TokenFloodTests {
    /// Tokens a hostile client might send: account-shaped, garbage access tokens, and access tokens that name
    /// the store's real key with a forged signature (each costs one signature check, no more).
    static func hostileTokens(count: Int, keyID: String) -> [String] {
        (0..<count).map { index in
            switch index % 4 {
            case 0:
                return "kiosk_" + (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
            case 1:
                return AccessToken.scheme + Data((0..<150).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            case 2:
                return String(repeating: "x", count: Int.random(in: 1...4000))
            default:
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                let payload = ReceiptV1.AccessTokenPayload(
                    accountID: "acct_\(index)", audience: AccessToken.contentAudience, issuedMs: now,
                    expiresMs: now + 600_000,
                    keyID: keyID, environment: .sandbox)
                let signed = ReceiptV1.SignedAccessToken(
                    payload: payload.serializedBytes(), signature: (0..<64).map { _ in UInt8.random(in: 0...255) },
                    keyID: keyID)
                return AccessToken.encode(signed)
            }
        }
    }

    @Test func aFloodOfBadTokensMakesNoStoreCallAndARefundStillArrivesWithinASecond() async throws {
        try await ContentFixture.with(files: ["book.swift": proseBytes(1000)]) { fixture in
            let token = try fixture.newAccount()
            let transaction = try await fixture.buy("book.swift", token: token)
            #expect(try await fixture.authorize(transaction.signedReceipt, product: "book.swift", token: token).allowed)
            let keyID = try #require(try fixture.store.store.publicKeys().first?.id)
            let tokens = Self.hostileTokens(count: 4000, keyID: keyID)
            let storeCallsBefore = fixture.store.server.callCounts
            let receipt = transaction.signedReceipt

            // The flood, 32 calls in flight over 4 connections; a refund lands in the middle of it.
            let clients = try (0..<4).map { _ in
                RPCClient(
                    host: "127.0.0.1", port: try #require(fixture.content.port),
                    configuration: try fixtureClientConfiguration())
            }
            let refused = NIOLockedValueBox(0)
            let next = NIOLockedValueBox(0)
            let refundLatency = NIOLockedValueBox<Duration?>(nil)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<32 {
                    group.addTask {
                        while true {
                            let index = next.withLockedValue { value -> Int in
                                defer { value += 1 }
                                return value
                            }
                            guard index < tokens.count else { return }
                            var metadata = Metadata()
                            metadata.add("authorization", "Bearer \(tokens[index])")
                            do {
                                _ = try await clients[worker % clients.count].unary(
                                    "/kiosk.content.v1.Content/Authorize",
                                    request: ContentV1.AuthorizeRequest(
                                        signedReceipt: receipt, productID: "book.swift"),
                                    response: ContentV1.AuthorizeResponse.self,
                                    options: CallOptions(timeout: .seconds(30), metadata: metadata))
                            } catch let error as RPCError where error.code == .unauthenticated {
                                refused.withLockedValue { $0 += 1 }
                            }
                        }
                    }
                }
                group.addTask {
                    // Wait until the flood is well under way, then refund and watch for the content service to refuse.
                    while next.withLockedValue({ $0 }) < tokens.count / 4 { await Task.yield() }
                    _ = try await fixture.store.store.refund(
                        transactionID: transaction.transactionID, reason: "during the flood")
                    let refunded = ContinuousClock.now
                    for _ in 0..<400 {
                        if try await !fixture.authorize(receipt, product: "book.swift", token: token).allowed {
                            refundLatency.withLockedValue { $0 = refunded.duration(to: .now) }
                            return
                        }
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
                try await group.waitForAll()
            }
            for client in clients { await client.close() }

            #expect(refused.withLockedValue { $0 } == tokens.count, "every bad token is refused with 16")
            #expect(fixture.store.server.callCounts == storeCallsBefore, "the flood made no store call")
            let latency = try #require(refundLatency.withLockedValue { $0 }, "the refund reached the content service")
            #expect(latency < .seconds(1), "the refund reached the content service \(latency) after it was made")
            #expect(fixture.content.stats.accessTokensCached == 1, "only the one valid access token is kept")
        }
    }
}
