import GRDB
import KioskStoreCore

/// One version of the ledger's schema, in both dialects side by side: the SQLite statements the embedded ledger
/// runs (through GRDB's migrator) and the PostgreSQL ones (``PostgresMigrations``), each bringing its database to
/// the same state (PostgreSQL's types: `BIGINT` for SQLite's integers and booleans, `BYTEA` for blobs, `BIGSERIAL`
/// where SQLite orders by `rowid`).
///
/// One file per version, `V001_…` to the newest, in ``all``'s order. Add a version for every change; never edit
/// a shipped one (databases that ran it keep what it did).
package struct LedgerMigration: Sendable {
    /// The version's name, recorded in the database once applied.
    package let id: String
    /// SQLite scripts, run in order in one transaction.
    package let sqlite: [String]
    /// The PostgreSQL script, run in one transaction (statements split at semicolons outside literals).
    package let postgres: String

    /// Every version, oldest first.
    package static let all: [LedgerMigration] = [
        .v001Initial, .v002IntentsPagingShortfall, .v003KeyRetirement, .v004ServiceCredentials, .v005SealedSigningKeys,
        .v006Subscriptions, .v007Events, .v008Webhooks, .v009RefundRequests, .v010EventOrder,
        .v011PaymentProfiles, .v012ProcessorEvents, .v013EventCause, .v014EventActor,
        .v015Entitlements, .v016SupportTools, .v017OfferCodes, .v018Storefronts,
    ]

    /// ``all`` as GRDB migrations, for the SQLite ledger.
    package static var sqliteMigrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in all {
            migrator.registerMigration(migration.id) { db in
                for script in migration.sqlite { try db.execute(sql: script) }
            }
        }
        return migrator
    }
}
