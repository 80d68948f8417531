import Foundation
import GRDB
import KioskAPI

/// One row of the `transactions` table.
public struct TransactionRecord: Hashable, Sendable {
    /// The id.
    public var id: String
    /// The original transaction id (a renewal keeps its first purchase's).
    public var originalID: String
    /// The account.
    public var accountID: String
    /// The product.
    public var productID: String
    /// The product's kind.
    public var productType: ReceiptV1.ProductType
    /// Units bought.
    public var quantity: UInt32
    /// PURCHASED, FAILED or DEFERRED.
    public var state: StoreV1.TransactionState
    /// Purchase (or approval) time, milliseconds since 1970.
    public var purchaseMs: Int64
    /// Subscription expiry, milliseconds since 1970; 0 = none.
    public var expiresMs: Int64
    /// Unit price, decimal string.
    public var price: String
    /// ISO 4217 currency code.
    public var currency: String
    /// The payment method used.
    public var paymentMethod: String
    /// The payment's stable id; unique, so one payment is recorded (and charged) once.
    public var paymentID: String?
    /// FAILED: StoreKit error code.
    public var errorCode: UInt32
    /// FAILED: machine-readable reason.
    public var errorReason: String
    /// FAILED: readable message.
    public var errorMessage: String
    /// The encoded `SignedReceipt`, for PURCHASED transactions.
    public var receipt: [UInt8]?
    /// True once the app finished it.
    public var finished: Bool
    /// Revocation (refund) time, milliseconds since 1970; 0 = not revoked.
    public var revokedMs: Int64
    /// Why it was revoked.
    public var revocationReason: String
    /// Sandbox or production.
    public var environment: ReceiptV1.Environment
    /// Credits this transaction added to the balance.
    public var credits: UInt64

    /// The transaction as sent on the wire.
    public var message: StoreV1.Transaction {
        StoreV1.Transaction(
            transactionID: id, originalTransactionID: originalID, productID: productID, productType: productType,
            quantity: quantity, state: state, purchaseDateMs: purchaseMs, expiresDateMs: expiresMs, accountID: accountID,
            errorCode: errorCode, errorReason: errorReason, errorMessage: errorMessage, signedReceipt: receipt ?? [],
            finished: finished, revocationDateMs: revokedMs, revocationReason: revocationReason, price: price,
            currency: currency, environment: environment)
    }

    init(row: Row) {
        id = row["id"]
        originalID = row["original_id"]
        accountID = row["account_id"]
        productID = row["product_id"]
        productType = ReceiptV1.ProductType(rawValue: row["product_type"])
        quantity = UInt32(clamping: row["quantity"] as Int64)
        state = StoreV1.TransactionState(rawValue: row["state"])
        purchaseMs = row["purchase_ms"]
        expiresMs = row["expires_ms"]
        price = row["price"]
        currency = row["currency"]
        paymentMethod = row["payment_method"]
        paymentID = row["payment_id"]
        errorCode = UInt32(clamping: row["error_code"] as Int64)
        errorReason = row["error_reason"]
        errorMessage = row["error_message"]
        receipt = (row["receipt"] as Data?).map { Array($0) }
        finished = row["finished"]
        revokedMs = row["revoked_ms"]
        revocationReason = row["revocation_reason"]
        environment = ReceiptV1.Environment(rawValue: row["environment"])
        credits = UInt64(clamping: row["credits"] as Int64)
    }

    init(
        id: String, originalID: String, accountID: String, product: CatalogProduct, quantity: UInt32,
        state: StoreV1.TransactionState, purchaseMs: Int64, expiresMs: Int64, paymentMethod: String, paymentID: String?,
        environment: ReceiptV1.Environment
    ) {
        self.id = id
        self.originalID = originalID
        self.accountID = accountID
        self.productID = product.id
        self.productType = product.type
        self.quantity = quantity
        self.state = state
        self.purchaseMs = purchaseMs
        self.expiresMs = expiresMs
        self.price = product.price
        self.currency = product.currency
        self.paymentMethod = paymentMethod
        self.paymentID = paymentID
        self.errorCode = 0
        self.errorReason = ""
        self.errorMessage = ""
        self.receipt = nil
        self.finished = false
        self.revokedMs = 0
        self.revocationReason = ""
        self.environment = environment
        self.credits = 0
    }

    func insert(_ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO transactions (id, original_id, account_id, product_id, product_type, quantity, state,
                  purchase_ms, expires_ms, price, currency, payment_method, payment_id, error_code, error_reason,
                  error_message, receipt, finished, revoked_ms, revocation_reason, environment, credits)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                id, originalID, accountID, productID, productType.rawValue, Int64(quantity), state.rawValue,
                purchaseMs, expiresMs, price, currency, paymentMethod, paymentID, Int64(errorCode), errorReason,
                errorMessage, receipt.map { Data($0) }, finished, revokedMs, revocationReason, environment.rawValue,
                Int64(clamping: credits),
            ])
    }
}

/// An account row.
public struct AccountRecord: Hashable, Sendable {
    /// The id.
    public var id: String
    /// False when payments are disabled (restrictions).
    public var paymentsAllowed: Bool
    /// Credits held.
    public var creditBalance: UInt64

    init(row: Row) {
        id = row["id"]
        paymentsAllowed = row["payments_allowed"]
        creditBalance = UInt64(clamping: row["credit_balance"] as Int64)
    }
}

/// A revocation row: a refunded or revoked transaction.
public struct RevocationRecord: Hashable, Sendable {
    /// The revocation's position in the feed.
    public var cursor: UInt64
    /// The revoked transaction.
    public var transactionID: String
    /// Its original transaction.
    public var originalTransactionID: String
    /// The account.
    public var accountID: String
    /// Revocation (refund) time, milliseconds since 1970; 0 = not revoked.
    public var revokedMs: Int64
    /// Why.
    public var reason: String

    init(row: Row) {
        cursor = UInt64(clamping: row["cursor"] as Int64)
        transactionID = row["transaction_id"]
        originalTransactionID = row["original_transaction_id"]
        accountID = row["account_id"]
        revokedMs = row["revoked_ms"]
        reason = row["reason"]
    }

    /// The revocation as sent on the wire.
    public var message: StoreV1.Revocation {
        StoreV1.Revocation(cursor: cursor, transactionID: transactionID, originalTransactionID: originalTransactionID,
                           revocationDateMs: revokedMs, reason: reason)
    }
}

/// The store's durable state: an SQLite database in WAL mode, in the data dir.
///
/// Every write is one SQLite transaction committed with `synchronous = FULL`
/// before the method returns, so an answer the store sends is on disk.
public final class Ledger: Sendable {
    /// The database file name inside the data dir.
    public static let fileName = "ledger.sqlite"

    let pool: DatabasePool

    /// Opens (creating and migrating if needed) the ledger in `directory`.
    public init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.busyMode = .timeout(10)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        pool = try DatabasePool(path: (directory as NSString).appendingPathComponent(Self.fileName), configuration: configuration)
        try Self.migrator.migrate(pool)
    }

    /// The versioned schema. Add a migration for every change; never edit a shipped one.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE accounts (
                  id TEXT PRIMARY KEY,
                  token_hash BLOB NOT NULL UNIQUE,
                  payments_allowed INTEGER NOT NULL DEFAULT 1,
                  credit_balance INTEGER NOT NULL DEFAULT 0 CHECK (credit_balance >= 0),
                  created_ms INTEGER NOT NULL
                );
                CREATE TABLE transactions (
                  id TEXT PRIMARY KEY,
                  original_id TEXT NOT NULL,
                  account_id TEXT NOT NULL REFERENCES accounts(id),
                  product_id TEXT NOT NULL,
                  product_type INTEGER NOT NULL,
                  quantity INTEGER NOT NULL,
                  state INTEGER NOT NULL,
                  purchase_ms INTEGER NOT NULL,
                  expires_ms INTEGER NOT NULL DEFAULT 0,
                  price TEXT NOT NULL,
                  currency TEXT NOT NULL,
                  payment_method TEXT NOT NULL,
                  payment_id TEXT UNIQUE,
                  error_code INTEGER NOT NULL DEFAULT 0,
                  error_reason TEXT NOT NULL DEFAULT '',
                  error_message TEXT NOT NULL DEFAULT '',
                  receipt BLOB,
                  finished INTEGER NOT NULL DEFAULT 0,
                  revoked_ms INTEGER NOT NULL DEFAULT 0,
                  revocation_reason TEXT NOT NULL DEFAULT '',
                  environment INTEGER NOT NULL,
                  credits INTEGER NOT NULL DEFAULT 0
                );
                CREATE INDEX transactions_by_account ON transactions(account_id, state, purchase_ms);
                CREATE TABLE credit_movements (
                  id INTEGER PRIMARY KEY AUTOINCREMENT,
                  account_id TEXT NOT NULL REFERENCES accounts(id),
                  amount INTEGER NOT NULL,
                  transaction_id TEXT,
                  reason TEXT NOT NULL,
                  created_ms INTEGER NOT NULL
                );
                CREATE INDEX credit_movements_by_account ON credit_movements(account_id);
                CREATE TABLE idempotency_keys (
                  account_id TEXT NOT NULL,
                  key TEXT NOT NULL,
                  operation TEXT NOT NULL,
                  request_hash BLOB NOT NULL,
                  response BLOB NOT NULL,
                  created_ms INTEGER NOT NULL,
                  PRIMARY KEY (account_id, key)
                );
                CREATE INDEX idempotency_keys_by_age ON idempotency_keys(created_ms);
                CREATE TABLE revocations (
                  cursor INTEGER PRIMARY KEY AUTOINCREMENT,
                  transaction_id TEXT NOT NULL UNIQUE,
                  original_transaction_id TEXT NOT NULL,
                  account_id TEXT NOT NULL,
                  revoked_ms INTEGER NOT NULL,
                  reason TEXT NOT NULL
                );
                CREATE TABLE signing_keys (
                  id TEXT PRIMARY KEY,
                  public_key BLOB NOT NULL,
                  not_before_ms INTEGER NOT NULL
                );
                CREATE TABLE settings (
                  key TEXT PRIMARY KEY,
                  value TEXT NOT NULL
                );
                """)
        }
        return migrator
    }

    // MARK: Settings

    /// The environment this ledger's receipts are signed for, once a store has opened it.
    public func environment() throws -> ReceiptV1.Environment? {
        try pool.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM settings WHERE key = 'environment'").flatMap(ReceiptV1.Environment.init(name:))
        }
    }

    /// Binds the ledger to `environment` on first use; refuses another environment later.
    func claim(environment: ReceiptV1.Environment) throws {
        try pool.write { db in
            if let stored = try String.fetchOne(db, sql: "SELECT value FROM settings WHERE key = 'environment'") {
                guard stored == environment.name else {
                    throw StoreError(.failedPrecondition, "the data dir holds a \(stored) ledger; it cannot be served as \(environment.name)")
                }
            } else {
                try db.execute(sql: "INSERT INTO settings (key, value) VALUES ('environment', ?)", arguments: [environment.name])
            }
        }
    }

    // MARK: Accounts

    /// Creates an account whose bearer token hashes to `tokenHash`.
    public func createAccount(id: String, tokenHash: [UInt8], paymentsAllowed: Bool, nowMs: Int64) throws {
        try pool.write { db in
            try db.execute(
                sql: "INSERT INTO accounts (id, token_hash, payments_allowed, created_ms) VALUES (?, ?, ?, ?)",
                arguments: [id, Data(tokenHash), paymentsAllowed, nowMs])
        }
    }

    /// The account whose token hashes to `tokenHash`.
    public func account(tokenHash: [UInt8]) async throws -> AccountRecord? {
        try await pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM accounts WHERE token_hash = ?", arguments: [Data(tokenHash)]).map(AccountRecord.init)
        }
    }

    /// The account with `id`.
    public func account(id: String) throws -> AccountRecord? {
        try pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM accounts WHERE id = ?", arguments: [id]).map(AccountRecord.init)
        }
    }

    /// Allows or forbids the account's payments; false when there is no such account.
    @discardableResult
    public func setPaymentsAllowed(accountID: String, _ allowed: Bool) throws -> Bool {
        try pool.write { db in
            try db.execute(sql: "UPDATE accounts SET payments_allowed = ? WHERE id = ?", arguments: [allowed, accountID])
            return db.changesCount > 0
        }
    }

    // MARK: Transactions

    /// The transaction with `id`.
    public func transaction(id: String) throws -> TransactionRecord? {
        try pool.read { db in try Self.transaction(db, id: id) }
    }

    static func transaction(_ db: Database, id: String) throws -> TransactionRecord? {
        try Row.fetchOne(db, sql: "SELECT * FROM transactions WHERE id = ?", arguments: [id]).map(TransactionRecord.init)
    }

    /// The transaction recorded for a payment (payment ids are unique).
    public func transaction(paymentID: String) throws -> TransactionRecord? {
        try pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM transactions WHERE payment_id = ?", arguments: [paymentID]).map(TransactionRecord.init)
        }
    }

    /// Every transaction of an account, oldest first.
    public func transactions(accountID: String) throws -> [TransactionRecord] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM transactions WHERE account_id = ? ORDER BY purchase_ms, rowid", arguments: [accountID])
                .map(TransactionRecord.init)
        }
    }

    /// PURCHASED transactions of an account that the app has not finished.
    public func unfinished(accountID: String) async throws -> [TransactionRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM transactions WHERE account_id = ? AND state = ? AND finished = 0 ORDER BY purchase_ms, rowid",
                arguments: [accountID, StoreV1.TransactionState.purchased.rawValue]
            ).map(TransactionRecord.init)
        }
    }

    /// The restorable transactions of an account: purchased non-consumables and subscriptions, not revoked.
    public func restorable(accountID: String) async throws -> [TransactionRecord] {
        try await pool.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM transactions WHERE account_id = ? AND state = ? AND product_type != ? AND revoked_ms = 0
                    ORDER BY purchase_ms, rowid
                    """,
                arguments: [accountID, StoreV1.TransactionState.purchased.rawValue, ReceiptV1.ProductType.consumable.rawValue]
            ).map(TransactionRecord.init)
        }
    }

    /// Sum of an account's credit movements (equal to its balance in a sound ledger).
    public func creditMovementsTotal(accountID: String) throws -> Int64 {
        try pool.read { db in
            try Int64.fetchOne(db, sql: "SELECT COALESCE(SUM(amount), 0) FROM credit_movements WHERE account_id = ?", arguments: [accountID]) ?? 0
        }
    }

    // MARK: Revocations and keys

    /// Revocations after `cursor`, oldest first, at most `limit`.
    public func revocations(after cursor: UInt64, limit: Int = 500) async throws -> [RevocationRecord] {
        try await pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM revocations WHERE cursor > ? ORDER BY cursor LIMIT ?",
                             arguments: [Int64(clamping: cursor), limit]).map(RevocationRecord.init)
        }
    }

    /// The public signing keys, in the order they were added (the last one signs).
    public func publicKeys() throws -> [ReceiptPublicKey] {
        try pool.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM signing_keys ORDER BY rowid").map { row in
                ReceiptPublicKey(id: row["id"], rawRepresentation: Array(row["public_key"] as Data), notBeforeMs: row["not_before_ms"])
            }
        }
    }

    func addPublicKey(_ key: ReceiptPublicKey) throws {
        try pool.write { db in
            try db.execute(sql: "INSERT OR IGNORE INTO signing_keys (id, public_key, not_before_ms) VALUES (?, ?, ?)",
                           arguments: [key.id, Data(key.rawRepresentation), key.notBeforeMs])
        }
    }

    /// Removes every transaction, credit movement, revocation and idempotency
    /// key, and sets every balance to 0; accounts and keys stay. For tests.
    public func clearTransactions() throws {
        try pool.write { db in
            try db.execute(sql: """
                DELETE FROM transactions; DELETE FROM credit_movements; DELETE FROM revocations;
                DELETE FROM idempotency_keys; UPDATE accounts SET credit_balance = 0;
                """)
        }
    }

    /// Removes idempotency keys older than `cutoffMs`; returns how many.
    @discardableResult
    public func pruneIdempotencyKeys(olderThanMs cutoffMs: Int64) throws -> Int {
        try pool.write { db in
            try db.execute(sql: "DELETE FROM idempotency_keys WHERE created_ms < ?", arguments: [cutoffMs])
            return db.changesCount
        }
    }
}
