import Foundation
import Kiosk
import KioskTesting
import Testing

/// The `kiosk` command line against KioskTesting servers.
@Suite(.timeLimit(.minutes(1))) struct KioskCommandLineTests {
    static var binary: String {
        let me =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent("kiosk").path
    }

    struct Run {
        var status: Int32
        var output: String
        var errors: String
    }

    func kiosk(
        _ arguments: [String], session: KioskTestSession, token: String, state: String, storePort: Int? = nil
    ) async throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["KIOSK_STORE"] = "127.0.0.1:\(storePort ?? session.storePort)"
        environment["KIOSK_CONTENT"] = "127.0.0.1:\(session.contentPort)"
        environment["KIOSK_TOKEN"] = token
        environment["KIOSK_STATE_DIR"] = state
        environment["KIOSK_TLS_CA"] = session.trustRootsPath
        process.environment = environment
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let out = output.fileHandleForReading.readDataToEndOfFile()
                let err = errors.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(
                    returning: Run(
                        status: process.terminationStatus, output: String(decoding: out, as: UTF8.self),
                        errors: String(decoding: err, as: UTF8.self)))
            }
        }
    }

    @Test func buyDownloadBalanceAndExitCodes() async throws {
        let session = try await KioskTestSession.start()
        let account = try session.makeAccount()
        let state = NSTemporaryDirectory() + "kiosk-cli-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: state) }

        let bought = try await kiosk(
            ["buy", "credits.5", "--quantity", "4"], session: session, token: account.token, state: state)
        #expect(bought.status == 0, "\(bought.errors)")
        #expect(bought.output.contains("purchased credits.5 ×4"))
        let balance = try await kiosk(["balance", "--json"], session: session, token: account.token, state: state)
        #expect(balance.status == 0)
        let object = try JSONSerialization.jsonObject(with: Data(balance.output.utf8)) as? [String: Any]
        #expect((object?["balance"] as? Int) == 20)

        // Buy and download the book: the file lands in --out, checked, and the transaction is finished.
        let book = try await kiosk(
            ["buy", "book.swift", "--json"], session: session, token: account.token, state: state)
        #expect(book.status == 0)
        let receiptFile = try #require(
            (try JSONSerialization.jsonObject(with: Data(book.output.utf8)) as? [String: Any])?["receipt_file"]
                as? String)
        let out = state + "/downloads"
        let download = try await kiosk(
            ["download", "book.swift", "--out", out], session: session, token: account.token, state: state)
        #expect(download.status == 0, "\(download.errors)")
        #expect(download.output.contains("downloaded book.swift"))
        #expect(download.output.contains("downloading book.swift: "), "a plain line per step when not a terminal")
        #expect(
            [UInt8](try Data(contentsOf: URL(fileURLWithPath: out + "/book.swift")))
                == KioskTestSession.sampleContent["book.swift"])

        // verify FILE: 0, exit 0.
        let verify = try await kiosk(["verify", receiptFile], session: session, token: account.token, state: state)
        #expect(verify.status == 0)
        #expect(verify.output.contains("status 0"))

        // request-refund: pending until the operator decides; asking again shows where it stands.
        let bookID = try #require(
            (try JSONSerialization.jsonObject(with: Data(book.output.utf8)) as? [String: Any])?["transaction_id"]
                as? String)
        let asked = try await kiosk(
            ["request-refund", bookID, "--reason", "wrong book", "--json"], session: session, token: account.token,
            state: state)
        #expect(asked.status == 0, "\(asked.errors)")
        let request = try JSONSerialization.jsonObject(with: Data(asked.output.utf8)) as? [String: Any]
        #expect(request?["state"] as? String == "pending" && request?["reason"] as? String == "wrong book")
        try await session.denyRefund(transactionID: bookID, reason: "already read")
        let again = try await kiosk(["request-refund", bookID], session: session, token: account.token, state: state)
        #expect(again.status == 0 && again.output.contains("denied (already read)"), "\(again.output)")
        let unknown = try await kiosk(
            ["request-refund", "tx_unknown"], session: session, token: account.token, state: state)
        #expect(unknown.status == 1 && unknown.errors.contains("tx_unknown"), "\(unknown.status) \(unknown.errors)")

        // Refusals exit 1; a store that cannot be reached exits 3.
        let declined = try await kiosk(
            ["buy", "credits.5", "--payment-method", "test-card:4000000000000002"], session: session,
            token: account.token, state: state)
        #expect(declined.status == 1)
        #expect(declined.errors.contains("declined"))
        let tooMuch = try await kiosk(
            ["spend", "1000", "--json"], session: session, token: account.token, state: state)
        #expect(tooMuch.status == 1)
        #expect(tooMuch.output.contains("insufficientCredits"))
        let offline = try await kiosk(["balance"], session: session, token: account.token, state: state, storePort: 1)
        #expect(offline.status == 3)
        let queued = try await kiosk(
            ["buy", "credits.10"], session: session, token: account.token, state: state, storePort: 1)
        #expect(queued.status == 3)
        #expect(queued.output.contains("queued"))
        // The next run against the store sends the queued payment: 20 + 10.
        let later = try await kiosk(["balance", "--json"], session: session, token: account.token, state: state)
        #expect(
            (try JSONSerialization.jsonObject(with: Data(later.output.utf8)) as? [String: Any])?["balance"] as? Int
                == 30)
        #expect(session.payments.chargeCount == 3)
        let usage = try await kiosk(["buy"], session: session, token: account.token, state: state)
        #expect(usage.status == 64)

        // An offer code: redeemed (credits, free); the same code again, refused with its reason (exit 1).
        let codes = try await session.makeOfferCodes(productID: "credits.5", count: 1, quantity: 2)
        let redeemed = try await kiosk(
            ["redeem", codes[0], "--json"], session: session, token: account.token, state: state)
        let redemption = try JSONSerialization.jsonObject(with: Data(redeemed.output.utf8)) as? [String: Any]
        #expect(redeemed.status == 0 && redemption?["state"] as? String == "purchased", "\(redeemed.errors)")
        #expect(
            (redemption?["offer_id"] as? String)?.hasPrefix("code:") == true && redemption?["quantity"] as? Int == 2)
        let reused = try await kiosk(["redeem", codes[0]], session: session, token: account.token, state: state)
        #expect(reused.status == 1 && reused.errors.contains("offer_code_used"), "\(reused.status) \(reused.errors)")
        await session.shutdown()
    }

    /// Every `--json` answer is one object on one line whose keys scripts read; absent values are left out, not null.
    @Test func jsonOutputsHaveTheDocumentedKeys() async throws {
        let session = try await KioskTestSession.start()
        let account = try session.makeAccount()
        let state = NSTemporaryDirectory() + "kiosk-cli-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: state) }
        func json(_ arguments: [String], status: Int32 = 0) async throws -> [String: Any] {
            let run = try await kiosk(arguments + ["--json"], session: session, token: account.token, state: state)
            #expect(run.status == status, "\(arguments): \(run.errors)")
            #expect(run.output.split(separator: "\n").count == 1, "one line: \(run.output)")
            #expect(!run.output.contains(":null"), "no key is written as null")
            return try #require(try JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [String: Any])
        }
        let products = try await json(["products", "credits.5", "nope"])
        let product = try #require((products["products"] as? [[String: Any]])?.first)
        #expect(Set(product.keys) == ["id", "type", "title", "price", "currency", "display_price"])
        #expect(products["invalid_product_ids"] as? [String] == ["nope"])
        #expect(products["storefront"] as? String == "USA")

        let bought = try await json(["buy", "book.swift"])
        #expect(bought["state"] as? String == "purchased" && bought["product_type"] as? String == "non-consumable")
        // Exactly the documented keys of a non-consumable just bought: the optional ones (expiry, offer, revocation)
        // have no value, so they are left out.
        #expect(
            Set(bought.keys) == [
                "transaction_id", "original_transaction_id", "product_id", "product_type", "quantity",
                "purchase_date", "finished", "environment", "state", "receipt_file", "price", "currency", "storefront",
            ])
        #expect(bought["price"] as? String == "9.99" && bought["storefront"] as? String == "USA")
        let receipt = try #require(bought["receipt_file"] as? String)
        #expect(!receipt.contains("\\/"))

        let history = try #require(try await json(["history"])["transactions"] as? [[String: Any]])
        #expect(history.map { $0["transaction_id"] as? String } == [bought["transaction_id"] as? String])
        #expect(history.first?["state"] as? String == "PURCHASED" && history.first?["receipt_file"] == nil)
        #expect((try await json(["entitlements"])["entitlements"] as? [[String: Any]])?.count == 1)
        // The catalog's entitlements: none held yet (the book grants none); asking for one not held exits 1.
        let access = try await json(["access"])
        #expect((access["entitlements"] as? [[String: Any]])?.isEmpty == true && access["confirmed_date"] is String)
        let pro = try #require(
            (try await json(["access", "pro"], status: 1)["entitlements"] as? [[String: Any]])?.first)
        #expect(pro["id"] as? String == "pro" && pro["active"] as? Bool == false)

        let verified = try await json(["verify", receipt])
        #expect(
            verified["status"] as? Int == 0 && verified["valid"] as? Bool == true
                && verified["product_id"] as? String == "book.swift")

        let downloaded = try await json(["download", "book.swift", "--out", state + "/out"])
        #expect(downloaded["finished"] as? Bool == true && downloaded["product_id"] as? String == "book.swift")
        #expect((downloaded["file"] as? String)?.hasSuffix("/out/book.swift") == true)

        _ = try await json(["buy", "credits.5", "--quantity", "2"])
        let spent = try await json(["spend", "3"])
        #expect(spent["balance"] as? Int == 7 && spent["spent"] as? Int == 3)
        #expect(try await json(["balance"])["spent"] == nil)

        // The storefront: printed, moved (prices follow), a malformed one refused as a bad request.
        #expect(try await json(["storefront"])["storefront"] as? String == "USA")
        let moved = try await json(["storefront", "FRA"])
        #expect(moved["storefront"] as? String == "FRA" && moved["previous"] as? String == "USA")
        let french = try #require(
            (try await json(["products", "filter.sepia"])["products"] as? [[String: Any]])?.first)
        #expect(french["display_price"] as? String == "3.49 EUR")
        #expect(try await json(["storefront", "france"], status: 1)["error"] as? String == "invalidRequest")

        let failed = try await json(["spend", "1000"], status: 1)
        #expect(
            failed["error"] as? String == "insufficientCredits" && failed["code"] is Int && failed["message"] is String)
        #expect((try await json(["subscriptions"])["subscriptions"] as? [Any])?.isEmpty == true)
        _ = try await json(["buy", "pro.monthly"])
        let held = try #require((try await json(["access", "pro"])["entitlements"] as? [[String: Any]])?.first)
        #expect(held["active"] as? Bool == true && held["source"] as? String == "subscription")
        #expect(held["product_id"] as? String == "pro.monthly" && held["expiration_date"] is String)
        let subscription = try #require((try await json(["subscriptions"])["subscriptions"] as? [[String: Any]])?.first)
        let always: Set<String> = [
            "original_transaction_id", "product_id", "group", "state", "will_auto_renew", "expiration_date",
            "periods_paid", "entitled",
        ]
        let optional: Set<String> = [
            "expiration_reason", "grace_period_expiration_date", "billing_retry_end_date", "pending_product_id",
            "renewal_price", "latest_transaction_id", "price_increase_pending",
        ]
        #expect(
            always.isSubset(of: Set(subscription.keys)) && Set(subscription.keys).isSubset(of: always.union(optional)))
        #expect(subscription["state"] as? String == "active" && subscription["will_auto_renew"] as? Bool == true)
        await session.shutdown()
    }
}
