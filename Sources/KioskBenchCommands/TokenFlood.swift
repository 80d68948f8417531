import ArgumentParser
import Foundation
import KioskAPI
import KioskContent
import KioskRPC
import KioskSigning
import KioskStore
import KioskWire
import NIOConcurrencyHelpers

/// Bad tokens at the content service: how many calls they cost the store (none),
/// what they cost in memory, and whether a refund still arrives on time.
struct TokenFlood: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token-flood",
        abstract:
            "Send random and forged tokens to the content service's Authorize; count the store's calls, the RSS and a refund's arrival.",
        discussion: """
            Starts both services in this process (with --tls, over TLS). A quarter of the tokens look like account \
            tokens, a quarter like garbage access tokens, a quarter are junk of up to 4,000 characters, a quarter name \
            the store's real key with a forged signature (one signature check each). A refund is made when a quarter \
            of the flood is sent; the report says when the content service refused the refunded receipt. Exits 1 if \
            a bad token was not refused with 16, the store saw any call, or the refund took a second or more.
            """)

    @Option(help: "Tokens sent.") var tokens = 100_000
    @Option(help: "Connections (K).") var connections = 4
    @Option(help: "Calls in flight (C).") var concurrency = 64
    @OptionGroup var transport: TransportOptions
    @OptionGroup var output: OutputOptions

    func run() async throws {
        let services = try await LocalServices.start(cacheSize: 10_000, tls: transport.tls)
        try await stopping(services) { try await flood(services) }
    }

    private func flood(_ services: LocalServices) async throws {
        let store = services.store.store
        let account = try await store.authenticate(token: services.buyer.token)
        // A real purchase (the refund needs a ledger transaction).
        guard
            case .purchased(let bought) = try await store.purchase(
                account: account, productID: LocalServices.product, quantity: 1,
                paymentMethod: "test-card:4242424242424242",
                idempotencyKey: UUID().uuidString
            ).result, let receipt = bought.receipt
        else { throw ValidationError("the bench's purchase did not go through") }
        let access = try await services.buyerAccessToken()
        let keyID = try store.publicKeys().last?.id ?? ""
        let port = services.content.port ?? 0
        let clients = try (0..<max(connections, 1)).map { _ in
            RPCClient(
                host: "127.0.0.1", port: port,
                configuration: try services.clientConfiguration(ClientConfiguration(keepalive: nil)))
        }
        let legitimate = clients[0]
        func authorize(_ token: String, on client: RPCClient) async throws -> ContentV1.AuthorizeResponse {
            try await client.unary(
                "/kiosk.content.v1.Content/Authorize",
                request: ContentV1.AuthorizeRequest(signedReceipt: receipt, productID: LocalServices.product),
                response: ContentV1.AuthorizeResponse.self, options: bearer(token))
        }
        guard try await authorize(access, on: legitimate).allowed else {
            throw ValidationError("the legitimate receipt was refused")
        }
        let idleRSS = Self.residentBytes()
        let storeCallsBefore = services.store.server.callCounts
        let started = ProcessStats.current()
        let clock = ContinuousClock.now

        let sent = NIOLockedValueBox(0)
        let refused = NIOLockedValueBox(0)
        let other = NIOLockedValueBox(0)
        let refundArrival = NIOLockedValueBox<Duration?>(nil)
        let count = tokens
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in 0..<max(concurrency, 1) {
                group.addTask {
                    let client = clients[worker % clients.count]
                    while true {
                        let index = sent.withLockedValue { value -> Int in
                            defer { value += 1 }
                            return value
                        }
                        guard index < count else { return }
                        do {
                            _ = try await authorize(Self.hostileToken(index, keyID: keyID), on: client)
                            other.withLockedValue { $0 += 1 }
                        } catch let error as RPCError where error.code == .unauthenticated {
                            refused.withLockedValue { $0 += 1 }
                        } catch {
                            other.withLockedValue { $0 += 1 }
                        }
                    }
                }
            }
            group.addTask {
                while sent.withLockedValue({ $0 }) < count / 4 { try await Task.sleep(for: .milliseconds(1)) }
                _ = try await store.refund(transactionID: bought.id, reason: "refund during the flood")
                let refunded = ContinuousClock.now
                while refunded.duration(to: .now) < .seconds(5) {
                    if try await !authorize(access, on: legitimate).allowed {
                        refundArrival.withLockedValue { $0 = refunded.duration(to: .now) }
                        return
                    }
                    try await Task.sleep(for: .milliseconds(2))
                }
            }
            try await group.waitForAll()
        }
        let elapsed = clock.duration(to: .now)
        let storeCalls =
            services.store.server.callCounts.reduce(0) { $0 + $1.value } - storeCallsBefore.reduce(0) { $0 + $1.value }
        let afterRSS = Self.residentBytes()
        for client in clients { await client.close() }
        let arrival = refundArrival.withLockedValue { $0 }
        let report = Report(
            title: "token flood at the content service (\(transport.tls ? "TLS" : "plaintext"))",
            fields: [
                ("tokens", count), ("refused_16", refused.withLockedValue { $0 }),
                ("other_answers", other.withLockedValue { $0 }),
                ("tokens/s", Int(Double(count) / elapsed.seconds)), ("store_calls_during_flood", storeCalls),
                ("rss_idle_mib", round2(Double(idleRSS) / 1_048_576)),
                ("rss_after_mib", round2(Double(afterRSS) / 1_048_576)),
                ("access_tokens_cached", services.content.stats.accessTokensCached),
                ("refund_reached_content_ms", arrival.map { round2($0.seconds * 1000) } ?? -1),
                ("connections", connections), ("concurrency", concurrency),
            ])
        try output.finish(report, started: started, serverBefore: nil)
        if refused.withLockedValue({ $0 }) != count || storeCalls != 0 || (arrival ?? .seconds(5)) >= .seconds(1) {
            throw ExitCode(1)
        }
    }

    /// The process's resident set now (VmRSS), in bytes.
    static func residentBytes() -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let kib = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?.split(separator: " ").dropFirst()
            .first.flatMap { Int($0) }
        return (kib ?? 0) * 1024
    }

    static func hostileToken(_ index: Int, keyID: String) -> String {
        func random(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255) } }
        switch index % 4 {
        case 0:
            return "kiosk_" + random(32).map { String(format: "%02x", $0) }.joined()
        case 1:
            return AccessToken.scheme + Data(random(150)).base64EncodedString()
        case 2:
            return String(repeating: "x", count: Int.random(in: 1...4000))
        default:
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let payload = ReceiptV1.AccessTokenPayload(
                accountID: "acct_\(index)", audience: AccessToken.contentAudience, issuedMs: now,
                expiresMs: now + 600_000,
                keyID: keyID, environment: .sandbox)
            return AccessToken.encode(
                ReceiptV1.SignedAccessToken(payload: payload.serializedBytes(), signature: random(64), keyID: keyID))
        }
    }
}
