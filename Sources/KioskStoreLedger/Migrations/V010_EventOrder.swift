import KioskStoreCore

extension LedgerMigration {
    /// v10-event-order: on PostgreSQL an event's id is its transaction's id (xid8) × 2^16 plus its place in that
    /// transaction, no longer a sequence read under one lock that every event-writing commit held: writes about
    /// different accounts commit side by side, and readers read only below the oldest transaction still running
    /// (``LedgerDatabase/eventHorizon``), so an id below one already read can never commit later. Takes the old
    /// event-order lock first, so no writer of the version before is between its id and its commit (every store
    /// of that version must be stopped before this runs: docs/upgrading.md). SQLite is unchanged (one writer).
    /// (82778235554629 is ``Ledger/eventOrderLockKey``.)
    package static let v010EventOrder = LedgerMigration(
        id: "v10-event-order",
        sqlite: [],
        postgres: """
            SELECT pg_advisory_xact_lock(82778235554629);
            ALTER TABLE events ALTER COLUMN id DROP DEFAULT;
            DROP SEQUENCE IF EXISTS events_id_seq;
            """)
}
