import KioskStoreCore

extension LedgerMigration {
    /// v14-event-actor: each event keeps who made it happen when an operator did (`EventRecord.actor`: the Admin
    /// RPCs, `kiosk-store`, the admin console), empty otherwise. A column with a default: a store of the version
    /// before writes events without it.
    package static let v014EventActor = LedgerMigration(
        id: "v14-event-actor",
        sqlite: ["ALTER TABLE events ADD COLUMN actor TEXT NOT NULL DEFAULT '';"],
        postgres: "ALTER TABLE events ADD COLUMN actor TEXT NOT NULL DEFAULT '';")
}
