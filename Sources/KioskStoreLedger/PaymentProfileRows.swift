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
