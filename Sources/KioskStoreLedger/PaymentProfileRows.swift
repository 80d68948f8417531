import KioskStoreCore

extension PaymentProfile {
    package init(row: LedgerRow) throws {
        self.init(
            accountID: try row["account_id"], processor: try row["processor"], customerID: try row["customer_id"],
            paymentMethod: try row["payment_method"], updatedMs: try row["updated_ms"])
    }
}

extension LedgerDatabase {
    /// The account's customer at `processor`.
    public func paymentProfile(account: String, processor: String) throws -> PaymentProfile? {
        try fetchOne(
            "SELECT * FROM payment_profiles WHERE account_id = ? AND processor = ?", [account, processor]
        ).map { try PaymentProfile(row: $0) }
    }

    /// Writes the profile, replacing the account's one at its processor.
    public func savePaymentProfile(_ profile: PaymentProfile) throws {
        try serializeOnAccount(profile.accountID)
        _ = try execute(
            """
            INSERT INTO payment_profiles (account_id, processor, customer_id, payment_method, updated_ms)
            VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (account_id, processor) DO UPDATE SET customer_id = excluded.customer_id,
              payment_method = excluded.payment_method, updated_ms = excluded.updated_ms
            """,
            [profile.accountID, profile.processor, profile.customerID, profile.paymentMethod, profile.updatedMs])
    }
}

extension Ledger {
    /// The account's customer at `processor`, read outside any write.
    package func paymentProfile(account: String, processor: String) async throws -> PaymentProfile? {
        try await backend.readStatement { db in try db.paymentProfile(account: account, processor: processor) }
    }
}

extension LedgerDatabase {
    /// What the store did with the processor's event `id`.
    public func processorEventOutcome(id: String) throws -> String? {
        try value(String.self, "SELECT outcome FROM processor_events WHERE id = ?", [id])
    }

    /// Records the event once: false when it was recorded already.
    public func recordProcessorEvent(
        id: String, type: String, subject: String, outcome: String, nowMs: Int64
    ) throws -> Bool {
        try execute(
            """
            INSERT INTO processor_events (id, type, subject, outcome, received_ms) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (id) DO NOTHING
            """, [id, type, subject, outcome, nowMs]) > 0
    }

    /// True when an event of `type` about `subject` was handled.
    public func processorEventHandled(type: String, subject: String) throws -> Bool {
        try value(
            Int64.self, "SELECT 1 FROM processor_events WHERE subject = ? AND type = ? LIMIT 1", [subject, type]) != nil
    }
}

extension Ledger {
    /// What the store did with the processor's event `id`, read outside any write.
    package func processorEventOutcome(id: String) async throws -> String? {
        try await backend.readStatement { db in try db.processorEventOutcome(id: id) }
    }

    /// True when an event of `type` about `subject` was handled, read outside any write.
    package func processorEventHandled(type: String, subject: String) async throws -> Bool {
        try await backend.readStatement { db in try db.processorEventHandled(type: type, subject: subject) }
    }

    /// The transaction recorded for payment `paymentID`, read outside any write.
    package func transaction(paymentID: String) async throws -> TransactionRecord? {
        try await backend.readStatement { db in try db.transaction(paymentID: paymentID) }
    }
}
