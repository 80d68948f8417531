import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

/// Two stores on one PostgreSQL ledger, as two replicas behind a load balancer
/// would be: each its own data dir, one database, the signing keys sealed in it with one key-encryption key.
@Suite(
    .enabled(if: TestLedger.isPostgres, "two stores on one ledger need the PostgreSQL backend"), .timeLimit(.minutes(1))
)
struct ReplicaTests {
    /// A second store served on `first`'s database; `body` gets it and a client of it.
    static func withSecondStore<R>(
        of first: StoreFixture, pollInterval: Duration = .seconds(600),
        _ body: (StoreServer, RPCClient) async throws -> R
    ) async throws -> R {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = StoreConfiguration(
            dataDirectory: directory, catalog: testCatalog,
            paymentProcessor: SimulatedPaymentProcessor(delay: .milliseconds(20)),
            revocationPollInterval: pollInterval)
        configuration.database = first.store.configuration.database
        configuration.keyEncryptionKey = try SealedKeyTests.kek()
        let server = try StoreServer(store: configuration)
        try await server.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(server.port))
        do {
            let result = try await body(server, client)
            await client.close()
            await server.shutdown()
            return result
        } catch {
            await client.close()
            await server.shutdown()
            throw error
        }
    }

    /// The second store polls the ledger every 10 minutes: a refund committed by the first reaches
    /// the second's WatchRevocations stream only through PostgreSQL's NOTIFY (the suite's time limit is a minute).
    @Test func aRefundOnOneStoreReachesTheOtherStoresWatchersThroughNotify() async throws {
        try await StoreFixture.with(keyEncryptionKey: try SealedKeyTests.kek()) { first in
            try await Self.withSecondStore(of: first) { second, client in
                let token = try first.newAccount()
                let transaction = try #require(try await first.buy("filter.sepia", token: token).transaction)
                var metadata = Metadata()
                metadata.add(
                    "authorization",
                    "Bearer \(try second.store.createServiceCredential(role: .content, name: "replica-feed").secret)")
                var feed = client.serverStreaming(
                    "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(),
                    response: StoreV1.Revocation.self, options: CallOptions(metadata: metadata)
                ).makeAsyncIterator()
                _ = try await first.store.refund(
                    transactionID: transaction.transactionID, reason: "refund on the other replica")
                let revocation = try #require(try await nextRevocation(&feed))
                #expect(revocation.transactionID == transaction.transactionID)
                #expect(revocation.reason == "refund on the other replica")
                // The first store's receipt verifies on the second (its key is in the shared ledger), refunded.
                let verified = try await first.verify(transaction.signedReceipt, token: token)
                #expect(verified.status == 0 && verified.revocationDateMs > 0)
            }
        }
    }

    /// The same purchase (one idempotency key) sent to both replicas at once, twenty times:
    /// one transaction each time (one payment intent, so one charge), and every answer names it.
    @Test func oneIdempotencyKeyOnTwoReplicasRecordsOnePurchase() async throws {
        try await StoreFixture.with(keyEncryptionKey: try SealedKeyTests.kek()) { first in
            try await Self.withSecondStore(of: first) { _, client in
                let token = try first.newAccount()
                for round in 0..<20 {
                    let key = "replica-\(round)"
                    async let one = first.buy("credits.5", token: token, key: key)
                    async let other = first.buy("credits.5", token: token, key: key, on: client)
                    let answers = [try? await one, try? await other].compactMap { $0?.transaction?.transactionID }
                    #expect(!answers.isEmpty, "round \(round): neither replica answered")
                    #expect(Set(answers).count == 1, "round \(round): two transactions for one key: \(answers)")
                }
                let balance = try await first.balance(token)
                #expect(balance == 20 * 5, "twenty purchases of 5 credits, each once")
                let account = try #require(try await first.store.ledger.account(tokenHash: Store.hash(token)))
                let (stored, movements) = try first.store.ledger.balanceAndMovements(accountID: account.id)
                #expect(stored == movements)
                #expect(try first.store.ledger.transactions(accountID: account.id).count == 20)
            }
        }
    }

    /// Replicas keep their data dirs apart, so the lock files that tell a dead store's payment intents
    /// from a live one's cannot be seen across them: on PostgreSQL liveness is a session advisory lock.
    /// (Before, a replica took every other replica's intents for a dead process's: it reconciled
    /// payments that were being charged.)
    @Test func aReplicaInAnotherDataDirIsAliveForAsLongAsItsDatabaseSession() async throws {
        try await StoreFixture.with(keyEncryptionKey: try SealedKeyTests.kek()) { first in
            try await Self.withSecondStore(of: first) { second, _ in
                #expect(second.store.instance.isAlive(first.store.instance.id))
                #expect(first.store.instance.isAlive(second.store.instance.id))
                #expect(!second.store.instance.isAlive("inst_00000000deadbeef"), "never seen: dead")

                // Another process's session takes the lock, then ends (as a killed process's does): the lock goes with it.
                let location = try #require(first.store.configuration.database)
                var other: Ledger? = try Ledger(postgres: location)
                try #require(other?.backend as? PostgresLedgerBackend).holdInstanceLock("inst_00000000cafebabe")
                #expect(second.store.instance.isAlive("inst_00000000cafebabe"))
                other = nil
                let deadline = ContinuousClock.now + .seconds(10)
                while second.store.instance.isAlive("inst_00000000cafebabe"), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(10))
                }
                #expect(!second.store.instance.isAlive("inst_00000000cafebabe"))
                _ = other
            }
        }
    }
}
