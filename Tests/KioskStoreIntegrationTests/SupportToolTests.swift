import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskTesting
import KioskWire
import NIOConcurrencyHelpers
import Testing

@testable import KioskStore

/// The operator's support tools: one subscription's renewal date moved (limits, receipt, renewal), every active
/// subscription of a product moved by a job that is killed and resumed, and grants of an entitlement.
@Suite(.timeLimit(.minutes(10))) struct SupportToolTests {
    static let day: Int64 = 86_400_000

    static let catalog = Catalog(
        bundleID: "com.example.monkeys",
        products: EntitlementTests.catalog.products,
        entitlements: EntitlementTests.catalog.entitlements)

    static func withStore<R>(
        catalog: Catalog = Self.catalog, directory: String = temporaryDirectory(), realTime: Bool = false,
        _ body: (EntitlementTests.Fixture) async throws -> R
    ) async throws -> R {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // `realTime`: the clock starts at the system's, which `kiosk-store` commands run by the test go by.
        let clock = realTime ? TestClock(startMs: Int64(Date().timeIntervalSince1970 * 1000) - 60_000) : TestClock()
        let payments = TestPaymentProcessor()
        let configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: catalog, paymentProcessor: payments, clock: clock
        ).onTestLedger()
        let store = try Store(configuration: configuration)
        try store.prepareToServe()
        return try await body(EntitlementTests.Fixture(store: store, clock: clock, payments: payments))
    }

    @Test func anExtensionMovesTheRenewalTheReceiptAndTheEntitlementOnce() async throws {
        try await Self.withStore { f in
            let account = try f.account()
            let first = try await f.buy(account, "pro.monthly")
            let row = try await f.store.extendSubscription(originalID: first.id, days: 10, reason: "outage")
            #expect(row.expiresMs == first.expiresMs + 10 * Self.day && row.dueMs == row.expiresMs)
            // The latest transaction ends later, and its receipt says so and verifies.
            let latest = try #require(try f.store.ledger.transaction(id: first.id))
            #expect(latest.expiresMs == row.expiresMs)
            let receipt = try #require(latest.receipt)
            let verdict = try await f.store.verifyReceipt(receipt)
            #expect(verdict.check.status == .valid && verdict.check.payload?.expiresDateMs == row.expiresMs)
            #expect(try await f.held(account)["pro"]?.expiresMs == row.expiresMs)
            let events = try await f.store.ledger.events(after: 0, accountID: account.id, types: [.renewalExtended])
            #expect(events.count == 1 && events.first?.reason == "outage" && events.first?.expiresMs == row.expiresMs)
            #expect(try await f.events(account).map(\.0) == [.entitlementStarted], "no end and restart")

            // Nothing is charged at the old end; at the new one, the renewal.
            f.clock.advance(byMs: first.expiresMs - f.clock.now + 1)
            #expect(try await f.store.renewDueSubscriptions().renewed == 0)
            #expect(try await f.held(account)["pro"] != nil)
            f.clock.advance(byMs: row.expiresMs - f.clock.now)
            #expect(try await f.store.renewDueSubscriptions().renewed == 1)
            #expect(f.payments.renewalChargeCount == 1)
        }
    }

    @Test func extensionsAreLimitedAsTheAppStoreLimitsThem() async throws {
        try await Self.withStore { f in
            let account = try f.account()
            let first = try await f.buy(account, "pro.monthly")
            for days in [0, 91] {
                await #expect(throws: StoreError.self) {
                    try await f.store.extendSubscription(originalID: first.id, days: days, reason: "outage")
                }
            }
            await #expect(throws: StoreError.self) {
                try await f.store.extendSubscription(originalID: first.id, days: 5, reason: "")
            }
            await #expect(throws: StoreError.self) {
                try await f.store.extendSubscription(originalID: "tx_nope", days: 5, reason: "outage")
            }
            try await f.store.extendSubscription(originalID: first.id, days: 5, reason: "one")
            try await f.store.extendSubscription(originalID: first.id, days: 5, reason: "two")
            let third = await #expect(throws: StoreError.self) {
                try await f.store.extendSubscription(originalID: first.id, days: 5, reason: "three")
            }
            #expect(third?.kind == .conflict)
            #expect(
                try #require(try f.store.ledger.subscription(originalID: first.id)).expiresMs
                    == first.expiresMs + 10 * Self.day, "the refused third changed nothing")

            // An ended subscription is not extended.
            let other = try f.account()
            let ended = try await f.buy(other, "pro.monthly")
            _ = try await f.store.expireSubscription(originalID: ended.id)
            await #expect(throws: StoreError.self) {
                try await f.store.extendSubscription(originalID: ended.id, days: 5, reason: "outage")
            }
        }
    }

    @Test func aJobExtendsEachActiveSubscriptionOnceAcrossRunsAndStores() async throws {
        try await Self.withStore { f in
            var originals: [String: Int64] = [:]
            for _ in 0..<12 {
                let bought = try await f.buy(try f.account(), "pro.monthly")
                originals[bought.id] = bought.expiresMs
            }
            let ended = try await f.buy(try f.account(), "pro.monthly")
            _ = try await f.store.expireSubscription(originalID: ended.id)
            let job = try await f.store.startExtensionJob(productID: "pro.monthly", days: 7, reason: "outage")
            // Bought after the job began: not extended.
            f.clock.advance(byMs: 1)
            let late = try await f.buy(try f.account(), "pro.monthly")

            // The same request is the same job; another with its id but other terms is refused.
            #expect(
                try await f.store.startExtensionJob(productID: "pro.monthly", days: 7, reason: "outage").id == job.id)
            await #expect(throws: StoreError.self) {
                _ = try await f.store.startExtensionJob(
                    productID: "pro.monthly", days: 8, reason: "outage", jobID: job.id)
            }
            await #expect(throws: StoreError.self) {
                _ = try await f.store.startExtensionJob(productID: "credits.5", days: 7, reason: "outage")
            }

            // Two stores run it at once; then it runs again.
            let second = try Store(configuration: f.store.configuration)
            async let a = f.store.runExtensionJob(id: job.id)
            async let b = second.runExtensionJob(id: job.id)
            _ = try await (a, b)
            let again = try await f.store.runExtensionJob(id: job.id)
            #expect(again.extended == 12 && again.remaining == 0)
            for (original, end) in originals {
                #expect(try f.store.ledger.subscription(originalID: original)?.expiresMs == end + 7 * Self.day)
            }
            #expect(try f.store.ledger.subscription(originalID: ended.id)?.state == .expired)
            #expect(try f.store.ledger.subscription(originalID: late.id)?.expiresMs == late.expiresMs)
            let events = try await f.store.ledger.events(after: 0, types: [.renewalExtended])
            #expect(events.count == 12 && Set(events.map(\.originalTransactionID)) == Set(originals.keys))
            #expect(try await f.store.ledger.extensionJob(id: job.id)?.finishedMs ?? 0 > 0)
        }
    }

    @Test func aGrantHoldsTheEntitlementUntilItEndsOrIsRevoked() async throws {
        try await Self.withStore { f in
            let account = try f.account()
            let grant = try await f.store.grantEntitlement(
                accountID: account.id, entitlementID: "pro", days: 30, reason: "outage apology")
            #expect(grant.productType == .grant && grant.productID == "grant:pro" && grant.price == "0")
            let pro = try #require(try await f.held(account)["pro"])
            #expect(pro.source == .grant && pro.transactionID == grant.id && pro.expiresMs == grant.expiresMs)
            let receipt = try #require(grant.receipt)
            let payload = try #require(try await f.store.verifyReceipt(receipt).check.payload)
            #expect(payload.entitlements == ["pro"] && payload.productType == .grant)
            #expect(try await f.held(account)["filters"] == nil)

            // Revoked: gone, with the end's event.
            _ = try await f.store.refund(transactionID: grant.id, reason: "granted by mistake")
            #expect(try await f.held(account).isEmpty)
            #expect(
                try await f.events(account).map { "\($0.0.shortName) \($0.2)" } == [
                    "ENTITLEMENT_STARTED grant", "ENTITLEMENT_ENDED revoked",
                ])

            // A second grant runs out: the sweep records the end.
            _ = try await f.store.grantEntitlement(accountID: account.id, entitlementID: "pro", days: 2, reason: "x")
            f.clock.advance(byMs: 3 * Self.day)
            #expect(try await f.store.settleEndingEntitlements() == 1)
            #expect(try await f.events(account).last.map { "\($0.0.shortName) \($0.2)" } == "ENTITLEMENT_ENDED expired")

            for (entitlement, days) in [("nope", 5), ("pro", 0), ("pro", 3651)] {
                await #expect(throws: StoreError.self) {
                    _ = try await f.store.grantEntitlement(
                        accountID: account.id, entitlementID: entitlement, days: days, reason: "x")
                }
            }
            await #expect(throws: StoreError.self) {
                _ = try await f.store.grantEntitlement(
                    accountID: "acct_nope", entitlementID: "pro", days: 5, reason: "x")
            }
        }
    }

    /// A refund made by `kiosk-store refund` (no catalog given) records the entitlement's end: the command reads the
    /// serving store's entitlements from the ledger. So does a grant by `kiosk-store grant`.
    @Test func theCommandsRecordEntitlementChangesWithoutTheCatalog() async throws {
        let directory = temporaryDirectory()
        try await Self.withStore(directory: directory, realTime: true) { f in
            let account = try f.account()
            let lifetime = try await f.buy(account, "pro.lifetime")
            // The command refunds with the simulated processor; the test store charged with its own, which took no
            // money either.
            try f.store.ledger.setSetting("payment_processor", "simulated")
            _ = try await StoreProcess.run([
                "refund", lifetime.id, "--data-dir", directory, "--reason", "asked",
            ])
            #expect(
                try await f.events(account).map { "\($0.0.shortName) \($0.1) \($0.2)" }.suffix(2) == [
                    "ENTITLEMENT_ENDED filters revoked", "ENTITLEMENT_ENDED pro revoked",
                ])
            let granted = try await StoreProcess.run([
                "grant", account.id, "pro", "--days", "30", "--reason", "support", "--data-dir", directory,
            ])
            #expect(granted.contains("pro granted to \(account.id)"))
            #expect(try await f.held(account)["pro"]?.source == .grant)
            #expect(try await f.events(account).last.map { "\($0.0.shortName) \($0.2)" } == "ENTITLEMENT_STARTED grant")
        }
    }

    /// The outage job of the size: 5,000 subscriptions (1,000 on PostgreSQL, where the test pass runs every
    /// test again), `kiosk-store subscriptions extend-all` killed with SIGKILL part-way, then run again: each
    /// subscription is extended exactly once.
    @Test func anExtensionJobKilledHalfWayAndRunAgainExtendsEachOnce() async throws {
        let count = TestLedger.kind == "postgres" ? 1_000 : 5_000
        let directory = temporaryDirectory()
        let catalog = try Catalog.load(path: StoreProcess.exampleCatalog)
        try await Self.withStore(catalog: catalog, directory: directory, realTime: true) { f in
            // The accounts in one write; the purchases through the store, many at once.
            let ids = (0..<count).map { _ in "acct_" + Store.randomHex(bytes: 8) }
            try f.store.ledger.backend.write { db in
                for id in ids {
                    try db.execute(
                        "INSERT INTO accounts (id, token_hash, payments_allowed, created_ms) VALUES (?, ?, 1, 0)",
                        [id, Array(id.utf8)])
                }
            }
            var ends: [String: Int64] = [:]
            try await withThrowingTaskGroup(of: TransactionRecord.self) { group in
                var next = 0
                func add() throws {
                    let account = try #require(try f.store.ledger.account(id: ids[next]))
                    next += 1
                    group.addTask { try await f.buy(account, "pro.monthly") }
                }
                for _ in 0..<min(64, count) { try add() }
                while let bought = try await group.next() {
                    ends[bought.id] = bought.expiresMs
                    if next < count { try add() }
                }
            }
            #expect(ends.count == count)

            let arguments = [
                "subscriptions", "extend-all", "--data-dir", directory, "--product", "pro.monthly", "--days", "7",
                "--reason", "outage", "--job", "outage-1",
            ]
            let killedAt = try await Self.runUntilKilled(arguments, afterExtending: count / 2)
            #expect(killedAt >= count / 2 && killedAt < count, "killed part-way: \(killedAt)")
            let rest = try await StoreProcess.run(arguments)
            #expect(rest.contains("done, \(count) extended, 0 left"), "\(rest.suffix(300))")

            let job = try #require(try await f.store.ledger.extensionJob(id: "outage-1"))
            #expect(try await f.store.ledger.extensionJobProgress(job, nowMs: f.clock.now) == (count, 0))
            let rows = try await f.store.ledger.offload {
                try f.store.ledger.backend.read { db in
                    try db.fetchAll("SELECT original_id, expires_ms FROM subscriptions").map {
                        (try $0["original_id"] as String, try $0["expires_ms"] as Int64)
                    }
                }
            }
            var exact = 0
            for (original, expires) in rows where ends[original].map({ $0 + 7 * Self.day }) == expires { exact += 1 }
            #expect(exact == count, "each subscription ends 7 days later, not 0 or 14")
            let events = try await f.store.ledger.events(after: 0, limit: count * 2, types: [.renewalExtended])
            #expect(events.count == count && Set(events.map(\.originalTransactionID)).count == count)
        }
    }

    @Test func theAdminRPCsExtendGrantAndReportAJobToAdminsOnly() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let configuration = try StoreConfiguration(
            dataDirectory: directory, catalog: Self.catalog, paymentProcessor: SimulatedPaymentProcessor(),
            clock: TestClock()
        ).onTestLedger()
        let server = try StoreServer(store: configuration)
        try await server.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(server.port))
        func call<Request: WireMessage, Response: WireMessage>(
            _ method: String, _ request: Request, _ response: Response.Type, token: String
        ) async throws -> Response {
            var metadata = Metadata()
            metadata.add("authorization", "Bearer \(token)")
            if method == "Purchase" { metadata.add("idempotency-key", UUID().uuidString) }
            let service = method == "Purchase" ? "Store" : "Admin"
            return try await client.unary(
                "/kiosk.store.v1.\(service)/\(method)", request: request, response: response,
                options: CallOptions(timeout: .seconds(20), metadata: metadata))
        }
        do {
            let store = server.store
            let admin = try store.createServiceCredential(role: .admin, name: "support").secret
            let content = try store.createServiceCredential(role: .content, name: "cdn").secret
            let (accountID, buyer) = try store.createAccount()
            let bought = try await call(
                "Purchase", StoreV1.PurchaseRequest(productID: "pro.monthly", quantity: 1, paymentMethod: goodCard),
                StoreV1.PurchaseResponse.self, token: buyer)
            let first = try #require(bought.transaction)
            let original = first.transactionID
            let extend = StoreV1.ExtendSubscriptionRequest(originalTransactionID: original, days: 3, reason: "outage")
            for token in [buyer, content] {
                let refused = await #expect(throws: RPCError.self) {
                    _ = try await call("ExtendSubscription", extend, StoreV1.SubscriptionStatus.self, token: token)
                }
                #expect(refused?.code == .permissionDenied)
            }
            let status = try await call("ExtendSubscription", extend, StoreV1.SubscriptionStatus.self, token: admin)
            #expect(status.expiresDateMs == first.expiresDateMs + 3 * Self.day)
            let events = try await store.ledger.events(after: 0, types: [.renewalExtended])
            #expect(events.first?.actor.hasPrefix("admin-rpc ") == true, "the operator is named")

            let job = try await call(
                "ExtendSubscriptions",
                StoreV1.ExtendSubscriptionsRequest(productID: "pro.monthly", days: 2, reason: "outage 2"),
                StoreV1.ExtensionJob.self, token: admin)
            #expect(job.jobID.hasPrefix("ext-") && job.productID == "pro.monthly")
            // The job runs in the store's background; its report is read until it has finished (bounded).
            var report = job
            for _ in 0..<500 where report.finishedMs == 0 {
                report = try await call(
                    "GetExtensionJob", StoreV1.GetExtensionJobRequest(jobID: job.jobID), StoreV1.ExtensionJob.self,
                    token: admin)
                if report.finishedMs == 0 { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(report.extended == 1 && report.remaining == 0 && report.finishedMs > 0)
            await #expect(throws: RPCError.self) {
                _ = try await call(
                    "GetExtensionJob", StoreV1.GetExtensionJobRequest(jobID: "nope"), StoreV1.ExtensionJob.self,
                    token: admin)
            }

            let grant = try await call(
                "GrantEntitlement",
                StoreV1.GrantEntitlementRequest(accountID: accountID, entitlementID: "filters", days: 7, reason: "x"),
                StoreV1.Transaction.self, token: admin)
            #expect(grant.productType == .grant && grant.productID == "grant:filters")
            #expect(try await store.entitlements(accountID: accountID).map(\.id) == ["filters", "pro"])
            let refused = await #expect(throws: RPCError.self) {
                _ = try await call(
                    "GrantEntitlement",
                    StoreV1.GrantEntitlementRequest(accountID: accountID, entitlementID: "gold", days: 7, reason: "x"),
                    StoreV1.Transaction.self, token: admin)
            }
            #expect(refused?.code == .invalidArgument)
        } catch {
            await client.close()
            await server.shutdown()
            throw error
        }
        await client.close()
        await server.shutdown()
    }

    /// Runs `kiosk-store` and SIGKILLs it once a progress line says `threshold` subscriptions or more are extended;
    /// returns the count the last line said.
    static func runUntilKilled(_ arguments: [String], afterExtending threshold: Int) async throws -> Int {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: StoreProcess.binary)
        process.arguments = arguments
        let environment = try StoreProcess.ledgerEnvironment(arguments)
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        return await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var text = ""
                var seen = 0
                while true {
                    let chunk = output.fileHandleForReading.availableData
                    if chunk.isEmpty { break }
                    text += String(decoding: chunk, as: UTF8.self)
                    // "job outage-1: 2400 extended, 2600 to go"
                    for line in text.split(separator: "\n") where line.contains(" extended, ") {
                        if let number = line.split(separator: " ").dropFirst(2).first.flatMap({ Int($0) }) {
                            seen = max(seen, number)
                        }
                    }
                    if seen >= threshold {
                        kill(process.processIdentifier, SIGKILL)
                        break
                    }
                }
                process.waitUntilExit()
                continuation.resume(returning: seen)
            }
        }
    }
}
