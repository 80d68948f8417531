import Testing

@testable import KioskStore

/// Which of a write's statements PostgreSQL runs as one: inserts, updates and deletes whose answers the write does
/// not read are held and sent together, each run changing other tables and never reading one an earlier write of
/// the run changed (the clauses of one statement see one snapshot, not one another's rows).
@Suite struct PostgresHeldWriteTests {
    typealias Database = PostgresLedgerDatabase

    static func held(_ sql: String, _ arguments: [any LedgerArgument] = []) -> Database.HeldWrite {
        Database.HeldWrite(sql: sql, arguments: arguments, table: Database.changedTable(sql) ?? "?", refusal: nil)
    }

    @Test func onlyAPlainWriteOfOneTableIsHeld() {
        #expect(Database.changedTable("INSERT INTO events (id, type) VALUES (?, ?)") == "events")
        #expect(
            Database.changedTable("UPDATE accounts SET credit_balance = credit_balance + ? WHERE id = ?") == "accounts")
        #expect(Database.changedTable("DELETE FROM revocations WHERE transaction_id = ?") == "revocations")
        #expect(Database.changedTable("INSERT INTO t (a) VALUES (?) RETURNING a") == nil)
        #expect(Database.changedTable("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))") == nil)
        #expect(Database.changedTable("UPDATE a SET x = 1; DELETE FROM b") == nil)
        #expect(Database.changedTable("INSERT INTO t(a) VALUES (?)") == nil)
        #expect(Database.changedTable("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x") == nil)
        #expect(Database.changedTable("DELETE t WHERE 1") == nil)
        // Names PostgreSQL would fold or read otherwise are sent alone, never batched by a wrong comparison.
        #expect(Database.changedTable("UPDATE Accounts SET x = 1") == nil)
        #expect(Database.changedTable("UPDATE ONLY accounts SET x = 1") == nil)
        #expect(Database.changedTable("UPDATE \"accounts\" SET x = 1") == nil)
    }

    /// The statements before which a write about an account updates the account's row first: any that may change
    /// a row, whatever its case or the space before it; not a read or a transaction's control.
    @Test func aStatementThatMayWriteIsToldFromAReading() {
        for sql in [
            "INSERT INTO events (id) VALUES (?)", "\n  update accounts SET x = 1", "DELETE FROM t",
            "WITH x AS (UPDATE t SET a = 1) SELECT 1", "SELECT1", "selecting", "",
        ] {
            #expect(Database.mayWrite(sql), "\(sql)")
        }
        for sql in [
            "SELECT * FROM accounts", " \t(SELECT 1) UNION (SELECT 2)", "select 1", "VALUES (1)", "SHOW server_version",
            "BEGIN ISOLATION LEVEL REPEATABLE READ", "COMMIT", "rollback", "END", "Select\n1",
        ] {
            #expect(!Database.mayWrite(sql), "\(sql)")
        }
    }

    @Test func aTableIsMentionedOnlyAsAWordOfItsOwn() {
        #expect(Database.mentions("SELECT * FROM accounts WHERE id = ?", "accounts"))
        #expect(Database.mentions("accounts", "accounts"))
        #expect(!Database.mentions("INSERT INTO credit_movements (account_id) VALUES (?)", "accounts"))
        #expect(!Database.mentions("SELECT * FROM processor_events", "events"))
        #expect(Database.mentions("SELECT * FROM processor_events JOIN events ON 1", "events"))
        #expect(!Database.mentions("SELECT eventsx FROM t", "events"))
        #expect(Database.mentions("SELECT * FROM Accounts", "accounts"))
    }

    @Test func aRunBreaksAtATableChangedTwiceOrReadAfterItsChange() {
        let writes = [
            Self.held("UPDATE accounts SET payments_allowed = payments_allowed WHERE id = ?"),
            Self.held("INSERT INTO transactions (id, account_id) VALUES (?, ?)"),
            Self.held("UPDATE accounts SET credit_balance = credit_balance + ? WHERE id = ?"),
            Self.held("INSERT INTO credit_movements (account_id, transaction_id) VALUES (?, ?)"),
            Self.held("INSERT INTO events (id) SELECT transaction_id FROM credit_movements WHERE id = ?"),
            Self.held("UPDATE payment_intents SET state = ? WHERE id = ?"),
        ]
        let runs = Database.batches(writes).map { $0.map(\.table) }
        #expect(
            runs == [
                ["accounts", "transactions"], ["accounts", "credit_movements"], ["events", "payment_intents"],
            ])
        #expect(Database.batches([]).isEmpty)
    }

    @Test func aRunIsOneStatementWithItsArgumentsInOrder() {
        let (sql, arguments) = Database.combined(
            [
                Self.held("INSERT INTO a (x) VALUES (?)", [Int64(1)]),
                Self.held("UPDATE b SET y = ? WHERE z = ?", ["2", Int64(3)]),
            ],
            "SELECT * FROM c WHERE w = ?", [Int64(4)])
        #expect(
            sql == "WITH kiosk_w1 AS (INSERT INTO a (x) VALUES (?)), kiosk_w2 AS (UPDATE b SET y = ? WHERE z = ?) "
                + "SELECT * FROM c WHERE w = ?")
        #expect(arguments.map(\.ledgerValue) == [.integer(1), .text("2"), .integer(3), .integer(4)])
        #expect(
            Database.placeholders(sql, arguments, typed: true)
                == "WITH kiosk_w1 AS (INSERT INTO a (x) VALUES ($1::int8)), kiosk_w2 AS (UPDATE b SET y = $2::text "
                + "WHERE z = $3::int8) SELECT * FROM c WHERE w = $4::int8")
    }

    @Test func aPlaceholderInAQuotedLiteralStaysAndANullIsLeftUntyped() {
        let arguments: [any LedgerArgument] = [Optional<String>.none, [UInt8]([1])]
        #expect(
            Database.placeholders("SELECT '?' , ?, ?", arguments, typed: true) == "SELECT '?' , $1, $2::bytea")
    }

    /// The update that orders writes about an account goes when a later held update of the same account's row makes
    /// the row's new version anyway; otherwise it stays (another account, another condition, or no later update).
    @Test func anOrderingUpdateGoesOnlyWhereALaterUpdateOfItsRowOrdersTheWrite() {
        let order = { (account: String) in Self.held(LedgerWrites.orderAccount, [account]) }
        let credit = { (account: String) in Self.held(LedgerWrites.addCredits, [Int64(5), account]) }
        let insert = Self.held("INSERT INTO transactions (id) VALUES (?)", ["t"])
        let tables = { (writes: [Database.HeldWrite]) in writes.map { "\($0.table):\($0.sql.prefix(6))" } }
        #expect(
            tables(Database.withoutRedundantOrdering([order("a"), insert, credit("a")]))
                == ["transactions:INSERT", "accounts:UPDATE"])
        #expect(Database.withoutRedundantOrdering([order("a"), insert, credit("b")]).count == 3)
        #expect(Database.withoutRedundantOrdering([credit("a"), order("a")]).count == 2)
        // Only an update known to change the row: one with a FROM (or any other text) might match none.
        #expect(
            Database.withoutRedundantOrdering([
                order("a"), Self.held("UPDATE accounts SET x = t.x FROM t WHERE id = ?", ["a"]),
            ]).count == 2)
        #expect(Database.withoutRedundantOrdering([order("a")]).count == 1)
    }

    /// A script splits at the semicolons that end statements, not at those inside a literal, a quoted name or a
    /// dollar-quoted function body.
    @Test func aScriptSplitsAtTheSemicolonsOutsideQuotes() {
        #expect(Database.statements("SELECT 1; SELECT 2;\n") == ["SELECT 1", "SELECT 2"])
        #expect(Database.statements("SELECT 'a;b'; SELECT 'it''s; fine'") == ["SELECT 'a;b'", "SELECT 'it''s; fine'"])
        #expect(Database.statements(#"SELECT 1 AS "x;y"; SELECT 2"#) == [#"SELECT 1 AS "x;y""#, "SELECT 2"])
        let body = "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$ BEGIN PERFORM 1; RETURN 1; END $$"
        #expect(Database.statements(body + "; SELECT f()") == [body, "SELECT f()"])
        let tagged = "DO $body$ BEGIN RAISE NOTICE '$$;'; END $body$"
        #expect(Database.statements(tagged + ";" + tagged) == [tagged, tagged])
        // A placeholder is not a dollar quote, nor is a $ inside a literal.
        #expect(Database.statements("SELECT $1; SELECT '$$'; SELECT 3") == ["SELECT $1", "SELECT '$$'", "SELECT 3"])
        // Unterminated quotes run to the end without splitting.
        #expect(Database.statements("SELECT 'a; SELECT 2") == ["SELECT 'a; SELECT 2"])
        #expect(Database.statements("SELECT $$a; SELECT 2") == ["SELECT $$a; SELECT 2"])
        // Comments quote nothing, and a $ inside a name starts no quote.
        #expect(
            Database.statements(
                "SELECT 1; -- it's; $x$\nSELECT 2 /* a /* nested; */ ' */; SELECT a$b$ FROM t; SELECT 4")
                == ["SELECT 1", "-- it's; $x$\nSELECT 2 /* a /* nested; */ ' */", "SELECT a$b$ FROM t", "SELECT 4"])
    }

    /// A pool of no connections is refused before anything connects: every write would wait for one forever.
    @Test func aLedgerOfNoConnectionsIsRefused() throws {
        var location = try PostgresLocation(url: "postgres://kiosk@127.0.0.1:1/kiosk")
        location.connections = 0
        #expect(throws: StoreError.self) { try PostgresLedgerBackend(location: location) }
    }

    /// A read ahead's one row splits at its markers into each read's row, nil for a read that found none.
    @Test func aReadAheadRowSplitsAtItsMarkers() throws {
        let row = LedgerRow(
            columns: LedgerRow.Columns([
                "kiosk_read", "kiosk_read_1", "id", "v", "kiosk_read_2", "id", "kiosk_read_3", "id",
            ]),
            values: [.integer(1), .integer(1), .text("a"), .integer(7), .null, .null, .integer(1), .text("c")])
        let parts = try Database.parts(of: row, count: 3)
        #expect(parts.count == 3)
        #expect(parts[0]?.columns.names == ["id", "v"])
        #expect(try parts[0]?["v"] as Int64? == 7)
        #expect(parts[1] == nil)
        #expect(try parts[2]?["id"] as String? == "c")
        #expect(throws: LedgerError.self) { try Database.parts(of: row, count: 4) }
    }
}
