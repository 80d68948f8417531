import KioskStoreCore

extension LedgerMigration {
    /// v12-processor-events: the payment processor's events the store handled (Stripe's webhooks), by event id, so
    /// each is acted on once however often it is delivered; and the disputes it reported, by dispute id, so their
    /// events act right in any order (a closing before its opening) and a won dispute restores only what it
    /// revoked. New tables: stores of the version before never read them.
    package static let v012ProcessorEvents = LedgerMigration(
        id: "v12-processor-events",
        sqlite: [
            """
            CREATE TABLE processor_events (
              id TEXT PRIMARY KEY,
              type TEXT NOT NULL,
              outcome TEXT NOT NULL,
              received_ms INTEGER NOT NULL
            );
            CREATE TABLE disputes (
              id TEXT PRIMARY KEY,
              transaction_id TEXT NOT NULL,
              state TEXT NOT NULL CHECK (state IN ('open', 'won', 'lost')),
              revoked_transaction INTEGER NOT NULL DEFAULT 0,
              updated_ms INTEGER NOT NULL
            );
            CREATE INDEX disputes_by_transaction ON disputes (transaction_id);
            """
        ],
        postgres: """
            CREATE TABLE processor_events (
              id TEXT PRIMARY KEY,
              type TEXT NOT NULL,
              outcome TEXT NOT NULL,
              received_ms BIGINT NOT NULL
            );
            CREATE TABLE disputes (
              id TEXT PRIMARY KEY,
              transaction_id TEXT NOT NULL,
              state TEXT NOT NULL CHECK (state IN ('open', 'won', 'lost')),
              revoked_transaction BIGINT NOT NULL DEFAULT 0,
              updated_ms BIGINT NOT NULL
            );
            CREATE INDEX disputes_by_transaction ON disputes (transaction_id);
            """)
}
