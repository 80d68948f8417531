import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import Testing

/// `kiosk-store serve --log-format json`: every line of standard error is one JSON object with a timestamp, a
/// level and a message; a purchase's line carries the request id its caller chose (or one the store made) and the
/// account id; no token or secret the test created appears anywhere in the log.
@Suite(.timeLimit(.minutes(2))) struct JSONLogTests {
    @Test func linesParseAndCarryTheRequestIDWithNoSecret() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let created = try await StoreProcess.run(["account", "create", "--data-dir", directory, "--json"])
        let token = try #require(
            created.split(separator: "\"").drop { $0 != "token" }.dropFirst(2).first.map(String.init))
        let credentialOutput = try await StoreProcess.run(
            ["service", "create", "--role", "admin", "--data-dir", directory, "--json"])
        let secret = try #require(
            credentialOutput.split(separator: "\"").drop { $0 != "credential" }.dropFirst(2).first.map(String.init))
        let log = directory + "/store.log"
        let store = try await StoreProcess(
            dataDirectory: directory, extraArguments: ["--log-format", "json", "--log-level", "debug"], errorLog: log)
        let client = RPCClient(host: "127.0.0.1", port: store.port)
        func purchase(_ product: String, requestID: String?) async throws -> StoreV1.PurchaseResponse {
            var metadata = Metadata()
            metadata.add("authorization", "Bearer \(token)")
            if let requestID { metadata.add(RequestScope.metadataKey, requestID) }
            return try await client.unary(
                "/kiosk.store.v1.Store/Purchase",
                request: StoreV1.PurchaseRequest(productID: product, quantity: 1, paymentMethod: goodCard),
                response: StoreV1.PurchaseResponse.self, options: CallOptions(timeout: .seconds(10), metadata: metadata)
            )
        }
        let chosen = try await purchase("credits.5", requestID: "checkout-7f3a")
        let made = try await purchase("book.swift", requestID: nil)
        // A request id that could forge a line is not taken: the store makes its own.
        _ = try await purchase("credits.5", requestID: "evil\n{\"level\":\"critical\"}")
        await client.close()
        await store.signal(SIGTERM)

        let text = try String(contentsOfFile: log, encoding: .utf8)
        let lines = text.split(separator: "\n")
        #expect(lines.count >= 4, "\(text)")
        var purchases: [[String: Any]] = []
        for line in lines {
            let object = try #require(
                try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not JSON: \(line)")
            #expect(object["timestamp"] is String && object["level"] is String && object["message"] is String)
            if object["message"] as? String == "purchase" { purchases.append(object) }
        }
        #expect(purchases.count == 3, "\(text)")
        let first = try #require(
            purchases.first { $0["transaction_id"] as? String == chosen.transaction?.transactionID })
        #expect(first["request_id"] as? String == "checkout-7f3a")
        #expect(first["rpc.method"] as? String == "/kiosk.store.v1.Store/Purchase")
        #expect((first["account_id"] as? String)?.isEmpty == false)
        let second = try #require(
            purchases.first { $0["transaction_id"] as? String == made.transaction?.transactionID })
        let madeID = try #require(second["request_id"] as? String)
        #expect(RequestScope.isAcceptable(madeID) && madeID != "checkout-7f3a")
        #expect(purchases.allSatisfy { ($0["request_id"] as? String).map(RequestScope.isAcceptable) == true })
        #expect(!text.contains("\"critical\""), "a chosen request id forged a line")
        // No secret at any level: the account's token, the admin credential, the card.
        for secret in [token, secret, "4242424242424242"] {
            #expect(!text.contains(secret), "the log holds a secret")
        }
    }
}
