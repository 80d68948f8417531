import Foundation
import GRDB
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStoreCore
import NIOConcurrencyHelpers
import Tracing

// The records (`TransactionRecord`, `AccountRecord`, `RevocationRecord`) are the domain's
// (KioskStoreCore); here: reading them from ledger rows and writing them.

extension TransactionRecord {
    /// The columns a page of transactions reads: what the wire message sends, not the payment method (free text the
    /// wire never carries back).
    package static let pageColumns = """
        id, original_id, account_id, product_id, product_type, quantity, state, purchase_ms, expires_ms, period_start_ms, offer_id,
        price, currency, payment_id, error_code, error_reason, error_message, receipt, finished, revoked_ms, revocation_reason,
        environment, credits, refund_credit_shortfall, storefront
        """

    package init(row: LedgerRow) throws {
        self.init(
            id: try row["id"], originalID: try row["original_id"], accountID: try row["account_id"],
            productID: try row["product_id"],
            productType: try row.enumeration("product_type"), quantity: UInt32(clamping: try row["quantity"] as Int64),
            state: try row.enumeration("state"), purchaseMs: try row["purchase_ms"], expiresMs: try row["expires_ms"],
            periodStartMs: try row["period_start_ms"], offerID: try row["offer_id"], price: try row["price"],
            currency: try row["currency"],
            // Pages leave it out (``pageColumns``): it is never sent.
            paymentMethod: row.has("payment_method") ? try row["payment_method"] : "",
            paymentID: try row["payment_id"], errorCode: UInt32(clamping: try row["error_code"] as Int64),
            errorReason: try row["error_reason"], errorMessage: try row["error_message"],
            receipt: try row["receipt"] as [UInt8]?,
            finished: try row["finished"], revokedMs: try row["revoked_ms"],
            revocationReason: try row["revocation_reason"],
            environment: try row.enumeration("environment"), credits: UInt64(clamping: try row["credits"] as Int64),
            refundCreditShortfall: UInt64(clamping: try row["refund_credit_shortfall"] as Int64))
        storefront = try row["storefront"]
    }

    /// Inserts the row (``LedgerDatabase/executeLater(_:_:refusal:)``: its error may come from a later statement).
    package func insert(_ db: any LedgerDatabase, refusal: ((LedgerError) -> (any Error)?)? = nil) throws {
        try db.executeLater(
            """
            INSERT INTO transactions (id, original_id, account_id, product_id, product_type, quantity, state,
              purchase_ms, expires_ms, price, currency, payment_method, payment_id, error_code, error_reason,
              error_message, receipt, finished, revoked_ms, revocation_reason, environment, credits, period_start_ms, offer_id,
              storefront)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                id, originalID, accountID, productID, productType.rawValue, Int64(quantity), state.rawValue,
                purchaseMs, expiresMs, price, currency, paymentMethod, paymentID, Int64(errorCode), errorReason,
                errorMessage, receipt, finished, revokedMs, revocationReason, environment.rawValue,
                Int64(clamping: credits), periodStartMs, offerID, storefront,
            ], refusal: refusal)
    }
}

extension AccountRecord {
    package init(row: LedgerRow) throws {
        self.init(
            id: try row["id"], paymentsAllowed: try row["payments_allowed"],
            creditBalance: UInt64(clamping: try row["credit_balance"] as Int64), storefront: try row["storefront"])
    }
}

extension RevocationRecord {
    package init(row: LedgerRow) throws {
        self.init(
            cursor: UInt64(clamping: try row["cursor"] as Int64), transactionID: try row["transaction_id"],
            originalTransactionID: try row["original_transaction_id"], accountID: try row["account_id"],
            revokedMs: try row["revoked_ms"], reason: try row["reason"],
            creditShortfall: UInt64(clamping: try row["credit_shortfall"] as Int64))
    }
}

/// The store's durable state: an SQLite database in WAL mode in the data dir
/// (``Ledger/init(directory:)``), or a PostgreSQL database that store processes
/// share (``Ledger/init(postgres:timeout:)``).
///
/// A write is committed before the method returns, and is then on disk: an
/// SQLite commit (`BEGIN IMMEDIATE`, `synchronous = FULL`) fsyncs the WAL, a
/// PostgreSQL one (`SERIALIZABLE`) waits for its WAL flush. So an answer the
/// store sends is on disk.
public final class Ledger: Sendable {
    /// The database file name inside the data dir.
    public static let fileName = "ledger.sqlite"

    /// Where the ledger is kept.
    package let backend: any LedgerBackend
    private let writeObservers = NIOLockedValueBox<[@Sendable () -> Void]>([])
    private let accountWriteHook = NIOLockedValueBox<
        FunctionReference<@Sendable (any LedgerDatabase, String) throws -> Void>?
    >(nil)
    /// The SQLite backend, when that is where it is kept (its pragmas, its group commits).
    package let sqlite: SQLiteLedgerBackend?

    /// Opens (creating and migrating if needed) the embedded SQLite ledger in `directory`.
    public init(directory: String) throws {
        // The ledger holds token hashes and webhook secrets: the directory is the owner's only (0700) and the
        // database files 0600, whatever the umask; SQLite gives -wal and -shm the database file's mode.
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard chmod(directory, 0o700) == 0 else {
            throw LedgerError(.unavailable, "cannot make \(directory) private (errno \(errno))")
        }
        let path = (directory as NSString).appendingPathComponent(Self.fileName)
        // Created here, before SQLite, only when missing; an existing one is changed by path: closing a descriptor of a
        // file this process has open in SQLite would drop SQLite's POSIX locks on it.
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if fd >= 0 {
            close(fd)
        } else if errno != EEXIST {
            throw LedgerError(.unavailable, "cannot create \(path) (errno \(errno))")
        }
        guard chmod(path, 0o600) == 0 else {
            throw LedgerError(.unavailable, "cannot make \(path) private (errno \(errno))")
        }
        let sqlite = try SQLiteLedgerBackend(path: path, migrator: Self.migrator)
        // Made private too: -wal and -shm files that exist with a wider mode (made before the database was 0600).
        for file in [path + "-wal", path + "-shm"] where access(file, F_OK) == 0 {
            guard chmod(file, 0o600) == 0 else {
                throw LedgerError(.unavailable, "cannot make \(file) private (errno \(errno))")
            }
        }
        self.sqlite = sqlite
        backend = sqlite
    }

    /// Opens (migrating if needed) the ledger in a PostgreSQL database.
    /// - Parameter timeout: how long a connection checkout, a connect or one statement may take before the call that
    ///   needed it fails with ``LedgerError/Kind/unavailable`` (14 UNAVAILABLE on the wire).
    public init(postgres location: PostgresLocation, timeout: Duration = Ledger.defaultDatabaseTimeout) throws {
        sqlite = nil
        backend = try PostgresLedgerBackend(location: location, timeout: timeout)
    }

    /// The advisory lock under which PostgreSQL revocations take their cursors (apart from the account keys, bare
    /// account ids, and the instance keys, `kiosk-instance:…`).
    package static let revocationLockKey = "kiosk-revocations:"

    /// How long a PostgreSQL connection checkout, connect or statement may take by default.
    public static let defaultDatabaseTimeout: Duration = .seconds(5)

    /// Runs `body`, which may call this ledger's synchronous methods, where waiting on the database blocks no event
    /// loop and no Swift concurrency thread: RPC handlers call the ledger through this or its async methods only.
    public func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        // The body runs on the backend's threads, outside this task: the operator acting goes with it.
        guard let actor = OperatorScope.actor else { return try await backend.offload(body) }
        return try await backend.offload { try OperatorScope.$actor.withValue(actor) { try body() } }
    }

    /// Runs `body`, which may block on this ledger's synchronous methods, on a thread outside Swift's concurrency
    /// pool on every backend (``offload(_:)`` runs it in place on SQLite, which suits one short read on a request's
    /// path). For work that runs many at once in the background (webhook deliveries): a blocking SQLite read waits
    /// for a reader connection, and the async reads holding them need the concurrency pool's few threads to let
    /// them go, so blocking all of those threads with such reads would wait forever.
    package func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        guard sqlite != nil else { return try await offload(body) }
        let actor = OperatorScope.actor
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try OperatorScope.$actor.withValue(actor) { try body() } })
            }
        }
    }

    /// Calls `body` when another process commits a change the revocation feed follows
    /// (a revocation, a signing key added or retired, a service credential revoked), at once:
    /// PostgreSQL's NOTIFY. Nothing on SQLite, whose feed polls the data dir's file.
    package func watchExternalChanges(_ body: @escaping @Sendable () -> Void) {
        (backend as? PostgresLedgerBackend)?.watchChanges(body)
    }

    /// Inside a write: wakes every store watching this ledger (``watchExternalChanges(_:)``)
    /// when the write commits (PostgreSQL delivers a NOTIFY at commit, never for a rollback).
    package static func announceChange(_ db: any LedgerDatabase) throws {
        guard db.dialect == .postgres else { return }
        try db.execute("SELECT pg_notify(?, '')", [PostgresLedgerBackend.changeChannel])
    }

    /// Which backend holds the ledger (`sqlite`, `postgres`).
    public var backendName: String { backend.dialect.name }

    /// The SQLite database, for checks that are SQLite's own (query plans, pragmas). Nil on another backend.
    package var pool: DatabasePool? { sqlite?.pool }

    /// Runs `body` as one write of the next group commit (see ``GroupCommit``):
    /// atomic on its own (a savepoint), serial with every other write, and on
    /// disk (fsynced) when this returns. On PostgreSQL, writes naming the same
    /// `account` never both commit on snapshots that miss each other (each updates its row; see
    /// ``PostgresLedgerBackend``); every write about an account's purchases names it.
    ///
    /// The events it records keep the calling task's request id and trace context (``WriteCause``); when a tracer
    /// is bootstrapped, the write is a `ledger.write` span of the caller's.
    package func write<T: Sendable>(
        account: String? = nil, _ body: @escaping @Sendable (any LedgerDatabase) throws -> T
    ) async throws -> T {
        let start = ContinuousClock.now
        let tracer = InstrumentationSystem.tracer
        let span: (any Span)? =
            tracer is NoOpTracer ? nil : tracer.startSpan("ledger.write", context: ServiceContext.current ?? .topLevel)
        // The body may run on the group commit's thread, outside this task: the cause goes with it.
        // Always a cause, empty when there is none: the body's events then never read the group commit thread's own
        // task-locals for one.
        let cause = WriteCause.capture(span: span) ?? WriteCause(requestID: "", traceParent: "")
        let settle = account == nil ? nil : accountWriteHook.withLockedValue { $0 }?.function
        let caused: @Sendable (any LedgerDatabase) throws -> T = { db in
            try WriteCause.$current.withValue(cause) {
                let result = try body(db)
                // What follows from the account's change, in the same write (its entitlements).
                if let settle, let account { try settle(db, account) }
                return result
            }
        }
        let result: T
        do {
            result = try await backend.groupWrite(serializingOn: account, caused)
        } catch {
            span?.recordError(error)
            span?.setStatus(SpanStatus(code: .error))
            span?.end()
            throw error
        }
        writeLatency.record(since: start)
        if let span {
            span.attributes["db.system"] = backend.dialect.name
            span.end()
        }
        for observer in writeObservers.withLockedValue({ $0 }) { observer() }
        return result
    }

    /// Sets what every write through ``write(account:_:)`` that names an account runs after its body, in the same
    /// database transaction (the store records the account's entitlement changes there); nil: nothing.
    package func setAccountWriteHook(_ hook: (@Sendable (any LedgerDatabase, String) throws -> Void)?) {
        accountWriteHook.withLockedValue { $0 = hook.map(FunctionReference.init) }
    }

    /// Called after each write of this process through ``write(account:_:)`` commits (the event feed looks then).
    package func onWrite(_ body: @escaping @Sendable () -> Void) {
        writeObservers.withLockedValue { $0.append(body) }
    }

    /// How long this process's committed writes through ``write(account:_:)`` took, from the call to the commit
    /// on disk (the wait for the group, or for another write about the account, included): a purchase's, a refund's,
    /// an event's.
    public let writeLatency = LatencyHistogram()

    /// Group commits made by this process and the writes they carried: on SQLite every write (each commit one fsync of
    /// the WAL), on PostgreSQL the writes about accounts (each commit one transaction, a group's or a lone write's).
    public var commitStatistics: (commits: Int, writes: Int) {
        if let sqlite { return sqlite.group.statistics }
        return (backend as? PostgresLedgerBackend)?.commits.withLockedValue { $0 } ?? (0, 0)
    }

    /// Writes this process ran again, by why (always 0 on SQLite, whose single writer never collides):
    /// `retries`, a serialization failure or a deadlock PostgreSQL ended the write with; `collisions`, a write about
    /// an account that met another write about it and ran again behind the account's lock; `groupsRolledBack`, group
    /// commits that did not commit, whose writes each ran again alone.
    public var rerunStatistics: (retries: Int, collisions: Int, groupsRolledBack: Int) {
        guard let postgres = backend as? PostgresLedgerBackend else { return (0, 0, 0) }
        return (
            postgres.retries.withLockedValue { $0 }, postgres.contended.withLockedValue { $0 },
            postgres.groupsRerun.withLockedValue { $0 }
        )
    }

    /// The versioned schema (``LedgerMigration/all``) as GRDB migrations.
    package static var migrator: DatabaseMigrator { LedgerMigration.sqliteMigrator }

    /// `PRAGMA synchronous` on the writer and on a reader: 2 is FULL.
    public func synchronousModes() throws -> (writer: Int, reader: Int) {
        guard let pool else { return (-1, -1) }
        let writer = try pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
        let reader = try pool.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
        return (writer, reader)
    }

    // MARK: Settings

    /// The environment this ledger's receipts are signed for, once a store has opened it.
    public func environment() throws -> StoreEnvironment? {
        try backend.read { db in
            try db.value(String.self, "SELECT value FROM settings WHERE key = 'environment'").flatMap(
                StoreEnvironment.init(name:))
        }
    }

    /// A value of the settings table.
    package func setting(_ key: String) throws -> String? {
        try backend.read { db in try db.value(String.self, "SELECT value FROM settings WHERE key = ?", [key]) }
    }

    /// Sets a value of the settings table.
    package func setSetting(_ key: String, _ value: String) throws {
        try backend.write { db in
            try db.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, value])
        }
    }

    /// Binds the ledger to `environment` on first use; refuses another environment later.
    package func claim(environment: StoreEnvironment) throws {
        try backend.write { db in
            if let stored = try db.value(String.self, "SELECT value FROM settings WHERE key = 'environment'") {
                guard stored == environment.name else {
                    throw StoreError(
                        .conflict, "the data dir holds a \(stored) ledger; it cannot be served as \(environment.name)")
                }
            } else {
                try db.execute("INSERT INTO settings (key, value) VALUES ('environment', ?)", [environment.name])
            }
        }
    }

    // MARK: Accounts

    /// Creates an account whose bearer token hashes to `tokenHash`, buying in `storefront` (empty: the catalog's
    /// default).
    public func createAccount(
        id: String, tokenHash: [UInt8], paymentsAllowed: Bool, storefront: String = "", nowMs: Int64
    ) throws {
        try backend.write { db in
            try db.execute(
                "INSERT INTO accounts (id, token_hash, payments_allowed, created_ms, storefront) VALUES (?, ?, ?, ?, ?)",
                [id, tokenHash, paymentsAllowed, nowMs, storefront])
            try db.recordOperatorAction(
                "created account \(id)\(paymentsAllowed ? "" : " (payments disabled)")", accountID: id, nowMs: nowMs)
        }
    }

    /// The account whose token hashes to `tokenHash`.
    public func account(tokenHash: [UInt8]) async throws -> AccountRecord? {
        try await backend.readStatement { db in
            try db.fetchOne("SELECT * FROM accounts WHERE token_hash = ?", [tokenHash]).map(AccountRecord.init)
        }
    }

    /// The account with `id`.
    public func account(id: String) throws -> AccountRecord? {
        try backend.read { db in
            try db.fetchOne("SELECT * FROM accounts WHERE id = ?", [id]).map(AccountRecord.init)
        }
    }

    /// Allows or forbids the account's payments; false when there is no such account.
    @discardableResult
    public func setPaymentsAllowed(accountID: String, _ allowed: Bool, nowMs: Int64 = 0) throws -> Bool {
        try backend.write { db in
            let changed =
                try db.execute("UPDATE accounts SET payments_allowed = ? WHERE id = ?", [allowed, accountID]) > 0
            if changed {
                try db.recordOperatorAction(
                    "\(allowed ? "allowed" : "disabled") payments of account \(accountID)", accountID: accountID,
                    nowMs: nowMs)
            }
            return changed
        }
    }

    // MARK: Transactions

    /// The account a transaction belongs to (nil: no such transaction).
    package func accountOf(transactionID: String) async throws -> String? {
        try await backend.readStatement { db in
            try db.value(String.self, "SELECT account_id FROM transactions WHERE id = ?", [transactionID])
        }
    }

    /// The transaction with `id`.
    public func transaction(id: String) throws -> TransactionRecord? {
        try backend.read { db in try db.transaction(id: id) }
    }

    // MARK: Listing and balances

    /// Every transaction of an account, oldest first.
    public func transactions(accountID: String) throws -> [TransactionRecord] {
        try backend.read { db in
            try db.fetchAll(
                "SELECT * FROM transactions WHERE account_id = ? ORDER BY purchase_ms, \(db.dialect.insertionOrder)",
                [accountID]
            )
            .map(TransactionRecord.init)
        }
    }

    /// The lists an account's transactions can be paged through.
    public enum TransactionList: Sendable {
        /// PURCHASED transactions the app has not finished.
        case unfinished
        /// Purchased non-consumables and subscriptions, not revoked.
        case restorable
        /// Every recorded transaction (PURCHASED and DEFERRED).
        case history
    }

    /// One page of a ``TransactionList``.
    public struct TransactionPage: Sendable {
        /// The transactions, in the order they were recorded.
        public var transactions: [TransactionRecord]
        /// Where the next page starts; empty at the end.
        public var nextPageToken: String
        /// True when there is a next page.
        public var hasMore: Bool
    }

    /// The default page size, and the largest a request may ask for.
    public static let defaultPageSize = 100, maxPageSize = 500

    /// A requested page size: 0 means the default, larger than the maximum means the maximum.
    public static func pageSize(_ requested: UInt32) -> Int {
        requested == 0 ? defaultPageSize : min(Int(requested), maxPageSize)
    }

    /// Reads a page token (empty: the first page).
    /// - Throws: ``StoreError`` 3 for a token this store did not give.
    public static func cursor(pageToken: String) throws -> Int64 {
        guard !pageToken.isEmpty else { return 0 }
        guard pageToken.hasPrefix("r"), let value = Int64(pageToken.dropFirst()), value > 0 else {
            throw StoreError.invalid(
                "page_token \"\(pageToken.prefix(64))\" is not one this store gave; pass the next_page_token of the page before, or empty for the first page"
            )
        }
        return value
    }

    /// A page of `list` for an account: at most `pageSize` transactions after the
    /// page token. Each list reads one index in its order: no page scans the account's history.
    public func page(
        _ list: TransactionList, accountID: String, pageSize: Int, pageToken: String
    ) async throws -> TransactionPage {
        let after = try Self.cursor(pageToken: pageToken)
        // Constants, not parameters: SQLite uses a partial index only when the query repeats its WHERE terms.
        let filter =
            switch list {
            case .unfinished: "state = 1 AND finished = 0"
            case .restorable: "state = 1 AND revoked_ms = 0 AND product_type != 1"
            case .history: "1 = 1"
            }
        let rows = try await backend.read { db in
            let order = db.dialect.insertionOrder
            return try db.fetchAll(
                "SELECT \(order) AS row_position, \(TransactionRecord.pageColumns) FROM transactions WHERE account_id = ? AND \(filter) AND \(order) > ? ORDER BY \(order) LIMIT ?",
                [accountID, after, pageSize + 1])
        }
        let hasMore = rows.count > pageSize
        let kept = rows.prefix(pageSize)
        let last: Int64? = try kept.last?["row_position"]
        return TransactionPage(
            transactions: try kept.map(TransactionRecord.init),
            nextPageToken: hasMore ? last.map { "r\($0)" } ?? "" : "", hasMore: hasMore)
    }

    /// An account's balance and the sum of its credit movements, read together (equal in a sound ledger).
    public func balanceAndMovements(accountID: String) throws -> (balance: Int64, movements: Int64) {
        try backend.read { db in
            let balance = try db.value(Int64.self, "SELECT credit_balance FROM accounts WHERE id = ?", [accountID]) ?? 0
            let movements =
                try db.value(
                    Int64.self,
                    "SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM credit_movements WHERE account_id = ?",
                    [accountID]) ?? 0
            return (balance, movements)
        }
    }

    /// Sum of an account's credit movements (equal to its balance in a sound ledger).
    public func creditMovementsTotal(accountID: String) throws -> Int64 {
        try backend.read { db in
            try db.value(
                Int64.self,
                "SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM credit_movements WHERE account_id = ?",
                [accountID]) ?? 0
        }
    }

    // MARK: Revocations and keys

    /// Revocations after `cursor`, oldest first, at most `limit`.
    public func revocations(after cursor: UInt64, limit: Int = 500) async throws -> [RevocationRecord] {
        try await backend.read { db in try db.revocations(after: cursor, limit: limit) }
    }

    /// The public signing keys, in the order they were added (the last one signs), with their retirement time (0: none).
    public func publicKeys() throws -> [ReceiptPublicKey] {
        try backend.read { db in try Self.publicKeys(db) }
    }

    package static func publicKeys(_ db: any LedgerDatabase) throws -> [ReceiptPublicKey] {
        try db.signingKeys().map {
            ReceiptPublicKey(
                id: $0.id, rawRepresentation: $0.publicKey, notBeforeMs: $0.notBeforeMs, notAfterMs: $0.notAfterMs)
        }
    }

    /// Adds a signing key with its private half sealed, or none (kept in the data dir's `keys/`).
    package func addPublicKey(_ key: ReceiptPublicKey, sealed: [UInt8]? = nil) throws {
        try backend.write { db in
            try db.addSigningKey(
                SigningKeyRecord(id: key.id, publicKey: key.rawRepresentation, notBeforeMs: key.notBeforeMs),
                sealedPrivateKey: sealed)
            try db.recordOperatorAction(
                "rotated signing keys: \(key.id) signs from now on", nowMs: key.notBeforeMs)
            try Self.announceChange(db)
        }
    }

    /// The sealed private half of signing key `id`; nil when it has none (kept in a file).
    package func sealedPrivateKey(id: String, _ db: (any LedgerDatabase)? = nil) throws -> [UInt8]? {
        if let db { return try db.sealedPrivateKey(id: id) }
        return try backend.read { db in try db.sealedPrivateKey(id: id) }
    }

    /// Stores the sealed private half of a key that had none (one sealed already is kept).
    package func sealPrivateKey(id: String, sealed: [UInt8]) throws {
        try backend.write { db in try db.sealPrivateKey(id: id, sealed: sealed) }
    }

    /// Removes every transaction and what hangs on one (credit movements, revocations, subscriptions, refund
    /// requests, disputes, processor events, payment intents, idempotency keys) and sets every balance to 0;
    /// accounts, keys, credentials, webhooks and the event log stay. For tests.
    public func clearTransactions() throws {
        try backend.write { db in
            try db.execute(
                """
                DELETE FROM transactions; DELETE FROM credit_movements; DELETE FROM revocations; DELETE FROM disputes;
                DELETE FROM subscriptions; DELETE FROM refund_requests; DELETE FROM processor_events; DELETE FROM entitlements;
                DELETE FROM subscription_extensions; DELETE FROM extension_jobs; DELETE FROM offer_code_redemptions;
                UPDATE offer_codes SET redeemed_ms = 0, account_id = '', transaction_id = ''; UPDATE offer_code_batches SET redeemed = 0;
                DELETE FROM idempotency_keys; DELETE FROM payment_intents; UPDATE accounts SET credit_balance = 0;
                """)
        }
    }

    /// Removes idempotency keys older than `cutoffMs`; returns how many.
    @discardableResult
    public func pruneIdempotencyKeys(olderThanMs cutoffMs: Int64) throws -> Int {
        try backend.write { db in
            try db.execute("DELETE FROM idempotency_keys WHERE created_ms < ?", [cutoffMs])
        }
    }
}

// The ledger adapter: the domain's repository ports on SQL (SQLite and PostgreSQL alike).
extension LedgerDatabase {
    public func failDeferred(transactionID: String, code: UInt32, reason: String, message: String) throws {
        try execute(
            "UPDATE transactions SET state = ?, error_code = ?, error_reason = ?, error_message = ? WHERE id = ? AND state = ?",
            [
                TransactionState.failed.rawValue, Int64(code), reason, message, transactionID,
                TransactionState.deferred.rawValue,
            ])
    }

    public func deferred(before beforeMs: Int64, limit: Int) throws -> [(id: String, accountID: String)] {
        try fetchAll(
            "SELECT id, account_id FROM transactions WHERE state = 3 AND purchase_ms < ? ORDER BY purchase_ms LIMIT ?",
            [beforeMs, Int64(limit)]
        )
        .map { (try $0["id"] as String, try $0["account_id"] as String) }
    }

    public func offerNonceUsed(_ nonce: String) throws -> Bool {
        try value(String.self, "SELECT nonce FROM offer_nonces WHERE nonce = ?", [nonce]) != nil
    }

    /// Used up in the purchase's own write; the unique key also stops a racing second use. `DO NOTHING`, not a
    /// caught violation: on PostgreSQL a failed statement aborts the whole write, and the refusal must still be
    /// recorded in it.
    public func useOfferNonce(_ nonce: String, accountID: String, nowMs: Int64) throws -> Bool {
        try execute(
            "INSERT INTO offer_nonces (nonce, account_id, created_ms) VALUES (?, ?, ?) ON CONFLICT (nonce) DO NOTHING",
            [nonce, accountID, nowMs]) > 0
    }

    public func transaction(id: String) throws -> TransactionRecord? {
        try fetchOne("SELECT * FROM transactions WHERE id = ?", [id]).map(TransactionRecord.init)
    }

    public func transaction(paymentID: String) throws -> TransactionRecord? {
        try fetchOne(LedgerReads.transactionOfPayment, [paymentID]).map(TransactionRecord.init)
    }

    public func account(id: String) throws -> AccountRecord? {
        try fetchOne(LedgerReads.account, [id]).map(AccountRecord.init)
    }

    /// Moves the account to `storefront` (from `previous`, the one it was in): its live subscriptions renew in it from
    /// their next renewal, and STOREFRONT_CHANGED is recorded, all in this write.
    public func setStorefront(accountID: String, _ storefront: String, previous: String, nowMs: Int64) throws {
        try execute("UPDATE accounts SET storefront = ? WHERE id = ?", [storefront, accountID])
        // Every subscription of the account (an ended one may be reinstated), its agreed price's currency known first
        // (a row from before storefronts: its latest transaction's).
        try execute(
            """
            UPDATE subscriptions SET accepted_currency = COALESCE(
              (SELECT currency FROM transactions t WHERE t.id = subscriptions.latest_transaction_id), '')
            WHERE account_id = ? AND accepted_currency = ''
            """, [accountID])
        try execute(
            "UPDATE subscriptions SET storefront = ?, updated_ms = ? WHERE account_id = ?",
            [storefront, nowMs, accountID])
        var event = EventRecord(
            type: .storefrontChanged, accountID: accountID, createdMs: nowMs, reason: "from \(previous)")
        event.storefront = storefront
        try appendEvent(event)
    }

    /// A live purchase of a product bought once (a non-consumable, or an
    /// auto-renewable subscription unexpired at `nowMs`); one indexed lookup.
    public func owned(
        accountID: String, productID: String, kind type: ProductKind, nowMs: Int64
    ) throws -> TransactionRecord? {
        guard type == .nonConsumable || type == .autoRenewableSubscription else { return nil }
        if type == .autoRenewableSubscription {
            // The subscription's row decides: paid up, or in its grace period (a renewal's payment failed but the
            // entitlement is kept); expired early (`expire`) or in billing retry is not owned.
            if let row = try fetchOne(
                "SELECT * FROM subscriptions WHERE account_id = ? AND product_id = ? ORDER BY expires_ms DESC LIMIT 1",
                [accountID, productID]
            ).map(SubscriptionRecord.init) {
                return row.isEntitled(atMs: nowMs) ? try transaction(id: row.latestTransactionID) : nil
            }
        }
        return try fetchOne(
            """
            SELECT * FROM transactions WHERE account_id = ? AND product_id = ? AND state = 1 AND revoked_ms = 0
              AND (product_type = 2 OR expires_ms > ?) ORDER BY \(dialect.insertionOrder) LIMIT 1
            """, [accountID, productID, nowMs]
        ).map(TransactionRecord.init)
    }

    /// A subscription's history for a new period: the first purchase's original id and the latest expiry.
    public func subscriptionHistory(
        accountID: String, productID: String
    ) throws -> (originalID: String?, latestExpiryMs: Int64) {
        let originalID = try value(
            String.self,
            "SELECT original_id FROM transactions WHERE account_id = ? AND product_id = ? AND state = 1 AND revoked_ms = 0 ORDER BY \(dialect.insertionOrder) LIMIT 1",
            [accountID, productID])
        let latest =
            try value(
                Int64.self,
                "SELECT MAX(expires_ms) FROM transactions WHERE account_id = ? AND product_id = ? AND state = 1 AND revoked_ms = 0",
                [accountID, productID]) ?? 0
        return (originalID, latest)
    }

    /// Orders this write after every other write about the account's purchases, on PostgreSQL:
    /// a write of the account's row, so of two concurrent writes about one account the second
    /// waits for the first and then fails with a serialization failure, and is retried on a
    /// snapshot that holds the first (PostgreSQL's "first updater wins"). Without it a
    /// `SERIALIZABLE` write could check ownership on a snapshot older than a purchase it then
    /// races (unique indexes are checked against the present, the ownership read against the
    /// snapshot: an approval could pass both while a purchase completed, and charge twice).
    /// SQLite runs one write at a time: nothing to do there.
    public func serializeOnAccount(_ accountID: String) throws {
        guard dialect == .postgres, firstSerialization(of: accountID) else { return }
        try executeLater(LedgerWrites.orderAccount, [accountID])
    }

    /// Inserts a transaction and, for a purchased consumable, its credits, and records its event:
    /// PURCHASED or DEFERRED by its state, or `event` (a renewal's RENEWED).
    public func insertTransaction(_ record: TransactionRecord, event: EventKind?) throws {
        try serializeOnAccount(record.accountID)
        // Sent without waiting on PostgreSQL: the refusal may come from a later statement of this write, even its
        // COMMIT, and ends the write all the same.
        try record.insert(self) { error in
            guard error.kind == .uniqueViolation else { return nil }
            return StoreError(
                .conflict,
                "the ledger refused transaction \(record.id): \(record.productID) is already owned by \(record.accountID), or its payment is already recorded"
            )
        }
        if record.state == .purchased, record.credits > 0 {
            try addCredits(
                Int64(clamping: record.credits), account: record.accountID, transaction: record.id, reason: "purchase",
                nowMs: record.purchaseMs)
        }
        if let type = event ?? (record.state == .purchased ? .purchased : record.state == .deferred ? .deferred : nil) {
            try appendEvent(EventRecord(type, record, nowMs: record.purchaseMs))
        }
    }

    /// Moves credits and records the movement; the balance's CHECK keeps it from going below 0 (on PostgreSQL, the
    /// refusal may come from a later statement of the write: ``executeLater(_:_:refusal:)``).
    public func addCredits(_ amount: Int64, account: String, transaction: String?, reason: String, nowMs: Int64) throws
    {
        try executeLater(LedgerWrites.addCredits, [amount, account])
        try executeLater(
            "INSERT INTO credit_movements (account_id, amount, transaction_id, reason, created_ms) VALUES (?, ?, ?, ?, ?)",
            [account, amount, transaction, reason, nowMs])
    }

    /// Reads ahead, as one statement on PostgreSQL, what the first write of a purchase reads first: the key's stored
    /// answer (with a key), the account, an earlier intent of the payment, and (with a key) an earlier transaction of
    /// it. Each is still read by its own function, in any order, answered from what was read ahead.
    public func readAheadPurchase(account: String, key: String?, intentID: String, paymentID: String) throws {
        var reads: [LedgerRead] = []
        if let key { reads.append(LedgerRead(LedgerReads.idempotencyAnswer, [account, key])) }
        reads.append(LedgerRead(LedgerReads.account, [account]))
        reads.append(LedgerRead(LedgerReads.intent, [intentID]))
        if key != nil { reads.append(LedgerRead(LedgerReads.transactionOfPayment, [paymentID])) }
        try readAhead(reads)
    }

    /// Reads ahead, as one statement on PostgreSQL, what the write of a charged payment's outcome reads first: a
    /// transaction already recorded for the payment, and the signing key chosen for its receipt (see
    /// ``readAheadPurchase(account:key:intentID:paymentID:)``).
    public func readAheadCharged(paymentID: String, signingKey: String) throws {
        try readAhead([
            LedgerRead(LedgerReads.transactionOfPayment, [paymentID]), LedgerRead(LedgerReads.signingKey, [signingKey]),
        ])
    }

    /// The answer stored for an idempotency key, checked in the same write that will store a new one.
    /// - Throws: ``StoreError`` 6 when the key was used for another request.
    public func remembered(account: String, key: String?, operation: String, hash: [UInt8]) throws -> [UInt8]? {
        guard let key,
            let row = try fetchOne(LedgerReads.idempotencyAnswer, [account, key])
        else {
            return nil
        }
        let storedOperation: String = try row["operation"]
        let storedHash: [UInt8] = try row["request_hash"]
        guard storedOperation == operation, storedHash == hash else {
            throw StoreError(
                .keyReused,
                "idempotency-key \"\(key)\" was already used for a different \(storedOperation) request; use a new key for a new request"
            )
        }
        return try row["response"] as [UInt8]
    }

    /// Stores an idempotency key's answer (nothing without a key). An answer already stored stays, unless `replacing`.
    public func remember(
        _ response: [UInt8], account: String, key: String?, operation: String, hash: [UInt8], nowMs: Int64,
        replacing: Bool
    ) throws {
        guard let key else { return }
        try executeLater(
            """
            INSERT INTO idempotency_keys (account_id, key, operation, request_hash, response, created_ms) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT (account_id, key) DO \(replacing
                  ? "UPDATE SET operation = excluded.operation, request_hash = excluded.request_hash, response = excluded.response, created_ms = excluded.created_ms"
                  : "NOTHING")
            """, [account, key, operation, hash, response, nowMs])
    }

    public func markFinished(transactionID: String) throws {
        try execute("UPDATE transactions SET finished = 1 WHERE id = ?", [transactionID])
    }

    /// Rewrites a transaction in place (an approval: DEFERRED → PURCHASED), keeping its row and so its place
    /// in the account's pages; a purchased consumable's credits are added and APPROVED recorded.
    public func replaceTransaction(_ record: TransactionRecord) throws {
        try serializeOnAccount(record.accountID)
        do {
            try execute(
                """
                UPDATE transactions SET original_id = ?, product_type = ?, quantity = ?, state = ?, purchase_ms = ?, expires_ms = ?,
                  price = ?, currency = ?, payment_method = ?, payment_id = ?, receipt = ?, finished = ?, credits = ?,
                  period_start_ms = ?, offer_id = ?, storefront = ? WHERE id = ?
                """,
                [
                    record.originalID, record.productType.rawValue, Int64(record.quantity), record.state.rawValue,
                    record.purchaseMs,
                    record.expiresMs, record.price, record.currency, record.paymentMethod, record.paymentID,
                    record.receipt,
                    record.finished, Int64(clamping: record.credits), record.periodStartMs, record.offerID,
                    record.storefront, record.id,
                ])
        } catch let error as LedgerError where error.kind == .uniqueViolation {
            throw StoreError(
                .conflict,
                "the ledger refused transaction \(record.id): \(record.productID) is already owned by \(record.accountID)"
            )
        }
        if record.state == .purchased, record.credits > 0 {
            try addCredits(
                Int64(clamping: record.credits), account: record.accountID, transaction: record.id, reason: "purchase",
                nowMs: record.purchaseMs)
        }
        if record.state == .purchased {
            try appendEvent(EventRecord(.approved, record, nowMs: record.purchaseMs))
        }
    }

    /// Revokes a purchased transaction in one write: its row marked, a revocation
    /// in the feed, a consumable's credits taken back as far as the balance goes
    /// and the rest recorded as the shortfall on both.
    public func revoke(transactionID: String, reason: String, nowMs: Int64) throws -> RevocationRecord {
        guard let current = try transaction(id: transactionID), current.state == .purchased else {
            throw StoreError(.conflict, "transaction \(transactionID) is not purchased")
        }
        guard current.revokedMs == 0 else {
            throw StoreError(.conflict, "transaction \(transactionID) was already refunded")
        }
        try serializeOnAccount(current.accountID)
        var shortfall: Int64 = 0
        if current.credits > 0 {
            let owed = Int64(clamping: current.credits)
            let balance = Int64(clamping: try account(id: current.accountID)?.creditBalance ?? 0)
            let taken = min(balance, owed)
            shortfall = owed - taken
            if taken > 0 {
                try addCredits(
                    -taken, account: current.accountID, transaction: transactionID, reason: "refund", nowMs: nowMs)
            }
        }
        try execute(
            "UPDATE transactions SET revoked_ms = ?, revocation_reason = ?, refund_credit_shortfall = ? WHERE id = ?",
            [nowMs, reason, shortfall, transactionID])
        // Refunding a subscription's newest transaction ends the subscription (REVOKED): nothing renews it.
        try execute(
            "UPDATE subscriptions SET state = 5, due_ms = 0, will_auto_renew = 0, updated_ms = ? WHERE latest_transaction_id = ?",
            [nowMs, transactionID])
        if dialect == .postgres {
            // The feed is read by cursor, and a sequence hands out cursors at insert, not at commit: two refunds in
            // flight could commit out of order, and a follower that read the higher cursor would skip the lower one
            // for good (a refunded purchase still served). Revocations take their cursors one at a time, under a
            // lock held to COMMIT, so they commit in cursor order. Refunds and upgrades (which revoke the old
            // subscription's transaction) wait on it, across accounts; purchases and renewals never take it.
            try executeLater("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", [Ledger.revocationLockKey])
        }
        guard
            let revocation = try fetchOne(
                """
                INSERT INTO revocations (transaction_id, original_transaction_id, account_id, revoked_ms, reason, credit_shortfall)
                VALUES (?, ?, ?, ?, ?, ?) RETURNING *
                """, [transactionID, current.originalID, current.accountID, nowMs, reason, shortfall]
            ).map(RevocationRecord.init)
        else {
            throw StoreError(.internalFailure, "revocation of \(transactionID) vanished in its own write")
        }
        try appendEvent(
            EventRecord(.refunded, current, nowMs: nowMs, reason: reason, creditShortfall: UInt64(clamping: shortfall)))
        try Ledger.announceChange(self)
        return revocation
    }

    /// Undoes a revocation in one write: the row unmarked, the credits the revocation took given back, its
    /// revocation out of the feed, REFUND_REVERSED recorded.
    public func reinstate(transactionID: String, reason: String, nowMs: Int64) throws -> TransactionRecord {
        guard let current = try transaction(id: transactionID), current.state == .purchased, current.revokedMs != 0
        else {
            throw StoreError(.conflict, "transaction \(transactionID) is not a revoked purchase")
        }
        try serializeOnAccount(current.accountID)
        let given = Int64(clamping: current.credits) - Int64(clamping: current.refundCreditShortfall)
        if given > 0 {
            try addCredits(
                given, account: current.accountID, transaction: transactionID, reason: "reinstated", nowMs: nowMs)
        }
        try execute(
            "UPDATE transactions SET revoked_ms = 0, revocation_reason = '', refund_credit_shortfall = 0 WHERE id = ?",
            [transactionID])
        // Followers that read the revocation keep it (WatchRevocations is superseded); the content service follows
        // REFUND_REVERSED.
        try execute("DELETE FROM revocations WHERE transaction_id = ?", [transactionID])
        var reinstated = current
        reinstated.revokedMs = 0
        reinstated.revocationReason = ""
        reinstated.refundCreditShortfall = 0
        try appendEvent(EventRecord(.refundReversed, reinstated, nowMs: nowMs, reason: reason))
        try Ledger.announceChange(self)
        return reinstated
    }
}

extension SigningKeyRecord {
    fileprivate init(row: LedgerRow) throws {
        self.init(
            id: try row["id"], publicKey: try row["public_key"] as [UInt8], notBeforeMs: try row["not_before_ms"],
            notAfterMs: try row["not_after_ms"])
    }
}

// The ledger adapter: signing keys and the revocation feed.
extension LedgerDatabase {
    public func signingKeys() throws -> [SigningKeyRecord] {
        try fetchAll(
            "SELECT id, public_key, not_before_ms, not_after_ms FROM signing_keys ORDER BY \(dialect.insertionOrder)"
        ).map(SigningKeyRecord.init(row:))
    }

    /// The signing key `id`, retired or not; nil when the ledger has no key of that id.
    public func signingKey(id: String) throws -> SigningKeyRecord? {
        try fetchOne(LedgerReads.signingKey, [id]).map(SigningKeyRecord.init(row:))
    }

    public func addSigningKey(_ key: SigningKeyRecord, sealedPrivateKey: [UInt8]?) throws {
        try execute(
            "INSERT INTO signing_keys (id, public_key, not_before_ms, sealed_private_key) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [key.id, key.publicKey, key.notBeforeMs, sealedPrivateKey])
    }

    public func sealedPrivateKey(id: String) throws -> [UInt8]? {
        try value([UInt8].self, "SELECT sealed_private_key FROM signing_keys WHERE id = ?", [id])
    }

    public func sealPrivateKey(id: String, sealed: [UInt8]) throws {
        try execute(
            "UPDATE signing_keys SET sealed_private_key = ? WHERE id = ? AND sealed_private_key IS NULL", [sealed, id])
    }

    public func retireSigningKey(id: String, atMs: Int64) throws {
        try execute("UPDATE signing_keys SET not_after_ms = ? WHERE id = ?", [atMs, id])
    }

    public func revocations(after cursor: UInt64, limit: Int) throws -> [RevocationRecord] {
        try fetchAll(
            "SELECT * FROM revocations WHERE cursor > ? ORDER BY cursor LIMIT ?",
            [Int64(clamping: cursor), Int64(max(limit, 0))]
        )
        .map(RevocationRecord.init)
    }

    public func latestRevocationCursor() throws -> UInt64 {
        UInt64(clamping: try value(Int64.self, "SELECT MAX(cursor) FROM revocations") ?? 0)
    }
}

/// Reads that more than one write makes, by one text, so that a read ahead (``LedgerDatabase/readAhead(_:)``) answers
/// them.
package enum LedgerReads {
    package static let account = "SELECT * FROM accounts WHERE id = ?"
    package static let idempotencyAnswer = "SELECT * FROM idempotency_keys WHERE account_id = ? AND key = ?"
    package static let intent = "SELECT * FROM payment_intents WHERE id = ?"
    package static let transactionOfPayment = "SELECT * FROM transactions WHERE payment_id = ?"
    package static let signingKey = "SELECT id, public_key, not_before_ms, not_after_ms FROM signing_keys WHERE id = ?"
}

/// Writes the PostgreSQL backend knows by their text.
package enum LedgerWrites {
    /// The update that orders writes about an account (``LedgerDatabase/serializeOnAccount(_:)``): a new version of
    /// its row, changing nothing.
    package static let orderAccount = "UPDATE accounts SET payments_allowed = payments_allowed WHERE id = ?"
    /// Credits moved to or from an account: an update of its row that orders writes about it as well.
    package static let addCredits = "UPDATE accounts SET credit_balance = credit_balance + ? WHERE id = ?"
}
