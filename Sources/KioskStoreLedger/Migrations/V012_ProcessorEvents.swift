import KioskStoreCore

extension LedgerMigration {
    /// v12-processor-events: the payment processor's events the store handled (Stripe's webhooks), by event id, so
    /// each is acted on once however often it is delivered, with the object each was about (a dispute's closing
    /// found when its opening arrives after it). A new table: stores of the version before never read it.
    package static let v012ProcessorEvents = LedgerMigration(
        id: "v12-processor-events",
        sqlite: [
            """
            CREATE TABLE processor_events (
              id TEXT PRIMARY KEY,
              type TEXT NOT NULL,
              subject TEXT NOT NULL DEFAULT '',
              outcome TEXT NOT NULL,
              received_ms INTEGER NOT NULL
            );
            """,
            "CREATE INDEX processor_events_subject ON processor_events (subject, type);",
        ],
        postgres: """
            CREATE TABLE processor_events (
              id TEXT PRIMARY KEY,
              type TEXT NOT NULL,
              subject TEXT NOT NULL DEFAULT '',
              outcome TEXT NOT NULL,
              received_ms BIGINT NOT NULL
            );
            CREATE INDEX processor_events_subject ON processor_events (subject, type);
            """)
}
