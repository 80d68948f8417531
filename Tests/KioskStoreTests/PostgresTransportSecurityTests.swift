import Foundation
import KioskStore
import KioskStoreTestSupport
import Testing

/// How the store reaches PostgreSQL: verified TLS (PostgreSQL's `verify-full`) beyond loopback, plaintext only to
/// loopback or where a sandbox operator says so, and no password in a URL or an error. The checks against a server
/// run on the PostgreSQL pass (`KIOSK_TEST_LEDGER=postgres`), whose cluster offers TLS with a certificate that names
/// `localhost` and nothing else.
@Suite struct PostgresTransportSecurityTests {
    @Test func theDefaultIsPlaintextOnlyToLoopback() throws {
        #expect(PostgresTransportSecurity.default(forHost: "127.0.0.1") == .plaintext)
        #expect(PostgresTransportSecurity.default(forHost: "localhost") == .plaintext)
        #expect(PostgresTransportSecurity.default(forHost: "::1") == .plaintext)
        #expect(PostgresTransportSecurity.default(forHost: "db.internal") == .verifyFull(caFile: nil))
        #expect(PostgresTransportSecurity.default(forHost: "10.0.0.7") == .verifyFull(caFile: nil))
        // Names that only start like a loopback address are other hosts.
        for host in ["127.example.com", "127.0.0.1.example.com", "localhost.example.com"] {
            #expect(PostgresTransportSecurity.default(forHost: host) == .verifyFull(caFile: nil), "\(host)")
        }
        // An IPv6 host loses its brackets (a connect and a certificate check want the address alone).
        let v6 = try PostgresLocation(url: "postgres://kiosk@[::1]:5433/kiosk")
        #expect(v6.host == "::1" && v6.port == 5433 && v6.security == .plaintext)
        #expect(v6.description == "postgres://kiosk@[::1]:5433/kiosk")
        #expect(try PostgresLocation(url: "postgres://kiosk@db.internal/kiosk").security == .verifyFull(caFile: nil))
    }

    @Test func theFlagsChooseAndProductionRefusesPlaintextBeyondLoopback() throws {
        #expect(
            try PostgresTransportSecurity.chosen(
                host: "db", caFile: "ca.pem", plaintext: false, environment: .production)
                == .verifyFull(caFile: "ca.pem"))
        #expect(
            try PostgresTransportSecurity.chosen(host: "db", caFile: nil, plaintext: true, environment: .sandbox)
                == .plaintext)
        #expect(
            try PostgresTransportSecurity.chosen(
                host: "127.0.0.1", caFile: nil, plaintext: true, environment: .production)
                == .plaintext)
        #expect(throws: StoreError.self) {
            try PostgresTransportSecurity.chosen(host: "db", caFile: nil, plaintext: true, environment: .production)
        }
        #expect(throws: StoreError.self) {
            try PostgresTransportSecurity.chosen(host: "db", caFile: "ca.pem", plaintext: true, environment: .sandbox)
        }
        // The store itself refuses too, whoever built its configuration.
        var configuration = StoreConfiguration(
            dataDirectory: temporaryDirectory(), catalog: Catalog(bundleID: "b", products: []), environment: .production
        )
        var location = try PostgresLocation(url: "postgres://kiosk@db.internal/kiosk")
        location.security = .plaintext
        configuration.database = location
        let error = #expect(throws: StoreError.self) { try Store(configuration: configuration) }
        #expect(error?.message.contains("plaintext") == true)
    }

    @Test func aPasswordIsNeverTakenFromAURLNorShownInAnError() throws {
        let error = #expect(throws: StoreError.self) {
            try PostgresLocation(url: "postgres://kiosk:hunter2@db.internal/kiosk")
        }
        #expect(error?.message.contains("password") == true)
        #expect(error?.message.contains("hunter2") == false)
        let malformed = #expect(throws: StoreError.self) { try PostgresLocation(url: "mysql://kiosk:hunter2@db/kiosk") }
        #expect(malformed?.message.contains("hunter2") == false)
        // A password holding '@' or '/', or one in a query, is not shown either; options in a query are refused.
        for url in [
            "postgres://kiosk:p@ss/hunter2@db/kiosk", "mysql://kiosk:p@ss/hunter2@db/kiosk",
            "postgres://kiosk@db/kiosk?password=hunter2",
            "postgres://\(String(repeating: "k", count: 190)):hunter2@db/kiosk",
        ] {
            let refused = #expect(throws: StoreError.self) { try PostgresLocation(url: url) }
            #expect(refused?.message.contains("hunter2") == false, "\(refused?.message ?? "accepted") for \(url)")
        }
        #expect(
            try PostgresLocation(url: "postgres://kiosk@db/kiosk", password: "hunter2").description.contains("hunter2")
                == false)
    }

    @Test func aMissingCAFileIsAClearError() throws {
        var location = try PostgresLocation(url: "postgres://kiosk@db.internal/kiosk")
        location.security = .verifyFull(caFile: "/nonexistent/ca.pem")
        let error = #expect(throws: StoreError.self) { try Ledger(postgres: location, timeout: .seconds(2)) }
        #expect(error?.message.contains("/nonexistent/ca.pem") == true)
    }

    @Test(.enabled(if: TestLedger.isPostgres)) func theLedgerTalksVerifiedTLS() throws {
        let location = try TestLedger.createDatabase()
        #expect(location.security == .verifyFull(caFile: try TestLedger.clusterCA()))
        let ledger = try Ledger(postgres: location)
        let (encrypted, version) = try ledger.backend.read { db in
            (
                try db.value(
                    Int64.self,
                    "SELECT (CASE WHEN ssl THEN 1 ELSE 0 END)::bigint FROM pg_stat_ssl WHERE pid = pg_backend_pid()"),
                try db.value(String.self, "SELECT coalesce(version, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            )
        }
        #expect(encrypted == 1, "the connection is not encrypted")
        #expect(version == "TLSv1.2" || version == "TLSv1.3", "negotiated \(version ?? "nothing")")
    }

    @Test(.enabled(if: TestLedger.isPostgres)) func aCertificateForAnotherNameIsRefused() throws {
        var location = try TestLedger.createDatabase()
        // The certificate names `localhost` only: the same server reached as 127.0.0.1 must be refused.
        location.host = "127.0.0.1"
        let error = #expect(throws: (any Error).self) { try Ledger(postgres: location, timeout: .seconds(5)) }
        #expect("\(error.map { "\($0)" } ?? "")".contains("failedToValidateHostname"), "\(error.map { "\($0)" } ?? "")")
        // The control: the same database by the name the certificate holds opens.
        location.host = "localhost"
        _ = try Ledger(postgres: location, timeout: .seconds(5))
    }

    @Test(.enabled(if: TestLedger.isPostgres)) func aCertificateOfAnotherCAIsRefused() throws {
        var location = try TestLedger.createDatabase()
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let other = directory + "/other-ca.pem"
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        openssl.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
            "-subj", "/CN=another CA", "-keyout", directory + "/other-key.pem", "-out", other,
        ]
        openssl.standardError = FileHandle.nullDevice
        try openssl.run()
        openssl.waitUntilExit()
        try #require(openssl.terminationStatus == 0)
        location.security = .verifyFull(caFile: other)
        let error = #expect(throws: (any Error).self) { try Ledger(postgres: location, timeout: .seconds(5)) }
        #expect(
            "\(error.map { "\($0)" } ?? "")".contains("CERTIFICATE_VERIFY_FAILED"), "\(error.map { "\($0)" } ?? "")")
    }
}
