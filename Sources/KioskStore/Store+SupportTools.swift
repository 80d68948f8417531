import Foundation
import KioskAPI
import KioskSigning
import NIOConcurrencyHelpers

// What an operator does for a buyer beyond a refund, as the App Store Server API and RevenueCat allow: move one
// subscription's renewal date (a buyer hit by an outage), move every active subscription's of a product in one
// resumable job, and grant an entitlement for some days. Each is a ledger write about the account with its event.

extension Store {
    /// The most days one extension may add, as the App Store allows.
    public static let maximumExtensionDays = 90
    /// How many single extensions a subscription may have in 365 days, as the App Store allows.
    public static let extensionsPerYear = 2
    /// The most days a grant may last.
    public static let maximumGrantDays = 3650

    private static let dayMs: Int64 = 86_400_000

    /// Moves an ACTIVE subscription's renewal date `days` later (1 to 90), at most ``extensionsPerYear`` times in
    /// 365 days: its period and its latest transaction's expiry end later (the receipt is signed again with the new
    /// expiry), the next renewal is charged then, and a RENEWAL_EXTENDED event records it with `reason`.
    /// - Throws: ``StoreError``: INVALID for days out of range or no reason, NOT_FOUND for no such subscription,
    ///   CONFLICT when it is not active or was extended twice in the last 365 days.
    @discardableResult
    public func extendSubscription(originalID: String, days: Int, reason: String) async throws -> SubscriptionRecord {
        try Self.checkExtension(days: days, reason: reason)
        guard let found = try await ledger.offload({ [ledger] in try ledger.subscription(originalID: originalID) })
        else {
            throw StoreError.notFound("no auto-renewable subscription \(originalID)")
        }
        let nowMs = now
        let row = try await ledger.write(account: found.accountID) { db -> SubscriptionRecord in
            guard
                try db.singleExtensions(originalID: originalID, sinceMs: nowMs - 365 * Self.dayMs)
                    < Self.extensionsPerYear
            else {
                throw StoreError(
                    .conflict,
                    "subscription \(originalID) was extended \(Self.extensionsPerYear) times in the last 365 days already"
                )
            }
            guard
                let row = try self.extend(
                    originalID: originalID, days: days, reason: reason, jobID: "", nowMs: nowMs, db)
            else {
                throw StoreError(.conflict, "subscription \(originalID) is not active: only an active one is extended")
            }
            return row
        }
        logger.info(
            "subscription extended",
            metadata: ["original_transaction_id": "\(originalID)", "days": "\(days)", "expires_ms": "\(row.expiresMs)"])
        return row
    }

    /// Starts, or returns, the job that extends every subscription of `productID` active when the job reaches it and
    /// bought before it began, by `days`, each exactly once. `jobID` empty: one made from product, days and reason, so
    /// the same request twice is one job. Nothing is extended here: ``runExtensionJob(id:)`` does it.
    /// - Throws: ``StoreError`` INVALID for a product that is not an auto-renewable subscription, days or reason out of
    ///   range, or a job id already used for another product, days or reason.
    public func startExtensionJob(
        productID: String, days: Int, reason: String, jobID: String = ""
    ) async throws -> ExtensionJobRecord {
        try Self.checkExtension(days: days, reason: reason)
        guard catalog.product(productID)?.type == .autoRenewableSubscription || catalog.products.isEmpty else {
            throw StoreError.invalid("\(productID) is not an auto-renewable subscription of the catalog")
        }
        let id = jobID.isEmpty ? Self.extensionJobID(productID: productID, days: days, reason: reason) : jobID
        guard id.count <= 64, id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }) else {
            throw StoreError.invalid("job_id must be 1 to 64 ASCII letters, digits, '.', '_' and '-'")
        }
        let job = try await ledger.createExtensionJob(
            ExtensionJobRecord(id: id, productID: productID, days: days, reason: reason, createdMs: now))
        guard job.productID == productID, job.days == days, job.reason == reason else {
            throw StoreError.invalid(
                "job \(id) extends \(job.productID) by \(job.days) days (\(job.reason)); give another job_id for another extension"
            )
        }
        return job
    }

    /// The job's id when none is given: a digest of what it does.
    static func extensionJobID(productID: String, days: Int, reason: String) -> String {
        "ext-" + Array(hash("\(productID)\n\(days)\n\(reason)").prefix(8)).hexString
    }

    /// Runs the job to its end: extends each subscription it has still to extend, each in its own write that also
    /// records that this job extended it (so a job started again, or by several stores at once, extends each once),
    /// then marks it finished. `progress` is called after each page with (extended, remaining).
    @discardableResult
    public func runExtensionJob(
        id: String, progress: (@Sendable (Int, Int) -> Void)? = nil
    ) async throws -> (extended: Int, remaining: Int) {
        guard let job = try await ledger.extensionJob(id: id) else {
            throw StoreError.notFound("no extension job \(id)")
        }
        guard runningJobs.withLockedValue({ $0.insert(id).inserted }) else {
            return try await ledger.extensionJobProgress(job, nowMs: now)
        }
        defer { _ = runningJobs.withLockedValue { $0.remove(id) } }
        var cursor = ""
        // Bounded: each page moves the cursor past the subscriptions it read.
        for _ in 0..<1_000_000 {
            let page = try await ledger.subscriptionsToExtend(job, nowMs: now, after: cursor, limit: 200)
            guard let last = page.last else { break }
            cursor = last.originalID
            for subscription in page {
                let nowMs = now
                _ = try await ledger.write(account: subscription.accountID) { db -> Bool in
                    guard try !db.extended(originalID: subscription.originalID, byJob: job.id) else { return false }
                    return try self.extend(
                        originalID: subscription.originalID, days: job.days, reason: job.reason, jobID: job.id,
                        nowMs: nowMs, db) != nil
                }
            }
            if let progress {
                let counts = try await ledger.extensionJobProgress(job, nowMs: now)
                progress(counts.extended, counts.remaining)
            }
        }
        let done = try await ledger.extensionJobProgress(job, nowMs: now)
        if done.remaining == 0 { try await ledger.finishExtensionJob(id: id, nowMs: now) }
        logger.info(
            "extension job", metadata: ["job_id": "\(id)", "extended": "\(done.extended)", "left": "\(done.remaining)"])
        return done
    }

    /// Runs the jobs not finished yet (a job whose store stopped mid-way); the serving store does it each renewal pass.
    public func resumeExtensionJobs() async throws {
        for job in try await ledger.unfinishedExtensionJobs() {
            try await runExtensionJob(id: job.id)
        }
    }

    /// The job's state as sent.
    public func extensionJobMessage(_ job: ExtensionJobRecord) async throws -> StoreV1.ExtensionJob {
        let current = try await ledger.extensionJob(id: job.id) ?? job
        let progress = try await ledger.extensionJobProgress(current, nowMs: now)
        return StoreV1.ExtensionJob(
            jobID: current.id, productID: current.productID, days: UInt32(current.days), reason: current.reason,
            createdMs: current.createdMs, extended: UInt64(progress.extended), remaining: UInt64(progress.remaining),
            finishedMs: current.finishedMs)
    }

    /// Extends one subscription in the write in progress: nil, changing nothing, when it is not ACTIVE.
    private func extend(
        originalID: String, days: Int, reason: String, jobID: String, nowMs: Int64, _ db: any LedgerDatabase
    ) throws -> SubscriptionRecord? {
        guard var row = try db.subscription(originalID: originalID), row.expiresMs > nowMs else { return nil }
        let oldEnd = row.expiresMs
        let newEnd = SubscriptionPeriod(iso8601: "P\(days)D")!.end(fromMs: oldEnd, timeScale: timeScale)
        guard row.extended(toMs: newEnd) else { return nil }
        try db.saveSubscription(row, nowMs: nowMs)
        if var latest = try db.transaction(id: row.latestTransactionID) {
            latest.expiresMs = newEnd
            let signer = try keys.activeKey()
            let signedAtMs = max(nowMs, signer.notBeforeMs)
            let receipt = try sign(latest, with: try keys.signer(signer, at: signedAtMs, db), atMs: signedAtMs)
            try db.updateExpiry(transactionID: latest.id, expiresMs: newEnd, receipt: receipt)
        }
        try db.recordExtension(
            id: jobID.isEmpty ? "single:" + Self.randomHex(bytes: 12) : jobID + ":" + originalID,
            originalID: originalID, jobID: jobID, accountID: row.accountID, days: days, reason: reason, nowMs: nowMs,
            oldExpiresMs: oldEnd, newExpiresMs: newEnd)
        var event = EventRecord(
            type: .renewalExtended, accountID: row.accountID, transactionID: row.latestTransactionID,
            originalTransactionID: originalID, productID: row.productID, createdMs: nowMs, reason: reason)
        event.expiresMs = newEnd
        try db.appendEvent(event)
        return row
    }

    private static func checkExtension(days: Int, reason: String) throws {
        guard (1...maximumExtensionDays).contains(days) else {
            throw StoreError.invalid("days must be 1 to \(maximumExtensionDays)")
        }
        try checkReason(reason)
    }

    private static func checkReason(_ reason: String) throws {
        guard !reason.isEmpty, reason.utf8.count <= FieldLimits.reason else {
            throw StoreError.invalid("a reason is required (at most \(FieldLimits.reason) bytes)")
        }
    }

    // MARK: Grants

    /// Grants `entitlementID` to the account for `days` (1 to 3650), without a charge: a transaction of type GRANT
    /// (product id `grant:<entitlement>`, price 0), signed and recorded with a PURCHASED event, which starts the
    /// entitlement (ENTITLEMENT_STARTED) unless a longer grant holds it. ``refund(transactionID:reason:)`` revokes it.
    /// - Throws: ``StoreError``: INVALID for an entitlement the catalog does not declare, days out of range or no
    ///   reason; NOT_FOUND for no such account.
    public func grantEntitlement(
        accountID: String, entitlementID: String, days: Int, reason: String
    ) async throws -> TransactionRecord {
        guard entitlementMap.ids.contains(entitlementID) else {
            throw StoreError.invalid("the catalog declares no entitlement \(entitlementID)")
        }
        guard (1...Self.maximumGrantDays).contains(days) else {
            throw StoreError.invalid("days must be 1 to \(Self.maximumGrantDays)")
        }
        try Self.checkReason(reason)
        let nowMs = now
        let id = Self.newTransactionID()
        let record = try await ledger.write(account: accountID) { db -> TransactionRecord in
            guard try db.account(id: accountID) != nil else { throw StoreError.notFound("no account \(accountID)") }
            var record = TransactionRecord(
                id: id, originalID: id, accountID: accountID,
                productID: EntitlementMap.grantProductID(entitlementID), productType: .grant, quantity: 1,
                state: .purchased, purchaseMs: nowMs,
                expiresMs: SubscriptionPeriod(iso8601: "P\(days)D")!.end(fromMs: nowMs, timeScale: self.timeScale),
                periodStartMs: nowMs, price: "0", currency: "", paymentMethod: "grant", paymentID: nil,
                environment: self.configuration.environment)
            let signer = try self.keys.activeKey()
            let signedAtMs = max(nowMs, signer.notBeforeMs)
            record.receipt = try self.sign(
                record, with: try self.keys.signer(signer, at: signedAtMs, db), atMs: signedAtMs)
            try db.insertTransaction(record, event: nil)
            return record
        }
        logger.info(
            "entitlement granted",
            metadata: ["account_id": "\(accountID)", "entitlement": "\(entitlementID)", "days": "\(days)"])
        return record
    }
}
