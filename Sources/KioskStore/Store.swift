import Crypto
import Foundation
import GRDB
import KioskAPI
import KioskRPC
import KioskWire
import NIOConcurrencyHelpers

/// The store: catalog, accounts, payments, ledger, receipts, restore and verification.
///
/// The RPC surface is ``StoreService``; the admin commands of `kiosk-store`
/// call the `public` methods here directly on the data dir.
public final class Store: Sendable {
    /// The configuration.
    public let configuration: StoreConfiguration
    /// The durable state.
    public let ledger: Ledger
    let keys: KeyStore
    private let locks = AccountLock()
    private let verifier: NIOLockedValueBox<ReceiptVerifier>
    private let revocationSignal = RevocationSignal()
    private let lastKeyRefreshMs = NIOLockedValueBox<Int64?>(nil)

    /// Opens the store on its data dir, creating the ledger and the first signing key if needed.
    public init(configuration: StoreConfiguration) throws {
        self.configuration = configuration
        self.ledger = try Ledger(directory: configuration.dataDirectory)
        try ledger.claim(environment: configuration.environment)
        self.keys = try KeyStore(dataDirectory: configuration.dataDirectory, ledger: ledger, nowMs: configuration.clock())
        self.verifier = NIOLockedValueBox(ReceiptVerifier(keys: try ledger.publicKeys(), environment: configuration.environment))
        try ledger.pruneIdempotencyKeys(olderThanMs: configuration.clock() - configuration.idempotencyRetention.wholeMilliseconds)
    }

    var catalog: Catalog { configuration.catalog }
    var now: Int64 { configuration.clock() }

    // MARK: Accounts

    /// Creates an account; returns its id and its bearer token. Only the token's hash is stored.
    public func createAccount(paymentsAllowed: Bool = true) throws -> (id: String, token: String) {
        let id = "acct_" + Self.randomHex(bytes: 8)
        let token = "kiosk_" + Self.randomHex(bytes: 32)
        try ledger.createAccount(id: id, tokenHash: Self.hash(token), paymentsAllowed: paymentsAllowed, nowMs: now)
        return (id, token)
    }

    /// Allows or forbids an account's payments.
    public func setPaymentsAllowed(accountID: String, _ allowed: Bool) throws {
        guard try ledger.setPaymentsAllowed(accountID: accountID, allowed) else {
            throw StoreError.notFound("no account \(accountID)")
        }
    }

    /// The account a bearer token belongs to.
    /// - Throws: ``StoreError`` UNAUTHENTICATED (16) for a missing or unknown token.
    public func authenticate(token: String?) async throws -> AccountRecord {
        guard let token, !token.isEmpty else {
            throw StoreError.unauthenticated("missing metadata \"authorization: Bearer <token>\"")
        }
        guard let account = try await ledger.account(tokenHash: Self.hash(token)) else {
            throw StoreError.unauthenticated("the bearer token is not valid")
        }
        return account
    }

    // MARK: Products

    /// The catalog products with `ids` (all when empty), and the ids the catalog does not have.
    public func products(ids: [String]) -> (found: [CatalogProduct], invalid: [String]) {
        guard !ids.isEmpty else { return (catalog.products, []) }
        var found: [CatalogProduct] = []
        var invalid: [String] = []
        var seen: Set<String> = []
        for id in ids where seen.insert(id).inserted {
            if let product = catalog.product(id) { found.append(product) } else { invalid.append(id) }
        }
        return (found, invalid)
    }

    // MARK: Purchases

    /// Buys `quantity` of a product, at most once per idempotency key.
    ///
    /// Call errors: quantity outside 1…max, empty product id or payment method
    /// (3), the key reused for another request (6). Every other outcome is a
    /// transaction: PURCHASED (with its receipt), FAILED or DEFERRED. The
    /// answer is committed to the ledger before this returns.
    ///
    /// Once started, a purchase is not cancelled with the calling task: it is
    /// charged and committed whole, and a retry with its key gets the answer.
    public func purchase(
        account: AccountRecord, productID: String, quantity: UInt32, paymentMethod: String, idempotencyKey: String?
    ) async throws -> StoreV1.PurchaseResponse {
        try await Task {
            try await uncancellablePurchase(account: account, productID: productID, quantity: quantity,
                                            paymentMethod: paymentMethod, idempotencyKey: idempotencyKey)
        }.value
    }

    private func uncancellablePurchase(
        account: AccountRecord, productID: String, quantity: UInt32, paymentMethod: String, idempotencyKey: String?
    ) async throws -> StoreV1.PurchaseResponse {
        guard !productID.isEmpty else { throw StoreError.invalid("product_id is required") }
        guard !paymentMethod.isEmpty else { throw StoreError.invalid("payment_method is required, e.g. \"test-card:4242424242424242\"") }
        try Self.checkIdempotencyKey(idempotencyKey)
        let product = catalog.product(productID)
        let maxQuantity = product?.maxQuantity ?? 10
        guard quantity >= 1, quantity <= maxQuantity else {
            throw StoreError.invalid("quantity \(quantity) is outside 1…\(maxQuantity) for product \(productID)")
        }
        let requestHash = Self.hash("purchase\u{0}\(productID)\u{0}\(quantity)\u{0}\(paymentMethod)")
        let response = try await locks.withLock(account.id) {
            if let replay = try await replayed(StoreV1.PurchaseResponse.self, account: account.id, key: idempotencyKey, operation: "purchase", hash: requestHash) {
                var response = replay
                response.replayed = true
                return response
            }
            let nowMs = now
            let transactionID = Self.newTransactionID()
            var record: TransactionRecord?
            var message: StoreV1.Transaction
            var alreadyOwned = false
            var replayedFromLedger = false
            let current = try ledger.account(id: account.id) ?? account
            if !current.paymentsAllowed {
                message = failed(transactionID, account.id, productID, quantity, nowMs, code: 4, reason: "payment_not_allowed",
                                 "payment not allowed: purchases are disabled for this account")
            } else if let product {
                let paymentID = idempotencyKey.map { Self.hash("\(account.id)\u{0}\($0)").hexString } ?? transactionID
                if let owned = try ownedTransaction(account: account.id, product: product, nowMs: nowMs) {
                    message = owned.message
                    alreadyOwned = true
                } else if idempotencyKey != nil, let earlier = try ledger.transaction(paymentID: paymentID) {
                    // The key's answer was pruned (past the retention) but the ledger still has what that
                    // payment bought: the same answer again, never a second charge or a clash on payment_id.
                    message = earlier.message
                    replayedFromLedger = true
                } else {
                    let payment = PaymentRequest(paymentID: paymentID, accountID: account.id, productID: product.id, quantity: quantity,
                                                 unitPrice: product.price, currency: product.currency, paymentMethod: paymentMethod)
                    // Everything that can fail (ledger reads, the signing key) happens before the charge.
                    let purchased = try purchasedRecord(id: transactionID, account: account.id, product: product, quantity: quantity,
                                                        paymentMethod: paymentMethod, paymentID: paymentID, nowMs: nowMs)
                    switch await configuration.paymentProcessor.charge(payment) {
                    case .succeeded:
                        record = purchased
                        message = purchased.message
                    case .deferred:
                        let deferred = TransactionRecord(
                            id: transactionID, originalID: transactionID, accountID: account.id, product: product, quantity: quantity,
                            state: .deferred, purchaseMs: nowMs, expiresMs: 0, paymentMethod: paymentMethod, paymentID: paymentID,
                            environment: configuration.environment)
                        record = deferred
                        message = deferred.message
                    case .cancelled:
                        message = failed(transactionID, account.id, productID, quantity, nowMs, code: 2, reason: "payment_cancelled",
                                         "payment cancelled by the user")
                    case .declined(let reason, let text):
                        message = failed(transactionID, account.id, productID, quantity, nowMs, code: 3, reason: reason, text)
                    }
                }
            } else {
                message = failed(transactionID, account.id, productID, quantity, nowMs, code: 5, reason: "product_unavailable",
                                 "product unavailable: \(productID) is not in the catalog")
            }
            let response = StoreV1.PurchaseResponse(transaction: message, replayed: replayedFromLedger, alreadyOwned: alreadyOwned)
            try await ledger.pool.write { [record] db in
                if let record { try Self.insertPurchase(record, db) }
                try Self.remember(response, account: account.id, key: idempotencyKey, operation: "purchase", hash: requestHash, nowMs: nowMs, db)
            }
            return response
        }
        if !response.replayed { await configuration.purchaseCommitted?(response) }
        return response
    }

    /// A FAILED transaction: reported, not recorded (nothing was charged).
    private func failed(
        _ id: String, _ accountID: String, _ productID: String, _ quantity: UInt32, _ nowMs: Int64,
        code: UInt32, reason: String, _ message: String
    ) -> StoreV1.Transaction {
        let product = catalog.product(productID)
        return StoreV1.Transaction(
            transactionID: id, originalTransactionID: id, productID: productID, productType: product?.type ?? .productTypeUnspecified,
            quantity: quantity, state: .failed, purchaseDateMs: nowMs, accountID: accountID, errorCode: code, errorReason: reason,
            errorMessage: message, finished: true, price: product?.price ?? "", currency: product?.currency ?? "",
            environment: configuration.environment)
    }

    /// A PURCHASED record with its signed receipt, expiry and credits.
    private func purchasedRecord(
        id: String, account: String, product: CatalogProduct, quantity: UInt32, paymentMethod: String, paymentID: String, nowMs: Int64
    ) throws -> TransactionRecord {
        var originalID = id
        var expiresMs: Int64 = 0
        if let period = product.subscriptionPeriod {
            let previous = try ledger.transactions(accountID: account).filter {
                $0.productID == product.id && $0.state == .purchased && $0.revokedMs == 0
            }
            if product.type == .autoRenewableSubscription, let first = previous.first {
                originalID = first.originalID
            }
            // A new period starts when the current one ends.
            let start = max(nowMs, previous.map(\.expiresMs).max() ?? 0)
            expiresMs = period.end(fromMs: start)
        }
        var record = TransactionRecord(
            id: id, originalID: originalID, accountID: account, product: product, quantity: quantity, state: .purchased,
            purchaseMs: nowMs, expiresMs: expiresMs, paymentMethod: paymentMethod, paymentID: paymentID,
            environment: configuration.environment)
        record.credits = product.type == .consumable ? product.credits * UInt64(quantity) : 0
        record.receipt = try sign(record)
        return record
    }

    private func sign(_ record: TransactionRecord) throws -> [UInt8] {
        let payload = ReceiptV1.ReceiptPayload(
            transactionID: record.id, originalTransactionID: record.originalID, productID: record.productID,
            productType: record.productType, quantity: record.quantity, purchaseDateMs: record.purchaseMs,
            expiresDateMs: record.expiresMs, accountID: record.accountID, bundleID: catalog.bundleID,
            environment: record.environment)
        return try keys.activeKey().sign(payload).serializedBytes()
    }

    /// A live purchase of a product bought once (non-consumable, or an unexpired auto-renewable subscription).
    private func ownedTransaction(account: String, product: CatalogProduct, nowMs: Int64) throws -> TransactionRecord? {
        guard product.type == .nonConsumable || product.type == .autoRenewableSubscription else { return nil }
        return try ledger.transactions(accountID: account).first {
            $0.productID == product.id && $0.state == .purchased && $0.revokedMs == 0
                && (product.type == .nonConsumable || $0.expiresMs > nowMs)
        }
    }

    /// Inserts a transaction and, for a purchased consumable, its credits.
    static func insertPurchase(_ record: TransactionRecord, _ db: Database) throws {
        try record.insert(db)
        if record.state == .purchased, record.credits > 0 {
            try addCredits(Int64(clamping: record.credits), account: record.accountID, transaction: record.id, reason: "purchase", nowMs: record.purchaseMs, db)
        }
    }

    static func addCredits(_ amount: Int64, account: String, transaction: String?, reason: String, nowMs: Int64, _ db: Database) throws {
        try db.execute(sql: "UPDATE accounts SET credit_balance = credit_balance + ? WHERE id = ?", arguments: [amount, account])
        try db.execute(
            sql: "INSERT INTO credit_movements (account_id, amount, transaction_id, reason, created_ms) VALUES (?, ?, ?, ?, ?)",
            arguments: [account, amount, transaction, reason, nowMs])
    }

    // MARK: Credits

    /// Spends credits, at most once per idempotency key; returns the new balance.
    /// - Throws: ``StoreError`` 3 for an amount below 1, 9 when the balance is too low, 6 for a reused key.
    /// Like a purchase, a spend once started is not cancelled with the calling task.
    public func spendCredits(account: AccountRecord, amount: Int64, idempotencyKey: String?) async throws -> StoreV1.SpendCreditsResponse {
        try await Task { try await uncancellableSpend(account: account, amount: amount, idempotencyKey: idempotencyKey) }.value
    }

    private func uncancellableSpend(account: AccountRecord, amount: Int64, idempotencyKey: String?) async throws -> StoreV1.SpendCreditsResponse {
        guard amount > 0 else { throw StoreError.invalid("amount must be 1 or more, got \(amount)") }
        try Self.checkIdempotencyKey(idempotencyKey)
        let requestHash = Self.hash("spend\u{0}\(amount)")
        return try await locks.withLock(account.id) {
            if let replay = try await replayed(StoreV1.SpendCreditsResponse.self, account: account.id, key: idempotencyKey, operation: "spend", hash: requestHash) {
                var response = replay
                response.replayed = true
                return response
            }
            let nowMs = now
            return try await ledger.pool.write { db in
                let balance = try Int64.fetchOne(db, sql: "SELECT credit_balance FROM accounts WHERE id = ?", arguments: [account.id]) ?? 0
                guard balance >= amount else {
                    throw StoreError(.failedPrecondition, "insufficient credits: the balance is \(balance), cannot spend \(amount)")
                }
                try Self.addCredits(-amount, account: account.id, transaction: nil, reason: "spend", nowMs: nowMs, db)
                let response = StoreV1.SpendCreditsResponse(balance: UInt64(balance - amount))
                try Self.remember(response, account: account.id, key: idempotencyKey, operation: "spend", hash: requestHash, nowMs: nowMs, db)
                return response
            }
        }
    }

    // MARK: Idempotency

    static func checkIdempotencyKey(_ key: String?) throws {
        guard let key else { return }
        guard !key.isEmpty, key.utf8.count <= 256 else {
            throw StoreError.invalid("idempotency-key must be 1 to 256 bytes")
        }
    }

    private func replayed<M: WireMessage>(_ type: M.Type, account: String, key: String?, operation: String, hash: [UInt8]) async throws -> M? {
        guard let key else { return nil }
        let row = try await ledger.pool.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM idempotency_keys WHERE account_id = ? AND key = ?", arguments: [account, key])
        }
        guard let row else { return nil }
        let storedOperation: String = row["operation"]
        let storedHash: Data = row["request_hash"]
        guard storedOperation == operation, Array(storedHash) == hash else {
            throw StoreError(.alreadyExists, "idempotency-key \"\(key)\" was already used for a different \(storedOperation) request; use a new key for a new request")
        }
        return try M(serializedBytes: Array(row["response"] as Data))
    }

    private static func remember(_ response: some WireMessage, account: String, key: String?, operation: String, hash: [UInt8], nowMs: Int64, _ db: Database) throws {
        guard let key else { return }
        try db.execute(
            sql: "INSERT INTO idempotency_keys (account_id, key, operation, request_hash, response, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
            arguments: [account, key, operation, Data(hash), Data(response.serializedBytes()), nowMs])
    }

    // MARK: Finishing, restoring

    /// Marks a transaction finished; returns true when it already was.
    public func finish(account: AccountRecord, transactionID: String) async throws -> Bool {
        guard !transactionID.isEmpty else { throw StoreError.invalid("transaction_id is required") }
        return try await ledger.pool.write { db in
            guard let record = try Ledger.transaction(db, id: transactionID), record.accountID == account.id else {
                throw StoreError.notFound("no transaction \(transactionID) for this account")
            }
            guard record.state == .purchased else {
                throw StoreError(.failedPrecondition, "transaction \(transactionID) is \(record.state) and cannot be finished")
            }
            if record.finished { return true }
            try db.execute(sql: "UPDATE transactions SET finished = 1 WHERE id = ?", arguments: [transactionID])
            return false
        }
    }

    // MARK: Admin: approval, refunds, keys

    /// Approves a DEFERRED (ask-to-buy) transaction: charges it, at the price
    /// it was asked for, and makes it PURCHASED.
    /// - Throws: ``StoreError`` 9 when it is not waiting for approval (also when
    ///   another process approved it first), its product left the catalog, or the
    ///   account already owns the product (bought meanwhile; nothing is charged).
    public func approve(transactionID: String) async throws -> TransactionRecord {
        guard let record = try ledger.transaction(id: transactionID) else { throw StoreError.notFound("no transaction \(transactionID)") }
        return try await locks.withLock(record.accountID) {
            guard let deferred = try ledger.transaction(id: transactionID), deferred.state == .deferred else {
                throw StoreError(.failedPrecondition, "transaction \(transactionID) is not waiting for approval")
            }
            guard let product = catalog.product(deferred.productID) else {
                throw StoreError(.failedPrecondition, "product \(deferred.productID) is no longer in the catalog")
            }
            let nowMs = now
            if let owned = try ownedTransaction(account: deferred.accountID, product: product, nowMs: nowMs) {
                throw StoreError(.failedPrecondition,
                                 "account \(deferred.accountID) already owns \(product.id) (transaction \(owned.id)); \(transactionID) was not charged")
            }
            let paymentID = deferred.paymentID ?? deferred.id
            var purchased = try purchasedRecord(id: deferred.id, account: deferred.accountID, product: product, quantity: deferred.quantity,
                                                paymentMethod: deferred.paymentMethod, paymentID: paymentID, nowMs: nowMs)
            purchased.price = deferred.price
            purchased.currency = deferred.currency
            let payment = PaymentRequest(paymentID: paymentID, accountID: deferred.accountID, productID: product.id,
                                         quantity: deferred.quantity, unitPrice: deferred.price, currency: deferred.currency,
                                         paymentMethod: deferred.paymentMethod)
            guard case .succeeded = await configuration.paymentProcessor.approve(payment) else {
                throw StoreError(.aborted, "the payment processor refused the approved payment")
            }
            try await ledger.pool.write { [purchased] db in
                // Checked again in the write: another process (or a refund) may have got there first.
                guard let current = try Ledger.transaction(db, id: transactionID), current.state == .deferred else {
                    throw StoreError(.failedPrecondition, "transaction \(transactionID) is not waiting for approval")
                }
                try db.execute(sql: "DELETE FROM transactions WHERE id = ?", arguments: [deferred.id])
                try Self.insertPurchase(purchased, db)
            }
            return purchased
        }
    }

    /// Refunds (revokes) a purchased transaction: its receipt verifies with the
    /// revocation set, it leaves restore, and `WatchRevocations` delivers it. A
    /// consumable's credits are taken back, as far as the balance allows.
    public func refund(transactionID: String, reason: String) async throws -> RevocationRecord {
        guard let record = try ledger.transaction(id: transactionID) else { throw StoreError.notFound("no transaction \(transactionID)") }
        let revocation = try await locks.withLock(record.accountID) {
            let nowMs = now
            return try await ledger.pool.write { db -> RevocationRecord in
                guard let current = try Ledger.transaction(db, id: transactionID), current.state == .purchased else {
                    throw StoreError(.failedPrecondition, "transaction \(transactionID) is not purchased")
                }
                guard current.revokedMs == 0 else { throw StoreError(.failedPrecondition, "transaction \(transactionID) was already refunded") }
                let reasonText = reason.isEmpty ? "refunded" : reason
                try db.execute(sql: "UPDATE transactions SET revoked_ms = ?, revocation_reason = ? WHERE id = ?",
                               arguments: [nowMs, reasonText, transactionID])
                try db.execute(
                    sql: "INSERT INTO revocations (transaction_id, original_transaction_id, account_id, revoked_ms, reason) VALUES (?, ?, ?, ?, ?)",
                    arguments: [transactionID, current.originalID, current.accountID, nowMs, reasonText])
                let cursor = db.lastInsertedRowID
                if current.credits > 0 {
                    let balance = try Int64.fetchOne(db, sql: "SELECT credit_balance FROM accounts WHERE id = ?", arguments: [current.accountID]) ?? 0
                    let taken = min(balance, Int64(clamping: current.credits))
                    if taken > 0 {
                        try Self.addCredits(-taken, account: current.accountID, transaction: transactionID, reason: "refund", nowMs: nowMs, db)
                    }
                }
                return try Row.fetchOne(db, sql: "SELECT * FROM revocations WHERE cursor = ?", arguments: [cursor]).map(RevocationRecord.init)!
            }
        }
        revocationSignal.notify()
        return revocation
    }

    /// Adds a new signing key; old keys keep verifying.
    public func rotateKeys() throws -> ReceiptPublicKey {
        let key = try keys.rotate(nowMs: now)
        refreshVerifier()
        return key
    }

    /// The public keys receipts are verified with, oldest first.
    public func publicKeys() throws -> [ReceiptPublicKey] {
        try ledger.publicKeys()
    }

    // MARK: Benchmarks

    /// Signs `count` receipts of `productID` for `accountID` through the store's
    /// own signing path, without recording transactions: load for `kiosk-bench`.
    public func mintReceipts(accountID: String, productID: String, count: Int) throws -> [[UInt8]] {
        guard let product = catalog.product(productID) else { throw StoreError.notFound("no product \(productID)") }
        let key = try keys.activeKey()
        let nowMs = now
        return try (0..<count).map { _ in
            let id = Self.newTransactionID()
            let payload = ReceiptV1.ReceiptPayload(
                transactionID: id, originalTransactionID: id, productID: product.id, productType: product.type, quantity: 1,
                purchaseDateMs: nowMs, accountID: accountID, bundleID: catalog.bundleID, environment: configuration.environment)
            return try key.sign(payload).serializedBytes()
        }
    }

    // MARK: Verification

    /// Verifies a receipt: signature, environment, account, expiry, revocation.
    public func verifyReceipt(_ bytes: [UInt8]) async throws -> StoreV1.VerifyReceiptResponse {
        var current = verifier.withLockedValue { $0 }
        let signed = try? ReceiptV1.SignedReceipt(serializedBytes: bytes)
        if let signed, !signed.keyID.isEmpty, !current.knows(keyID: signed.keyID), keyRefreshDue() {
            // Perhaps `keys rotate` ran in another process.
            current = refreshVerifier()
        }
        // Decoded once; undecodable bytes get the verifier's own 21002 answer.
        let check = signed.map { current.verify($0, nowMs: now) } ?? current.verify(bytes, nowMs: now)
        var response = StoreV1.VerifyReceiptResponse(status: check.status.rawValue, message: check.message, receipt: check.payload)
        guard let payload = check.payload, check.status == .valid || check.status == .subscriptionExpired else { return response }
        guard try ledger.account(id: payload.accountID) != nil else {
            response.status = ReceiptStatus.accountNotFound.rawValue
            response.message = "account \(payload.accountID) is not known to this store"
            return response
        }
        if let record = try ledger.transaction(id: payload.transactionID), record.revokedMs > 0 {
            response.revocationDateMs = record.revokedMs
            response.revocationReason = record.revocationReason
            response.message = "valid, but revoked: \(record.revocationReason)"
        }
        return response
    }

    /// An unknown key id reloads the keys at most once a second, so junk key ids cannot make every call read the ledger.
    private func keyRefreshDue() -> Bool {
        let nowMs = now
        return lastKeyRefreshMs.withLockedValue { last in
            guard last.map({ nowMs - $0 >= 1000 }) ?? true else { return false }
            last = nowMs
            return true
        }
    }

    @discardableResult
    private func refreshVerifier() -> ReceiptVerifier {
        let keys = (try? ledger.publicKeys()) ?? []
        let fresh = ReceiptVerifier(keys: keys, environment: configuration.environment)
        verifier.withLockedValue { $0 = fresh }
        return fresh
    }

    // MARK: Revocation feed

    /// Read before looking for revocations; pass to ``waitForRevocations(after:)``.
    var revocationGeneration: UInt64 { revocationSignal.generation }

    /// Waits until a revocation may have been added since `generation` was
    /// read: at once for refunds made through this `Store`, after the poll
    /// interval for other processes.
    func waitForRevocations(after generation: UInt64) async throws {
        try await revocationSignal.wait(after: generation, timeout: configuration.revocationPollInterval)
    }

    // MARK: Helpers

    static func hash(_ text: String) -> [UInt8] { Array(SHA256.hash(data: Array(text.utf8))) }


    static func randomHex(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) }.hexString
    }

    static func newTransactionID() -> String { "tx_" + randomHex(bytes: 12) }
}

extension StoreV1.TransactionState {
    /// `PURCHASED`, `FAILED`, `DEFERRED` or `UNSPECIFIED`.
    public var name: String {
        switch self {
        case .purchased: "PURCHASED"
        case .failed: "FAILED"
        case .deferred: "DEFERRED"
        default: "UNSPECIFIED"
        }
    }
}
