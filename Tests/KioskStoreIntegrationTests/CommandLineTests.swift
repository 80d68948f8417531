import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

/// The `kiosk-store` admin commands, run as processes on the data dir of a live store.
@Suite(.timeLimit(.minutes(1))) struct CommandLineTests {
    @Test func offerCodeBatchesAreMadeListedExportedAndRevoked() async throws {
        try await StoreFixture.with { store in
            let dir = store.dataDirectory
            let made = try await StoreProcess.run([
                "codes", "create", "--data-dir", dir, "--catalog", StoreProcess.exampleCatalog, "--batch", "spring",
                "--product", "credits.5", "--count", "3", "--quantity", "2",
            ])
            let codes = made.split(separator: "\n").map(String.init)
            #expect(codes.count == 3 && codes.allSatisfy { $0.count == 19 })
            _ = try await StoreProcess.run([
                "codes", "create", "--data-dir", dir, "--catalog", StoreProcess.exampleCatalog, "--batch", "word",
                "--product", "filter.sepia", "--custom", "sepia4all", "--limit", "50",
            ])
            let listed = try await StoreProcess.run(["codes", "list", "--data-dir", dir])
            #expect(listed.contains("spring  one_time  credits.5  price 0.00  ×2  0/3 redeemed"), "\(listed)")
            #expect(listed.contains("word  custom  filter.sepia  price 0.00  0/50 redeemed"), "\(listed)")
            let exported = try await StoreProcess.run(["codes", "export", "spring", "--data-dir", dir])
            #expect(
                exported.split(separator: "\n").count == 4 && codes.allSatisfy { exported.contains($0 + ",unused,") })
            #expect(try await StoreProcess.run(["codes", "revoke", "spring", "--data-dir", dir]).contains("revoked"))
            #expect(try await StoreProcess.run(["codes", "list", "--data-dir", dir]).contains("REVOKED"))
            let twice = try await StoreProcess.outcome(["codes", "revoke", "spring", "--data-dir", dir])
            #expect(twice.status != 0)
            let bad = try await StoreProcess.outcome([
                "codes", "create", "--data-dir", dir, "--catalog", StoreProcess.exampleCatalog, "--batch", "x",
                "--product", "nope", "--count", "1",
            ])
            #expect(bad.status != 0 && bad.errors.contains("nope"))
        }
    }

    @Test func adminCommandsWorkOnTheDataDirOfARunningStore() async throws {
        try await StoreFixture.with { store in
            let dir = store.dataDirectory
            // account create --payments-disabled, then set-payments on.
            let created = try await StoreProcess.run(["account", "create", "--data-dir", dir, "--payments-disabled"])
            let lines = created.split(separator: "\n")
            let accountID = try #require(lines.first?.split(separator: " ").last.map(String.init))
            let token = try #require(lines.dropFirst().first?.split(separator: " ").last.map(String.init))
            #expect(accountID.hasPrefix("acct_") && token.hasPrefix("kiosk_"))
            #expect(try await store.buy("credits.5", token: token).transaction?.errorCode == 4)
            _ = try await StoreProcess.run(["account", "set-payments", accountID, "on", "--data-dir", dir])
            #expect(try await store.buy("credits.5", token: token).transaction?.state == .purchased)

            // approve: an ask-to-buy purchase approved from the command line.
            let deferred = try #require(
                try await store.buy("filter.sepia", method: "test-ask", token: token).transaction)
            let approved = try await StoreProcess.run([
                "approve", deferred.transactionID, "--data-dir", dir, "--catalog", StoreProcess.exampleCatalog,
            ])
            #expect(approved.contains("PURCHASED"))
            let restored = try await store.restore(token: token)
            #expect(restored.map(\.transactionID) == [deferred.transactionID])

            // refund from another process reaches a WatchRevocations stream of the running store,
            // followed with a service credential made by `service create` (an account is refused).
            let service = try await StoreProcess.run([
                "service", "create", "--role", "content", "--name", "cdn-1", "--data-dir", dir, "--json",
            ])
            let fields = try #require(try JSONSerialization.jsonObject(with: Data(service.utf8)) as? [String: String])
            let credential = try #require(fields["credential"])
            #expect(credential.hasPrefix("ksvc_") && fields["role"] == "content")
            let listed = try await StoreProcess.run(["service", "list", "--data-dir", dir])
            #expect(listed.contains("content  cdn-1  active") && !listed.contains(credential), "\(listed)")
            var metadata = Metadata()
            metadata.add("authorization", "Bearer \(credential)")
            var feed = store.client.serverStreaming(
                "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(),
                response: StoreV1.Revocation.self, options: CallOptions(metadata: metadata)
            ).makeAsyncIterator()
            _ = try await StoreProcess.run([
                "refund", deferred.transactionID, "--reason", "customer request", "--data-dir", dir,
            ])
            let revocation = try #require(try await nextRevocation(&feed))
            #expect(revocation.transactionID == deferred.transactionID)
            #expect(revocation.reason == "customer request")

            // keys rotate, keys export.
            let rotated = try await StoreProcess.run(["keys", "rotate", "--data-dir", dir])
            let exported = try await StoreProcess.run(["keys", "export", "--data-dir", dir])
            let keys = try JSONSerialization.jsonObject(with: Data(exported.utf8)) as? [String: Any]
            let entries = try #require(keys?["keys"] as? [[String: Any]])
            #expect(entries.count == 2)
            #expect(rotated.contains(try #require(entries.last?["key_id"] as? String)))
            // The running store signs with the rotated key, and still verifies the old receipt.
            let fresh = try #require(try await store.buy("credits.5", token: token).transaction)
            #expect(
                try ReceiptV1.SignedReceipt(serializedBytes: fresh.signedReceipt).keyID == entries.last?["key_id"]
                    as? String)
            #expect(try await store.verify(fresh.signedReceipt, token: token).status == 0)

            // Each command is the operator's doing, in the ledger: the refund's event and an OPERATOR_ACTION for each
            // command that records nothing of its own, all naming the user who ran them; the serving store's own
            // events (the purchases) name no one.
            let user =
                getpwuid(geteuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "uid \(geteuid())"
            let sudo = ProcessInfo.processInfo.environment["SUDO_USER"].map { ", sudo from \($0)" } ?? ""
            let cli = "kiosk-store (\(user)\(sudo))"
            let refunded = try await store.store.ledger.events(after: 0, accountID: accountID, types: [.refunded])
            #expect(refunded.map(\.actor) == [cli])
            let actions = try await store.store.ledger.events(after: 0, types: [.operatorAction])
            #expect(actions.allSatisfy { $0.actor == cli })
            #expect(
                actions.map(\.reason).filter { !$0.hasPrefix("rotated") } == [
                    "created account \(accountID) (payments disabled)", "allowed payments of account \(accountID)",
                    "created service credential \(fields["id"] ?? "?") (role content, named cdn-1)",
                ])
            #expect(actions.filter { $0.reason.hasPrefix("rotated") }.count == 1)
            let purchases = try await store.store.ledger.events(after: 0, accountID: accountID, types: [.purchased])
            #expect(!purchases.isEmpty && purchases.allSatisfy { $0.actor.isEmpty })
        }
    }

    @Test func refundPrintsTheCreditShortfallAndReconcileItsCounts() async throws {
        try await StoreFixture.with { store in
            let dir = store.dataDirectory
            let token = try store.newAccount()
            let bought = try #require(try await store.buy("credits.5", quantity: 2, token: token).transaction)
            let filter = try #require(try await store.buy("filter.sepia", token: token).transaction)
            _ = try await store.call(
                "SpendCredits", StoreV1.SpendCreditsRequest(amount: 4), as: StoreV1.SpendCreditsResponse.self,
                token: token)
            // The buyer asks for both; refund-requests lists them, refund grants one, deny-refund denies the other.
            for transaction in [bought, filter] {
                _ = try await store.call(
                    "RequestRefund",
                    StoreV1.RequestRefundRequest(transactionID: transaction.transactionID, reason: "mistake"),
                    as: StoreV1.RefundRequestStatus.self, token: token)
            }
            let pending = try await StoreProcess.run(["refund-requests", "--data-dir", dir, "--json"])
            let rows = pending.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(
                Set(rows.compactMap { $0["transaction_id"] as? String }) == [
                    bought.transactionID, filter.transactionID,
                ], "\(pending)")
            #expect(rows.allSatisfy { $0["state"] as? String == "PENDING" && $0["reason"] as? String == "mistake" })
            let refunded = try await StoreProcess.run([
                "refund", bought.transactionID, "--reason", "chargeback", "--data-dir", dir,
            ])
            #expect(refunded.contains("refunded"))
            #expect(refunded.contains("4 of its credits were already spent"), "\(refunded)")
            let denied = try await StoreProcess.run([
                "deny-refund", filter.transactionID, "--reason", "used", "--data-dir", dir,
            ])
            #expect(denied.contains("refund request denied"))
            #expect(try await StoreProcess.run(["refund-requests", "--data-dir", dir]).isEmpty)
            #expect(
                try await StoreProcess.run(["refund-requests", "--state", "granted", "--data-dir", dir]).contains(
                    bought.transactionID))
            let deniedList = try await StoreProcess.run(["refund-requests", "--state", "denied", "--data-dir", dir])
            #expect(
                deniedList.contains(filter.transactionID) && deniedList.contains("decision: \"used\""), "\(deniedList)")
            let reconciled = try await StoreProcess.run(["reconcile", "--data-dir", dir, "--json"])
            let counts = try JSONSerialization.jsonObject(with: Data(reconciled.utf8)) as? [String: Any]
            #expect(counts?["charged"] as? Int == 0)
            #expect((counts?["intents"] as? [String: Any])?["completed"] as? Int == 2)  // the two purchases
        }
    }

    @Test func productionNeedsARealProcessorAndAFreshDataDirCanBecomeOne() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The README's order: an account first, then serve — in production.
        _ = try await StoreProcess.run(["account", "create", "--data-dir", directory])
        let refused = try await StoreProcess.outcome([
            "serve", "--data-dir", directory, "--catalog", StoreProcess.exampleCatalog,
            "--port", "0", "--environment", "production",
        ])
        #expect(refused.status != 0)
        #expect(refused.errors.contains("production store takes real payments"), "\(refused.errors)")
        let simulated = try await StoreProcess.outcome([
            "serve", "--data-dir", directory, "--catalog", StoreProcess.exampleCatalog,
            "--port", "0", "--environment", "production", "--payment-processor", "simulated",
        ])
        #expect(simulated.status != 0)
        #expect(simulated.errors.contains("simulated processor is for sandbox only"), "\(simulated.errors)")
        let help = try await StoreProcess.outcome(["serve", "--help"])
        #expect(help.output.contains("default: sandbox") && !help.output.contains("default: 1)"), "\(help.output)")
        // With Stripe's processor it starts, in production, on the data dir `account create` made.
        let keyFile = directory + "/stripe.key"
        try Data("sk_test_kiosk_stripe_double\n".utf8).write(to: URL(fileURLWithPath: keyFile))
        let testKey = try await StoreProcess.outcome([
            "serve", "--data-dir", directory, "--catalog", StoreProcess.exampleCatalog, "--port", "0",
            "--environment", "production", "--payment-processor", "stripe", "--stripe-key-file", keyFile,
        ])
        #expect(testKey.status != 0)
        #expect(testKey.errors.contains("in test mode"), "\(testKey.errors)")
        try Data("sk_live_kiosk_never_used\n".utf8).write(to: URL(fileURLWithPath: keyFile))
        let server = try await StoreProcess(
            dataDirectory: directory,
            extraArguments: [
                "--environment", "production", "--payment-processor", "stripe", "--stripe-key-file", keyFile,
                "--stripe-api-base", "http://127.0.0.1:9",
            ])
        await server.signal(SIGTERM)
        #expect(try testLedger(directory: directory).environment() == .production)
    }

    @Test func badCatalogStopsStartUpWithAClearMessage() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let catalog = directory + "/catalog.json"
        try Data(
            #"{"products": [{"id": "gold", "type": "consumable", "title": "Gold", "price": "free", "currency": "USD", "credits": 1}]}"#
                .utf8
        )
        .write(to: URL(fileURLWithPath: catalog))
        let (status, _, message) = try await StoreProcess.outcome([
            "serve", "--data-dir", directory, "--catalog", catalog, "--port", "0",
        ])
        #expect(status != 0)
        #expect(message.contains(#"catalog.json: product "gold", field "price""#), "\(message)")
    }

    /// PostgreSQL's pool size and statement mode are checked before anything connects, each refusal naming its option.
    @Test func badDatabaseOptionsStopStartUpWithTheirNames() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (option, value, expected) in [
            ("--database-connections", "0", "--database-connections 0: give a whole number from 1 to 1000"),
            ("--database-connections", "many", "--database-connections many: give a whole number from 1 to 1000"),
            ("--database-statements", "cached", "--database-statements cached: give prepared or unnamed"),
        ] {
            let (status, _, message) = try await StoreProcess.outcome([
                "serve", "--data-dir", directory, "--catalog", StoreProcess.exampleCatalog, "--port", "0",
                "--database", "postgres://kiosk@127.0.0.1:1/kiosk", option, value,
            ])
            #expect(status == 64, "\(option) \(value): \(message)")
            #expect(message.contains(expected), "\(message)")
        }
        // Without a PostgreSQL ledger, its options are refused, not ignored.
        for (options, named) in [
            (["--database-connections", "4"], "--database-connections applies"),
            (
                ["--database-statements", "unnamed", "--database-plaintext"],
                "--database-plaintext, --database-statements apply"
            ),
        ] {
            let (status, _, message) = try await StoreProcess.outcome(
                ["serve", "--data-dir", directory, "--catalog", StoreProcess.exampleCatalog, "--port", "0"] + options,
                // The PostgreSQL pass gives every data dir a database through the environment: none here.
                environment: TestLedger.isPostgres ? ["KIOSK_STORE_DATABASE": ""] : [:])
            #expect(status == 64, "\(options): \(message)")
            #expect(message.contains("\(named) only to a PostgreSQL ledger: give --database as well"), "\(message)")
        }
    }

    /// Admin commands open an existing data dir only: a mistyped path is an error, not a new ledger and key.
    @Test func adminCommandsRefuseADataDirWithNoLedger() async throws {
        let missing = temporaryDirectory() + "/typo"
        defer { try? FileManager.default.removeItem(atPath: (missing as NSString).deletingLastPathComponent) }
        for arguments in [
            ["refund", "tx_1", "--reason", "r"], ["approve", "tx_1", "--catalog", StoreProcess.exampleCatalog],
            ["keys", "rotate"], ["keys", "export"], ["account", "set-payments", "acct_1", "off"],
        ] {
            let (status, _, message) = try await StoreProcess.outcome(arguments + ["--data-dir", missing])
            #expect(status == 64, "\(arguments)")
            #expect(message.contains("no ledger in \(missing)"), "\(message)")
        }
        #expect(!FileManager.default.fileExists(atPath: missing))
        // `account create` starts one.
        let (created, _, _) = try await StoreProcess.outcome(["account", "create", "--data-dir", missing])
        #expect(created == 0)
        #expect(FileManager.default.fileExists(atPath: missing + (TestLedger.isPostgres ? "/keys" : "/ledger.sqlite")))
    }

    /// `tls create-dev` makes a CA and a server pair; `serve --tls-cert/--tls-key` serves it and takes a new
    /// pair on SIGHUP; plaintext off loopback is refused, in production even when allowed.
    @Test func tlsCertificatesAreMadeServedAndReloadedOnSIGHUP() async throws {
        let first = temporaryDirectory()
        let second = temporaryDirectory()
        let live = temporaryDirectory()
        let data = temporaryDirectory()
        defer {
            for directory in [first, second, live, data] { try? FileManager.default.removeItem(atPath: directory) }
        }
        let made = try await StoreProcess.run(["tls", "create-dev", "--out", first])
        #expect(made.contains("ca.pem") && made.contains("server.pem"))
        _ = try await StoreProcess.run(["tls", "create-dev", "--out", second])
        let keyMode =
            try FileManager.default.attributesOfItem(atPath: first + "/server-key.pem")[.posixPermissions] as? Int
        #expect(keyMode == 0o600)
        for name in ["server.pem", "server-key.pem"] {
            try FileManager.default.copyItem(atPath: "\(first)/\(name)", toPath: "\(live)/\(name)")
        }
        let server = try await StoreProcess(
            dataDirectory: data,
            extraArguments: [
                "--tls-cert", live + "/server.pem", "--tls-key", live + "/server-key.pem",
            ])
        defer { server.process.terminate() }
        func health(trusting ca: String) async -> Bool {
            guard let tls = try? ClientTLS(trustRootsPath: ca) else { return false }
            let client = RPCClient(
                host: "127.0.0.1", port: server.port,
                configuration: ClientConfiguration(
                    backoff: ConnectionBackoff(
                        initial: .milliseconds(5), maximum: .milliseconds(5), multiplier: 1, jitter: 0,
                        maximumAttempts: 1), tls: tls))
            defer { Task { await client.close() } }
            return
                (try? await client.unary(
                    "/kiosk.rpc.v1.Health/Check", request: HealthCheckRequest(), response: HealthCheckResponse.self))
                != nil
        }
        #expect(await health(trusting: first + "/ca.pem"))
        #expect(await !health(trusting: second + "/ca.pem"))
        for name in ["server.pem", "server-key.pem"] {
            try FileManager.default.removeItem(atPath: "\(live)/\(name)")
            try FileManager.default.copyItem(atPath: "\(second)/\(name)", toPath: "\(live)/\(name)")
        }
        kill(server.process.processIdentifier, SIGHUP)
        // The reload happens on the signal's arrival: wait for it (bounded), then the old CA no longer connects.
        var reloaded = false
        for _ in 0..<200 where !reloaded {
            reloaded = await health(trusting: second + "/ca.pem")
            if !reloaded { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(reloaded, "the new certificate is served after SIGHUP")
        #expect(await !health(trusting: first + "/ca.pem"))

        let refused = try await StoreProcess.outcome([
            "serve", "--data-dir", temporaryDirectory(), "--catalog", StoreProcess.exampleCatalog,
            "--host", "0.0.0.0", "--port", "0",
        ])
        #expect(refused.status != 0 && refused.errors.contains("not a loopback address"), "\(refused.errors)")
        try "sk_live_not_a_real_key".write(toFile: first + "/stripe.key", atomically: true, encoding: .utf8)
        let production = try await StoreProcess.outcome([
            "serve", "--data-dir", temporaryDirectory(), "--catalog", StoreProcess.exampleCatalog, "--host", "0.0.0.0",
            "--port", "0",
            "--environment", "production", "--insecure-plaintext", "--payment-processor", "stripe", "--stripe-key-file",
            first + "/stripe.key",
        ])
        #expect(
            production.status != 0 && production.errors.contains("a production store serves TLS"),
            "\(production.errors)")
    }
}
