@testable import KioskStore

extension LedgerDatabase {
    /// A PL/pgSQL trigger function `name` running `body` (dollar-quoted: plain quotes inside), and a constraint
    /// trigger of the same name running it after each row inserted into `table`, deferred to the transaction's
    /// COMMIT: how the PostgreSQL tests make a COMMIT fail, end its session or wait.
    func createDeferredTrigger(_ name: String, on table: String, body: String) throws {
        try execute("CREATE FUNCTION \(name)() RETURNS trigger LANGUAGE plpgsql AS $$ \(body) $$", [])
        try execute(
            "CREATE CONSTRAINT TRIGGER \(name) AFTER INSERT ON \(table) DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                + "EXECUTE FUNCTION \(name)()", [])
    }
}
