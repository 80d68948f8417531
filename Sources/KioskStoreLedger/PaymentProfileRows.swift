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
    public func recordProcessorEvent(id: String, type: String, outcome: String, nowMs: Int64) throws -> Bool {
        try execute(
            "INSERT INTO processor_events (id, type, outcome, received_ms) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
            [id, type, outcome, nowMs]) > 0
    }

    /// The dispute with the processor's id `id`.
    public func dispute(id: String) throws -> Dispute? {
        try fetchOne("SELECT * FROM disputes WHERE id = ?", [id]).map(Self.dispute(from:))
    }

    /// The disputes of transaction `transactionID`, by id.
    public func disputes(transactionID: String) throws -> [Dispute] {
        try fetchAll("SELECT * FROM disputes WHERE transaction_id = ? ORDER BY id", [transactionID]).map(
            Self.dispute(from:))
    }

    private static func dispute(from row: LedgerRow) throws -> Dispute {
        let id: String = try row["id"]
        let state: String = try row["state"]
        guard let known = Dispute.State(rawValue: state) else {
            throw StoreError(.internalFailure, "dispute \(id) has an unknown state \(state)")
        }
        return Dispute(
            id: id, transactionID: try row["transaction_id"], state: known,
            revokedTransaction: (try row["revoked_transaction"] as Int64) != 0, updatedMs: try row["updated_ms"])
    }

    /// Records a dispute or its new state.
    public func saveDispute(_ dispute: Dispute) throws {
        try execute(
            """
            INSERT INTO disputes (id, transaction_id, state, revoked_transaction, updated_ms) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT (id) DO UPDATE SET state = excluded.state, revoked_transaction = excluded.revoked_transaction,
              updated_ms = excluded.updated_ms
            """,
            [
                dispute.id, dispute.transactionID, dispute.state.rawValue, Int64(dispute.revokedTransaction ? 1 : 0),
                dispute.updatedMs,
            ])
    }
}

extension Ledger {
    /// The disputes of transaction `transactionID`, read outside any write.
    package func disputes(transactionID: String) async throws -> [Dispute] {
        try await backend.readStatement { db in try db.disputes(transactionID: transactionID) }
    }

    /// What the store did with the processor's event `id`, read outside any write.
    package func processorEventOutcome(id: String) async throws -> String? {
        try await backend.readStatement { db in try db.processorEventOutcome(id: id) }
    }

    /// The transaction recorded for payment `paymentID`, read outside any write.
    package func transaction(paymentID: String) async throws -> TransactionRecord? {
        try await backend.readStatement { db in try db.transaction(paymentID: paymentID) }
    }
}
