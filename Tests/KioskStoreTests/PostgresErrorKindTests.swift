import Testing

@testable import KioskStore

/// What a PostgreSQL error becomes in the ledger, and so on the wire: the database restarting, shutting down or
/// out of connections is UNAVAILABLE (retry later), never INTERNAL; a constraint is the constraint.
@Suite struct PostgresErrorKindTests {
    struct ServerSaid: Error {}

    @Test(arguments: [
        ("57P01", LedgerError.Kind.unavailable),  // terminating connection due to administrator command (restart)
        ("57P02", .unavailable),  // crash shutdown
        ("57P03", .unavailable),  // the database system is starting up / shutting down
        ("57014", .unavailable),  // statement cancelled
        ("08006", .unavailable),  // connection failure
        ("53300", .unavailable),  // too many connections
        ("23505", .uniqueViolation),
        ("23514", .checkViolation),
        ("40001", .serializationFailure),
        ("40P01", .serializationFailure),
        ("25006", .unavailable),  // read-only transaction: a demoted primary after a failover
        ("25P03", .unavailable),  // idle-in-transaction session timeout
        ("55P03", .unavailable),  // lock not available
        ("08P01", .refused),  // protocol violation: a client defect, not an outage
        ("53400", .refused),  // a configured limit the statement exceeds
        ("57P04", .refused),  // the database was dropped
        ("42P01", .refused),  // undefined table
        ("23502", .refused),  // not-null violation
    ])
    func sqlStates(state: String, kind: LedgerError.Kind) {
        #expect(PostgresLedgerDatabase.ledgerError(ServerSaid(), sqlState: state).kind == kind)
    }

    @Test func noServerAnswerIsUnavailable() {
        #expect(PostgresLedgerDatabase.ledgerError(ServerSaid(), sqlState: nil).kind == .unavailable)
    }
}
