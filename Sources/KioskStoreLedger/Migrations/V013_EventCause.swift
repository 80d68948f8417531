import KioskStoreCore

extension LedgerMigration {
    /// v13-event-cause: each event keeps the request id and the W3C `traceparent` of the call that recorded it
    /// (empty when none), so that the webhook deliveries of the event, made later and maybe by another replica,
    /// log that request id and join that trace. Columns with defaults: a store of the version before writes
    /// events without them and reads none.
    package static let v013EventCause = LedgerMigration(
        id: "v13-event-cause",
        sqlite: [
            """
            ALTER TABLE events ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
            """
        ],
        postgres: """
            ALTER TABLE events ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
            ALTER TABLE events ADD COLUMN traceparent TEXT NOT NULL DEFAULT '';
            """)
}
