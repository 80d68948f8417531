import KioskAPI
import KioskSigning

extension Store {
    /// `event` signed with the store's active key, as WatchEvents, ListEvents and webhooks send it.
    public func signed(_ event: EventRecord) throws -> StoreV1.SignedEvent {
        try StoreV1.SignedEvent.sign(event.message(environment: configuration.environment), key: keys.activeKey())
    }

    /// One page of the event log after `cursor` (of one account, or all), of `types` (empty: any).
    /// - Returns: the events, the cursor to pass next (the last event's id, or `cursor`), and whether more follow.
    public func listEvents(
        after cursor: UInt64, limit requested: UInt32, accountID: String? = nil,
        types: [EventKind] = []
    ) async throws -> (events: [EventRecord], cursor: UInt64, hasMore: Bool) {
        let limit = Ledger.pageSize(requested)
        let page = try await ledger.events(after: cursor, limit: limit + 1, accountID: accountID, types: types)
        let kept = Array(page.prefix(limit))
        return (kept, kept.last?.id ?? cursor, page.count > limit)
    }

    /// Records a TEST event (`kiosk-store events test`): receivers can check they are wired up.
    @discardableResult
    public func recordTestEvent(reason: String = "test") async throws -> EventRecord {
        let nowMs = now
        return try await ledger.write { db in
            try db.recordEvent(EventRecord(type: .test, accountID: "", createdMs: nowMs, reason: reason))
        }
    }

    // MARK: Declines

    /// Declines an ask-to-buy request: the DEFERRED transaction becomes FAILED (SKError 2, payment cancelled,
    /// reason "declined" or what `reason` says), nothing is charged, and DECLINED is recorded.
    /// - Throws: ``StoreError`` NOT_FOUND for an unknown transaction; 9 when it is not waiting for approval
    ///   or another process is approving it now.
    @discardableResult
    public func decline(transactionID: String, reason: String = "declined") async throws -> TransactionRecord {
        let ledger = self.ledger
        guard let found = try await ledger.offload({ try ledger.transaction(id: transactionID) }) else {
            throw StoreError.notFound("no transaction \(transactionID)")
        }
        let nowMs = now
        let instance = self.instance
        return try await ledger.write(account: found.accountID) { db in
            try Self.decline(transactionID, reason: reason, nowMs: nowMs, instance: instance, db)
        }
    }

    static func decline(
        _ transactionID: String, reason: String, nowMs: Int64, instance: InstanceLock, _ db: any LedgerDatabase
    ) throws -> TransactionRecord {
        guard var record = try db.transaction(id: transactionID), record.state == .deferred else {
            throw StoreError(.conflict, "transaction \(transactionID) is not waiting for approval")
        }
        let paymentID = record.paymentID ?? record.id
        if let approval = try db.intent(id: "\(PaymentIntent.Kind.approval.rawValue):\(paymentID)"),
            approval.state == .pending,
            approval.owner == instance.id || instance.isAlive(approval.owner, db)
        {
            throw StoreError(.conflict, "transaction \(transactionID) is being approved; it cannot be declined now")
        }
        record.state = .failed
        record.errorCode = FailedPurchase.Code.paymentCancelled.rawValue
        record.errorReason = reason
        record.errorMessage =
            reason == "expired"
            ? "the ask-to-buy request expired before it was approved" : "the ask-to-buy request was declined"
        try db.failDeferred(
            transactionID: record.id, code: record.errorCode, reason: record.errorReason, message: record.errorMessage)
        // An offer code it was to redeem is given back.
        try db.releaseOfferCode(transactionID: record.id)
        try db.appendEvent(EventRecord(.declined, record, nowMs: nowMs, reason: reason))
        return record
    }

    /// Declines the ask-to-buy requests older than ``StoreConfiguration/askToBuyExpiry`` (reason "expired");
    /// a serving store runs it with each renewal pass. Returns how many it declined.
    @discardableResult
    public func expireAskToBuyRequests() async throws -> Int {
        guard let expiry = configuration.askToBuyExpiry else { return 0 }
        let nowMs = now
        let cutoff = nowMs - expiry.wholeMilliseconds
        let instance = self.instance
        var declined = 0
        while true {
            let due = try await ledger.backend.read { db in try db.deferred(before: cutoff, limit: 200) }
            var progressed = false
            for (id, account) in due {
                // One at a time, each in the account's order; one being approved now is left to its approval.
                let done = try? await ledger.write(account: account) { db in
                    try Self.decline(id, reason: "expired", nowMs: nowMs, instance: instance, db)
                }
                if done != nil {
                    declined += 1
                    progressed = true
                }
            }
            if due.count < 200 || !progressed { return declined }
        }
    }
}
