import Foundation
import KioskRPC
import KioskStoreCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO

/// How a store's connections to PostgreSQL are secured.
public enum PostgresTransportSecurity: Sendable, Hashable, CustomStringConvertible {
    /// TLS 1.2 or later, the server's certificate checked against `caFile`'s roots (nil: the system's) and its name
    /// (or IP address) against the URL's host: PostgreSQL's `sslmode=verify-full`.
    case verifyFull(caFile: String?)
    /// No encryption: to a loopback address, or where the operator said so (a sandbox store only).
    case plaintext

    /// The default for `host`: plaintext to a loopback address, verified TLS with the system's roots otherwise.
    public static func `default`(forHost host: String) -> PostgresTransportSecurity {
        isLoopback(host) ? .plaintext : .verifyFull(caFile: nil)
    }

    /// The security the command line asks for: `--database-ca FILE` (verified TLS with that CA), or
    /// `--database-plaintext` (beyond loopback, only for a store known to be a sandbox one), or the host's default.
    /// - Parameter environment: the store's environment when the command knows it before connecting; nil counts as
    ///   production (an admin command must not send a production ledger in plaintext to find out).
    /// - Throws: ``StoreError`` invalid request for both at once, or plaintext beyond loopback without a sandbox.
    public static func chosen(
        host: String, caFile: String?, plaintext: Bool, environment: StoreEnvironment?
    ) throws -> PostgresTransportSecurity {
        if let caFile {
            guard !plaintext else {
                throw StoreError.invalid("--database-ca and --database-plaintext contradict each other: give one")
            }
            return .verifyFull(caFile: caFile)
        }
        guard plaintext else { return .default(forHost: host) }
        try requireAllowed(.plaintext, host: host, environment: environment ?? .production)
        return .plaintext
    }

    /// Refuses `security` to `host` for a store of `environment`: plaintext beyond loopback is a sandbox's only.
    public static func requireAllowed(
        _ security: PostgresTransportSecurity, host: String, environment: StoreEnvironment
    ) throws {
        guard security == .plaintext, environment != .sandbox, !isLoopback(host) else { return }
        throw StoreError.invalid(
            "a \(environment.name) store does not send its ledger in plaintext to \(host): give --database-ca FILE (or "
                + "trust the system's roots by leaving out --database-plaintext)")
    }

    /// True for `localhost` and the loopback addresses (127.0.0.0/8, ::1), as the RPC runtime counts them
    /// (`127.example.com` is not one).
    public static func isLoopback(_ host: String) -> Bool { Loopback.contains(host: host) }

    public var description: String {
        switch self {
        case .verifyFull(let caFile): "TLS, verified against \(caFile ?? "the system's roots")"
        case .plaintext: "plaintext"
        }
    }
}

/// Where a PostgreSQL ledger is: `postgres://user@host:port/database`, the password apart
/// (from a file or the environment, never in the URL, where a process list or a log would show it).
public struct PostgresLocation: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var user: String
    public var database: String
    public var password: String?
    /// How the connections are secured.
    public var security: PostgresTransportSecurity
    /// Whether each connection prepares the statements it runs (parsed and planned once a session), or sends each
    /// one unnamed (parsed and planned every time: for a pooler between the store and PostgreSQL that does not
    /// keep a session's prepared statements, such as PgBouncer in transaction mode before 1.21).
    public var preparesStatements = true
    /// How many connections (and threads waiting on them) the store keeps to PostgreSQL: at most this many of its
    /// transactions run at once. Fewer than 1 is refused when the ledger opens.
    public var connections = PostgresLocation.defaultConnections
    /// The default pool: 8 connections.
    public static let defaultConnections = 8

    /// Reads `postgres://user@host:port/database` (or `postgresql://`); port 5432 when absent.
    /// - Parameter security: nil: the host's default (``PostgresTransportSecurity/default(forHost:)``).
    /// - Throws: ``StoreError`` invalid request naming what is wrong with the URL (never echoing a password).
    public init(url: String, password: String? = nil, security: PostgresTransportSecurity? = nil) throws {
        let shown = Self.redacted(url)
        guard let components = URLComponents(string: url), let scheme = components.scheme,
            scheme == "postgres" || scheme == "postgresql"
        else {
            throw StoreError.invalid("--database \"\(shown)\" is not a postgres://user@host:port/database URL")
        }
        guard components.query == nil else {
            throw StoreError.invalid(
                "--database \(shown): options after '?' are not read; give the password in --database-password-file "
                    + "and the CA in --database-ca")
        }
        guard components.password == nil else {
            throw StoreError.invalid(
                "--database \(shown): a password in the URL shows in process lists and logs; give it in "
                    + "--database-password-file or KIOSK_STORE_DATABASE_PASSWORD")
        }
        // An IPv6 address without its brackets (Foundation keeps them on Linux), as a connect and TLS expect it.
        guard let host = components.host.map({ $0.trimmingCharacters(in: CharacterSet(charactersIn: "[]")) }),
            !host.isEmpty
        else {
            throw StoreError.invalid("--database \(shown): no host")
        }
        guard let user = components.user, !user.isEmpty else {
            throw StoreError.invalid("--database \(shown): no user (postgres://USER@host:port/database)")
        }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty else {
            throw StoreError.invalid("--database \(shown): no database name after the port")
        }
        self.host = host
        self.port = components.port ?? 5432
        self.user = user
        self.database = database
        self.password = password
        self.security = security ?? .default(forHost: host)
    }

    /// The URL without its password.
    public var description: String {
        "postgres://\(user)@\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)"
    }

    /// `url` for an error message: whatever lies between the user's `:` and the last `@` (a password, even one
    /// holding `@` or `/`) replaced, and a query (which could hold `password=`) left out; at most 200 characters.
    static func redacted(_ url: String) -> String {
        var text = String(url.prefix { $0 != "?" })
        if let scheme = text.range(of: "://"), let at = text[scheme.upperBound...].lastIndex(of: "@"),
            let colon = text[scheme.upperBound..<at].firstIndex(of: ":")
        {
            text.replaceSubrange(text.index(after: colon)..<at, with: "…")
        }
        return String(text.prefix(200))
    }
}

/// The PostgreSQL backend: the same ledger in a PostgreSQL database, shared by
/// any number of store processes.
///
/// Every write is one transaction, retried when PostgreSQL reports a
/// serialization failure or a deadlock: a write about an account at
/// REPEATABLE READ, ordered by an update of the account's row (behind the
/// account's lock once it has collided with another), any other at
/// SERIALIZABLE. The invariants the SQLite backend gets from its single writer
/// (an idempotency key answered once, a product owned once, a balance never
/// below 0) hold here from that order, the database's constraints and, for
/// the other writes, serializability, whatever the number of processes. Commits wait for the WAL flush (`synchronous_commit` on, as
/// PostgreSQL ships): an answer the store sends is on disk.
///
/// The store's ledger code is synchronous (one body per transaction); a body
/// runs on one of this backend's threads, holding one connection, and waits
/// there for each statement's answer, never on an event loop or a Swift
/// concurrency thread (the async entry points hop to those threads first).
package final class PostgresLedgerBackend: LedgerBackend {
    package var dialect: LedgerDialect { .postgres }

    /// Most retries of a transaction PostgreSQL could not serialize.
    package static let maximumRetries = 20

    /// The channel a write that the revocation feed follows notifies (revocations, keys, credentials).
    package static let changeChannel = "kiosk_ledger_changed"

    package let location: PostgresLocation
    private let group: MultiThreadedEventLoopGroup
    private let threads: NIOThreadPool
    private let connections: ConnectionPool
    /// Writes about accounts, committed in groups (``PostgresGroupCommit``).
    package let groups: PostgresGroupCommit
    /// Whether writes about accounts are committed in groups (a pool of at least 2 connections).
    private let grouping: Bool
    /// Transactions of writes about accounts that committed (a group once), and the writes they carried.
    package let commits = NIOLockedValueBox((commits: 0, writes: 0))
    private let configuration: PostgresConnection.Configuration
    private let logger: Logger
    /// Whether PostgreSQL answers in time (see ``PostgresHealth``).
    package let health: PostgresHealth
    /// Transactions run again because PostgreSQL could not serialize them (or chose them as a deadlock's victim).
    package let retries = NIOLockedValueBox(0)
    /// Writes about an account whose first attempt, made without the account's lock, met another write about it
    /// (a serialization failure, a deadlock, a unique or check violation) and ran again behind the lock.
    package let contended = NIOLockedValueBox(0)
    /// Accounts whose writes collided lately, each until when: a write about one takes the lock from its first
    /// attempt, so writes queued behind the lock are not overtaken again and again by first attempts that did not
    /// take it (at most ``contendedAccountsRemembered``).
    private let contendedAccounts = NIOLockedValueBox<[String: ContinuousClock.Instant]>([:])
    /// How long an account whose writes collided has its writes take the lock first.
    package static let contentionMemory: Duration = .seconds(2)
    package static let contendedAccountsRemembered = 4_096

    /// Whether writes about `account` collided within ``contentionMemory`` before `now`.
    package func isContended(_ account: String, now: ContinuousClock.Instant = .now) -> Bool {
        contendedAccounts.withLockedValue { accounts in
            guard let until = accounts[account] else { return false }
            if until > now { return true }
            accounts[account] = nil
            return false
        }
    }

    /// How many accounts are remembered as contended (expired ones included until the next pruning).
    package var contendedAccountsCount: Int { contendedAccounts.withLockedValue { $0.count } }

    /// Remembers that writes about `account` collided, for ``contentionMemory``; past
    /// ``contendedAccountsRemembered`` accounts, those expired are forgotten, or all when none has.
    package func noteContention(_ account: String, now: ContinuousClock.Instant = .now) {
        contendedAccounts.withLockedValue { accounts in
            if accounts.count >= Self.contendedAccountsRemembered {
                accounts = accounts.filter { $0.value > now }
                if accounts.count >= Self.contendedAccountsRemembered { accounts = [:] }
            }
            accounts[account] = now + Self.contentionMemory
        }
    }

    /// Waits for PostgreSQL through the pool's connections: each time a call's thread waited for the answer to what
    /// it had sent (one wait answers every statement sent before it). Not network round trips: postgres-nio puts a
    /// query on the wire once the one before it is answered, so each statement is one.
    package let roundTrips = NIOLockedValueBox(0)
    /// The writes about an account that committed, the waits they made (``roundTrips``; BEGIN, or the lock of a
    /// write that collided, to COMMIT, its unlock not waited for) and the statements they sent (BEGIN to COMMIT,
    /// with the lock and the unlock of a write that collided; a statement prepared the first time a connection runs
    /// it counts once), apart from the background's reads and writes.
    package let accountWrites = NIOLockedValueBox((writes: 0, roundTrips: 0, statements: 0))
    /// What this cluster's event ids add to transaction id × 2^16 (see ``settleEventIDBase()``): 0 unless the ledger
    /// came from another cluster whose transaction ids had gone further.
    package let eventIDBase = NIOLockedValueBox<Int64>(0)
    /// Bodies waiting for or running on ``threads``; past ``maximumQueued`` (1,024: a burst drains in well under a
    /// call deadline while the database answers, and memory stays bounded when it does not) a call fails at once.
    private let admission: NIOLockedValueBox<Int>
    private let maximumQueued: Int

    /// How long a checkout, a connect or a statement may take by default.
    package static var defaultTimeout: Duration { Ledger.defaultDatabaseTimeout }
    /// The LISTEN connection and its task, when something watches for changes.
    /// Every ``watchChanges(_:)`` watch: its task and, while connected, its LISTEN connection (by a serial number).
    private let watcher = NIOLockedValueBox<
        (tasks: [Task<Void, Never>], connections: [Int: PostgresConnection], serial: Int, stopped: Bool)
    >(([], [:], 0, false))
    /// The connection holding this process's instance lock (``holdInstanceLock(_:)``).
    private let instanceHolder = NIOLockedValueBox<PostgresConnection?>(nil)

    /// Connects (the first connection at once, the others when needed) and migrates the schema.
    /// - Parameter timeout: how long a connection checkout, a connect or one statement may take before the call
    ///   that needed it fails with ``LedgerError/Kind/unavailable`` (and, for a statement, its connection is closed).
    package init(
        location: PostgresLocation, connections size: Int? = nil,
        timeout: Duration = PostgresLedgerBackend.defaultTimeout,
        logger: Logger = Logger(label: "kiosk-store.postgres")
    ) throws {
        let tls = try Self.tls(for: location.security)
        let size = size ?? location.connections
        // No connection (or thread) at all would leave every write waiting for a free one forever.
        guard size >= 1 else {
            throw StoreError.invalid("a PostgreSQL ledger needs at least 1 connection, not \(size)")
        }
        self.location = location
        self.logger = logger
        group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        threads = NIOThreadPool(numberOfThreads: size)
        threads.start()
        var configuration = PostgresConnection.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: tls)
        configuration.options.connectTimeout = TimeAmount(timeout)
        self.configuration = configuration
        health = PostgresHealth(timeout: TimeAmount(timeout))
        admission = NIOLockedValueBox(0)
        maximumQueued = 1_024
        // Half the connections commit groups; the others serve reads, the background and writes that go alone. A
        // pool of one has no half to spare: its writes all go alone.
        groups = PostgresGroupCommit(threads: threads, drainers: size / 2, maximumQueued: maximumQueued)
        grouping = size >= 2
        connections = ConnectionPool(
            size: size, group: group, configuration: configuration, health: health, logger: logger)
        do {
            try PostgresMigrations.migrate(self)
            try settleEventIDBase()
        } catch {
            shutdown()
            throw error
        }
        groups.start { [weak self] batch in
            guard let self else {
                for job in batch { job.fail(LedgerError(.unavailable, "the ledger is closed")) }
                return
            }
            self.commitGroup(batch)
        }
    }

    deinit { shutdown(waiting: false) }

    /// An event's id is this base + its transaction's id × 2^16 + its place, so ids follow the cluster's transaction
    /// counter. A ledger restored into another cluster (pg_dump and restore, a logical-replication move to a new
    /// instance) meets a counter that may be behind the ids it holds: new events would get ids below old ones and
    /// every follower's cursor would skip them. Under the migration lock, the base is raised (and kept in
    /// `settings`, for every store of the ledger) so that the next id is above every id recorded; each store reads
    /// it when it starts. A cluster's counter only grows, so a base never has to change while stores run on it.
    private func settleEventIDBase() throws {
        let base = try transaction("BEGIN ISOLATION LEVEL READ COMMITTED") { db -> Int64 in
            try db.execute("SELECT pg_advisory_xact_lock(?)", [PostgresMigrations.lockKey])
            var base =
                Int64(try db.value(String.self, "SELECT value FROM settings WHERE key = 'event_id_base'") ?? "")
                ?? 0
            let highest = try db.value(Int64.self, "SELECT COALESCE(MAX(id), 0) FROM events") ?? 0
            let transaction =
                try db.value(Int64.self, "SELECT CAST(CAST(pg_current_xact_id() AS TEXT) AS BIGINT)") ?? 0
            if base + transaction * Ledger.eventsPerTransaction <= highest {
                // Above every recorded id, with room: this transaction's own id would already clear it.
                base = highest - transaction * Ledger.eventsPerTransaction + Ledger.eventsPerTransaction
                try db.execute(
                    "INSERT INTO settings (key, value) VALUES ('event_id_base', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [String(base)])
                logger.notice(
                    "event ids continue above the ledger's highest (restored from another cluster?)",
                    metadata: ["base": "\(base)", "highest": "\(highest)"])
            }
            return base
        }
        eventIDBase.withLockedValue { $0 = base }
    }

    /// What every session of the store asks the server for. TCP keepalives on the server's side of each
    /// connection: a store whose host vanished without closing its sockets (power lost, a partition) is noticed
    /// within about 25 s (10 s idle, then 3 probes 5 s apart), not the kernel's default two hours, so its instance
    /// lock goes and the other stores settle its pending payments. Ignored over a Unix socket.
    /// Set with a statement right after connecting rather than as startup parameters, which a pooler such as
    /// PgBouncer refuses unless told to ignore them.
    package static let sessionSettings = PostgresQuery(
        unsafeSQL:
            "SELECT set_config('tcp_keepalives_idle', '10', false), set_config('tcp_keepalives_interval', '5', false), set_config('tcp_keepalives_count', '3', false)"
    )

    /// postgres-nio's TLS setting for `security`: verified TLS refuses a server whose certificate does not chain to
    /// the roots or does not name the host (its IP address, for a host given as one).
    static func tls(for security: PostgresTransportSecurity) throws -> PostgresConnection.Configuration.TLS {
        switch security {
        case .plaintext:
            return .disable
        case .verifyFull(let caFile):
            var configuration = TLSConfiguration.makeClientConfiguration()
            configuration.certificateVerification = .fullVerification
            configuration.minimumTLSVersion = .tlsv12
            if let caFile {
                guard FileManager.default.isReadableFile(atPath: caFile) else {
                    throw StoreError.invalid("--database-ca \(caFile): cannot read the file")
                }
                configuration.trustRoots = .file(caFile)
            }
            do {
                return .require(try NIOSSLContext(configuration: configuration))
            } catch {
                throw StoreError.invalid(
                    "--database-ca \(caFile ?? "(the system's roots)"): not usable as TLS roots: \(error)")
            }
        }
    }

    /// Stops watching, closes the connections and stops the threads. `waiting`: only where
    /// blocking is safe (the initialiser); the last reference may go on an event loop thread,
    /// even one of this backend's own, so deinit never waits.
    private func shutdown(waiting: Bool = true) {
        // Once: an initialiser that failed has shut down already when deinit comes (the group it would use is gone).
        guard
            let (tasks, listeners) = watcher.withLockedValue({
                watcher -> ([Task<Void, Never>], [PostgresConnection])? in
                guard !watcher.stopped else { return nil }
                watcher.stopped = true
                return (watcher.tasks, Array(watcher.connections.values))
            })
        else { return }
        for task in tasks { task.cancel() }
        groups.stop()
        // Each connection is closed (PostgreSQL's Terminate) before the threads stop; the closures
        // keep the connections alive until their close completes.
        let holder = instanceHolder.withLockedValue { holder in
            defer { holder = nil }
            return holder
        }
        let open = connections.closeAll() + listeners + (holder.map { [$0] } ?? [])
        let closed = EventLoopFuture.andAllComplete(open.map { $0.close() as EventLoopFuture<Void> }, on: group.next())
        if waiting {
            try? waitFor(closed, timeout: health.timeout)
            try? threads.syncShutdownGracefully()
            try? group.syncShutdownGracefully()
        } else {
            let (threads, group) = (threads, group)
            closed.whenComplete { _ in
                withExtendedLifetime(open) {}
                threads.shutdownGracefully { _ in }
                group.shutdownGracefully { _ in }
            }
        }
    }

    /// Calls `body` each time any process commits a write that notifies ``changeChannel``
    /// (PostgreSQL's LISTEN on a connection of its own), and once each time that connection
    /// is (re)established, for what changed while nobody listened. A lost connection is
    /// opened again after a second; meanwhile the caller's own polling covers.
    package func watchChanges(_ body: @escaping @Sendable () -> Void) {
        let (group, configuration, logger, watcher) = (group, configuration, logger, watcher)
        let task = Task.detached {
            // Not once the backend is shutting down: a connect on its stopping threads would never complete.
            while !Task.isCancelled, !watcher.withLockedValue({ $0.stopped }) {
                do {
                    let connection = try await PostgresConnection.connect(
                        on: group.next(), configuration: configuration, id: 0, logger: logger
                    ).get()
                    do {
                        _ = try await connection.query(Self.sessionSettings, logger: logger).get()
                    } catch {
                        try? await connection.close()
                        throw error
                    }
                    let serial = watcher.withLockedValue { watcher -> Int? in
                        guard !watcher.stopped else { return nil }
                        watcher.serial += 1
                        watcher.connections[watcher.serial] = connection
                        return watcher.serial
                    }
                    guard let serial else {
                        try? await connection.close()
                        return
                    }
                    defer { _ = watcher.withLockedValue { $0.connections.removeValue(forKey: serial) } }
                    connection.addListener(channel: Self.changeChannel) { _, _ in body() }
                    body()
                    try await connection.closeFuture.get()
                } catch {
                    logger.debug("ledger change watch: \(PostgresLedgerDatabase.describe(error))")
                }
                // Not a synchronisation: the pause before connecting again to a database that went away.
                try? await Task.sleep(for: .seconds(1))
            }
        }
        let stopped = watcher.withLockedValue { watcher -> Bool in
            if !watcher.stopped { watcher.tasks.append(task) }
            return watcher.stopped
        }
        if stopped { task.cancel() }
    }

    package func read<T>(_ body: (any LedgerDatabase) throws -> T) throws -> T {
        try transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", body)
    }

    // MARK: Instances

    /// The advisory lock key of a store instance (apart from the account keys: those hash bare account ids).
    private static func instanceKey(_ instance: String) -> String { "kiosk-instance:" + instance }

    /// Holds a session advisory lock named after `instance`, on a connection of its own, for as long
    /// as this backend lives: PostgreSQL lets it go when that session ends, however the process ends
    /// (a SIGKILL closes its socket at once). Other store processes on the database, whatever their
    /// data dir, ask ``isInstanceAlive(_:)``.
    package func holdInstanceLock(_ instance: String) throws {
        guard let connection = try lockInstance(instance) else { return }
        let previous = instanceHolder.withLockedValue { holder in
            defer { holder = connection }
            return holder
        }
        if let previous { closeKeepingAlive(previous) }
        watchInstanceLock(instance, on: connection)
    }

    /// A new connection holding `instance`'s session lock, or nil when another session holds it (`waiting` false).
    /// - Parameter waiting: wait for the lock (start-up) or only try it (a re-take, which must not wait a statement
    ///   timeout on a session the server has not yet seen die, nor mark the database stalled for every other call).
    private func lockInstance(_ instance: String, waiting: Bool = true) throws -> PostgresConnection? {
        let connection: PostgresConnection
        do {
            connection = try connectWithin(
                health.timeout, on: group.next(), configuration: configuration, id: -1, logger: logger)
        } catch {
            throw LedgerError(.unavailable, "cannot connect to PostgreSQL: \(PostgresLedgerDatabase.describe(error))")
        }
        do {
            let database = PostgresLedgerDatabase(
                connection: connection, health: waiting ? health : PostgresHealth(timeout: health.timeout),
                logger: logger)
            let key = Self.instanceKey(instance)
            if waiting {
                _ = try database.execute("SELECT pg_advisory_lock(hashtextextended(?, 0))", [key])
            } else if try database.value(Bool.self, "SELECT pg_try_advisory_lock(hashtextextended(?, 0))", [key])
                != true
            {
                closeKeepingAlive(connection)
                return nil
            }
        } catch {
            closeKeepingAlive(connection)
            throw error
        }
        return connection
    }

    /// When the connection holding `instance`'s lock closes (PostgreSQL restarted, or a failover or the network
    /// closed it), the lock went with its session and other processes would take this live one for dead: take it
    /// again on a new connection, retrying from 100 ms, doubling to 5 s, until it holds or the backend shuts down.
    /// The retries hold no reference to the backend while they pause.
    private func watchInstanceLock(_ instance: String, on connection: PostgresConnection) {
        connection.closeFuture.whenComplete { [weak self] _ in
            DispatchQueue.global().async { [weak self] in
                enum Attempt { case done, again }
                var pause: UInt32 = 100_000
                while true {
                    let attempt: Attempt = {
                        guard let self, !self.watcher.withLockedValue({ $0.stopped }),
                            self.instanceHolder.withLockedValue({ $0 === connection })
                        else { return .done }
                        do {
                            guard let retaken = try self.lockInstance(instance, waiting: false) else { return .again }
                            let replaced = self.instanceHolder.withLockedValue { holder -> Bool in
                                guard holder === connection, !self.watcher.withLockedValue({ $0.stopped }) else {
                                    return false
                                }
                                holder = retaken
                                return true
                            }
                            guard replaced else {
                                closeKeepingAlive(retaken)
                                return .done
                            }
                            self.logger.notice(
                                "instance lock taken again after its connection closed",
                                metadata: ["instance": "\(instance)"])
                            self.watchInstanceLock(instance, on: retaken)
                            return .done
                        } catch {
                            self.logger.warning(
                                "cannot take the instance lock again yet: \(error)",
                                metadata: ["instance": "\(instance)"])
                            return .again
                        }
                    }()
                    guard case .again = attempt else { return }
                    usleep(pause + UInt32.random(in: 0...pause / 4))
                    pause = min(pause * 2, 5_000_000)
                }
            }
        }
    }

    /// True when some session holds `instance`'s lock: its store process is alive. Asked on `db`, the
    /// connection of the caller's transaction, when there is one (a connection of the pool otherwise):
    /// a write never waits for a second connection while holding one.
    package func isInstanceAlive(_ instance: String, _ db: (any LedgerDatabase)? = nil) throws -> Bool {
        let key = Self.instanceKey(instance)
        let ask = { (db: any LedgerDatabase) throws -> Bool in
            guard try db.value(Bool.self, "SELECT pg_try_advisory_lock(hashtextextended(?, 0))", [key]) == true else {
                return true
            }
            _ = try db.execute("SELECT pg_advisory_unlock(hashtextextended(?, 0))", [key])
            return false
        }
        if let db { return try ask(db) }
        return try transaction("BEGIN", ask)
    }

    package func read<T: Sendable>(_ body: @escaping @Sendable (any LedgerDatabase) throws -> T) async throws -> T {
        try await offload { try self.read(body) }
    }

    /// Runs `body` on this backend's threads, never the caller's: a stalled database blocks none of the event
    /// loops or Swift concurrency threads. Fails at once with ``LedgerError/Kind/unavailable`` while PostgreSQL is
    /// known not to answer, or when more bodies wait than the threads could serve within a timeout each.
    package func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try health.requireAnswering()
        let admitted = admission.withLockedValue { waiting -> Bool in
            guard waiting < maximumQueued else { return false }
            waiting += 1
            return true
        }
        guard admitted else {
            throw LedgerError(
                .unavailable,
                "the ledger's PostgreSQL connections are all busy (\(maximumQueued) calls waiting); retry later")
        }
        defer { admission.withLockedValue { $0 -= 1 } }
        return try await threads.runIfActive {
            // Checked again on the thread: the database may have stopped answering while this waited its turn.
            try self.health.requireAnswering()
            return try body()
        }
    }

    @discardableResult
    package func write<T>(_ body: (any LedgerDatabase) throws -> T) throws -> T {
        try transaction("BEGIN ISOLATION LEVEL SERIALIZABLE", body)
    }

    /// Runs `body`, one statement, on a connection of the pool outside any transaction, on this backend's threads.
    package func readStatement<T: Sendable>(
        _ body: @escaping @Sendable (any LedgerDatabase) throws -> T
    ) async throws -> T {
        try await offload {
            let connection = try self.connections.checkOut()
            let database = PostgresLedgerDatabase(
                connection: connection, health: self.health, logger: self.logger,
                eventIDBase: self.eventIDBase.withLockedValue { $0 }, roundTrips: self.roundTrips,
                prepared: self.location.preparesStatements ? self.connections.prepared(for: connection) : nil)
            do {
                let value = try body(database)
                try database.answerEverything()
                self.connections.checkIn(connection)
                return value
            } catch {
                // Outside a transaction a failed statement leaves nothing to roll back. A connection that is lost,
                // or that a timed-out wait is closing (it may not read as closed yet), is dropped.
                if connection.isClosed || (error as? LedgerError)?.kind == .unavailable {
                    self.connections.discard(connection)
                } else {
                    self.connections.checkIn(connection)
                }
                throw error
            }
        }
    }

    @discardableResult
    package func groupWrite<T: Sendable>(
        serializingOn key: String?, _ body: @escaping @Sendable (any LedgerDatabase) throws -> T
    ) async throws -> T {
        // A write about an account runs at REPEATABLE READ, ordered by its account's row (see
        // ``transaction(_:serializingOn:lockingFirst:_:)``); SERIALIZABLE's predicate locks on shared index pages would
        // abort writes about different accounts.
        let begin = key == nil ? "BEGIN ISOLATION LEVEL SERIALIZABLE" : "BEGIN ISOLATION LEVEL REPEATABLE READ"
        // A write about an account whose writes collided lately goes alone: it takes the account's lock first.
        guard let key, grouping, !isContended(key) else {
            return try await offload { try self.transaction(begin, serializingOn: key, body) }
        }
        try health.requireAnswering()
        return try await groups.write(account: key, body) { try self.transaction(begin, serializingOn: key, body) }
    }

    /// How a group's transaction ended.
    package enum GroupOutcome {
        case committed
        /// Nothing of it is recorded: each write may run again alone.
        case notCommitted
        /// Its COMMIT got no answer: it may have committed, so nothing runs again.
        case unknown(any Error)
    }

    /// Commits `batch` as one transaction and answers its writes; a single write, or a group that did not commit,
    /// goes alone (each write of it on a thread of its own).
    package func commitGroup(_ arrived: [PostgresGroupCommit.Job]) {
        guard arrived.count > 1 else {
            arrived.first?.alone()
            return
        }
        let batch = PostgresGroupCommit.ordered(arrived)
        switch commitTogether(batch) {
        case .committed:
            for job in batch { job.succeed() }
        case .unknown(let error):
            for job in batch { job.fail(error) }
        case .notCommitted:
            groupsRerun.withLockedValue { $0 += 1 }
            for job in batch.dropFirst() { groups.runAlone(job) }
            batch[0].alone()
        }
    }

    /// Groups whose transaction did not commit, whose writes then ran again alone.
    package let groupsRerun = NIOLockedValueBox(0)

    /// `batch`'s writes one after the other in one transaction at REPEATABLE READ, each ordered by its account's row.
    package func commitTogether(_ batch: [PostgresGroupCommit.Job]) -> GroupOutcome {
        guard let connection = try? connections.checkOut() else { return .notCommitted }
        let database = PostgresLedgerDatabase(
            connection: connection, health: health, logger: logger,
            eventIDBase: eventIDBase.withLockedValue { $0 }, roundTrips: roundTrips,
            prepared: location.preparesStatements ? connections.prepared(for: connection) : nil)
        func givingUp() -> GroupOutcome {
            // A failed statement leaves the transaction aborted: roll it back, or drop the connection.
            if !connection.isClosed, (try? database.rollback()) != nil {
                connections.checkIn(connection)
            } else {
                connections.discard(connection)
            }
            return .notCommitted
        }
        // The write running, and the one before it: a write's held statements go with the next write's first read,
        // so the statement that failed may be either's.
        var (running, before): (String?, String?) = (nil, nil)
        do {
            database.answerLater(try database.send("BEGIN ISOLATION LEVEL REPEATABLE READ", []))
            for job in batch {
                (before, running) = (running, job.account)
                database.startWrite(on: job.account)
                try job.run(database)
            }
            // Every statement but the COMMIT answered first (one wait a group): a refusal, or a statement that
            // failed and was caught, rolls the group back here, where the outcome is known, and never meets COMMIT.
            try database.answerEverything()
            guard !database.failed else { return givingUp() }
        } catch {
            // Met another write about an account (another replica's, most likely): that account's writes take its
            // lock first for a while, and go alone.
            if database.contended || Self.isContention(error) {
                contended.withLockedValue { $0 += 1 }
                for account in [before, running].compactMap({ $0 }) { noteContention(account) }
            }
            return givingUp()
        }
        // A session already ended (PostgreSQL restarted): the COMMIT is not sent, nothing of the group stands.
        guard !connection.isClosed else { return givingUp() }
        do {
            try database.commit()
        } catch let error as LedgerError
            where database.rolledBack
            || [.serializationFailure, .uniqueViolation, .checkViolation].contains(error.kind)
        {
            // PostgreSQL answered the COMMIT with ROLLBACK, or refused it (a deferred check, a serialization failure):
            // nothing of the group stands.
            return givingUp()
        } catch {
            // Any other end of the COMMIT (no answer, the session ended, a FATAL or PANIC as the commit record was
            // flushed) may have committed the group: nothing runs again.
            connections.discard(connection)
            return .unknown(error)
        }
        connections.checkIn(connection)
        let (made, sent) = (database.waits, database.sent)
        accountWrites.withLockedValue {
            $0 = ($0.writes + batch.count, $0.roundTrips + made, $0.statements + sent)
        }
        commits.withLockedValue { $0 = ($0.commits + 1, $0.writes + batch.count) }
        return .committed
    }

    /// Runs `body` between `begin` and COMMIT on one connection; again from the start when
    /// PostgreSQL could not serialize it (40001) or chose it as a deadlock's victim (40P01).
    ///
    /// With a `key` (an account id), the write runs at REPEATABLE READ and, when it writes anything, updates the
    /// account's row before its first write (``PostgresLedgerDatabase/orderWrites(on:)``). Two writes about one
    /// account then never both commit unless one began after the other committed: the second to update the row
    /// waits for the first and fails with a serialization failure (PostgreSQL's "first updater wins"), as does a
    /// write about the account that takes no lock (an operator allowing or refusing its payments). Every invariant
    /// such a write keeps is about its account (an idempotency key answered once, a product owned once, one payment
    /// in flight for a group, a balance never below 0), held by that order and the database's constraints.
    ///
    /// Its first attempt takes no lock: writes about different accounts, nearly all of them, send no lock and
    /// unlock statements. An attempt that meets another write about its account (a serialization failure or a
    /// deadlock, or a unique or check violation, which a write that read an older snapshot can meet before its
    /// update of the row fails) runs again behind a session advisory lock on the account, kept until after
    /// COMMIT, and for ``contentionMemory`` this process's writes about the account take the lock from their first
    /// attempt: writes about one account that collide then queue, each on a snapshot taken after the one before
    /// committed (as SQLite's single writer does), instead of colliding again (a first attempt in another process
    /// can still overtake them: the rerun is then retried as any serialization failure is). `lockingFirst`: the first
    /// attempt takes the lock too.
    package func transaction<T>(
        _ begin: String, serializingOn key: String? = nil, lockingFirst: Bool = false,
        _ body: (any LedgerDatabase) throws -> T
    ) throws -> T {
        var attempt = 0
        // Without the account's lock until an attempt meets another write about the account (or writes about it
        // collided lately).
        var locking = lockingFirst || (key.map { isContended($0) } ?? false)
        while true {
            let connection = try connections.checkOut()
            let database = PostgresLedgerDatabase(
                connection: connection, health: health, logger: logger,
                eventIDBase: eventIDBase.withLockedValue { $0 }, roundTrips: roundTrips,
                prepared: location.preparesStatements ? connections.prepared(for: connection) : nil)
            var lock: EventLoopFuture<Void>?
            do {
                if let key {
                    if locking {
                        // The lock, BEGIN and the body's first statement are queued together and waited for once
                        // (the connection runs them in order; the snapshot is taken by the body's first statement,
                        // after the lock is held): one wait instead of three.
                        lock = try database.send("SELECT pg_advisory_lock(hashtextextended(?, 0))", [key])
                        database.answerLater(lock!)
                    }
                    database.answerLater(try database.send(begin, []))
                    database.orderWrites(on: key)
                } else {
                    try database.run(begin)
                }
                let value = try body(database)
                try database.commit()
                if key != nil {
                    let (made, sent) = (database.waits, database.sent + (locking ? 1 : 0))  // and the unlock
                    accountWrites.withLockedValue { $0 = ($0.writes + 1, $0.roundTrips + made, $0.statements + sent) }
                    commits.withLockedValue { $0 = ($0.commits + 1, $0.writes + 1) }
                }
                // Committed: whatever happens to the unlock, the write stands. The unlock is not waited for (the
                // connection's next query runs after it); a connection that fails it is closed (PostgreSQL then
                // releases the lock with its session).
                if let key, locking {
                    do {
                        try database.send("SELECT pg_advisory_unlock(hashtextextended(?, 0))", [key]).whenFailure {
                            _ in closeKeepingAlive(connection)
                        }
                    } catch {
                        connections.discard(connection)
                        return value
                    }
                }
                connections.checkIn(connection)
                return value
            } catch {
                // A failed statement leaves the transaction aborted: roll it back (and let go of the lock),
                // or drop the connection (PostgreSQL then releases its locks).
                // Whether the lock is held: its statement's answer, waited for here when the body failed before
                // anything waited. An answer that does not come in time leaves it unknown: the connection goes
                // (a ROLLBACK queued behind a lock granted later would hand back a connection that holds it).
                let state: AccountLockState =
                    switch lock.map({ lock in
                        Result { try waitFor(lock, timeout: health.timeout, unlessClosed: connection) }
                    }) {
                    case nil: .none
                    case .success?: .held
                    case .failure(let error)? where error is PostgresTimedOut: .unknown
                    // Not granted, or the session ended (and the lock with it).
                    case .failure?: .none
                    }
                let locked = state == .held
                if state != .unknown, !connection.isClosed, (try? database.rollback()) != nil,
                    !locked
                        || (try? database.execute("SELECT pg_advisory_unlock(hashtextextended(?, 0))", [key ?? ""]))
                            != nil
                {
                    connections.checkIn(connection)
                } else {
                    connections.discard(connection)
                }
                // Met another write about its account without the lock: again, behind it (at once: the lock queues).
                if let key, !locking, database.contended || Self.isContention(error) {
                    locking = true
                    contended.withLockedValue { $0 += 1 }
                    noteContention(key)
                    continue
                }
                if let ledgerError = error as? LedgerError, ledgerError.kind == .serializationFailure,
                    attempt < Self.maximumRetries
                {
                    attempt += 1
                    retries.withLockedValue { $0 += 1 }
                    // Back off a little, more each time, so the transactions that collided do not collide again.
                    usleep(UInt32.random(in: 0...UInt32(min(attempt, 10) * 2_000)))
                    continue
                }
                throw error
            }
        }
    }
}

extension PostgresLedgerBackend {
    /// Whether `error` may come from another write about the same account that committed after this one's snapshot
    /// (not a statement the ledger runs again for its own reasons: ``LedgerError/rerun``).
    static func isContention(_ error: any Error) -> Bool {
        guard let error = error as? LedgerError, !error.rerun else { return false }
        return [.serializationFailure, .uniqueViolation, .checkViolation].contains(error.kind)
    }
}

/// Whether a failed write holds its account's lock: none was asked for or its statement failed, it is held, or its
/// answer did not come in time.
private enum AccountLockState { case none, held, unknown }

/// A fixed number of connections, opened when first needed; a caller waits for a free one.
private final class ConnectionPool: Sendable {
    private struct State {
        package var idle: [PostgresConnection] = []
        /// Each open connection's prepared statements, with the connection (held, so its identifier is not reused).
        var prepared: [ObjectIdentifier: (connection: PostgresConnection, statements: PreparedStatements)] = [:]
        var open = 0
        package var nextID = 0
        package var closed = false
    }

    private let size: Int
    private let group: MultiThreadedEventLoopGroup
    private let configuration: PostgresConnection.Configuration
    private let logger: Logger
    private let health: PostgresHealth
    private let state = NIOLockedValueBox(State())
    private let free: DispatchSemaphore

    package init(
        size: Int, group: MultiThreadedEventLoopGroup, configuration: PostgresConnection.Configuration,
        health: PostgresHealth,
        logger: Logger
    ) {
        self.size = size
        self.group = group
        self.configuration = configuration
        self.health = health
        self.logger = logger
        free = DispatchSemaphore(value: size)
    }

    /// A free connection, waiting at most the backend's timeout for one.
    package func checkOut() throws -> PostgresConnection {
        try health.requireAnswering()
        guard free.wait(timeout: .now() + .nanoseconds(Int(health.timeout.nanoseconds))) == .success else {
            health.noteStalled()
            throw LedgerError(
                .unavailable,
                "no PostgreSQL connection came free within \(health.timeoutDescription): the database is not answering")
        }
        enum Next { case use(PostgresConnection), connect(Int), closed }
        let next = state.withLockedValue { state -> Next in
            if state.closed { return .closed }
            while let connection = state.idle.popLast() {
                if !connection.isClosed { return .use(connection) }
                state.prepared[ObjectIdentifier(connection)] = nil
                state.open -= 1
            }
            state.open += 1
            state.nextID += 1
            return .connect(state.nextID)
        }
        switch next {
        case .use(let connection):
            return connection
        case .closed:
            free.signal()
            throw LedgerError(.unavailable, "the ledger's PostgreSQL connections are closed")
        case .connect(let id):
            do {
                let connection = try connectWithin(
                    health.timeout, on: group.next(), configuration: configuration, id: id, logger: logger)
                health.noteAnswered()
                state.withLockedValue { $0.prepared[ObjectIdentifier(connection)] = (connection, PreparedStatements()) }
                return connection
            } catch {
                health.noteStalled()
                state.withLockedValue { $0.open -= 1 }
                free.signal()
                throw LedgerError(
                    .unavailable, "cannot connect to PostgreSQL: \(PostgresLedgerDatabase.describe(error))")
            }
        }
    }

    package func checkIn(_ connection: PostgresConnection) {
        let close = state.withLockedValue { state -> Bool in
            if state.closed || connection.isClosed {
                state.prepared[ObjectIdentifier(connection)] = nil
                state.open -= 1
                return true
            }
            state.idle.append(connection)
            return false
        }
        if close { closeKeepingAlive(connection) }
        free.signal()
    }

    package func discard(_ connection: PostgresConnection) {
        state.withLockedValue {
            $0.prepared[ObjectIdentifier(connection)] = nil
            $0.open -= 1
        }
        closeKeepingAlive(connection)
        free.signal()
    }

    /// Marks the pool closed and hands back its idle connections, for the caller to close.
    package func closeAll() -> [PostgresConnection] {
        state.withLockedValue { state -> [PostgresConnection] in
            state.closed = true
            defer {
                state.idle = []
                state.prepared = [:]
            }
            return state.idle
        }
    }

    /// The statements `connection`, one of this pool's, has prepared.
    package func prepared(for connection: PostgresConnection) -> PreparedStatements? {
        state.withLockedValue { $0.prepared[ObjectIdentifier(connection)]?.statements }
    }
}

/// The statements one connection has prepared, by their SQL with their parameters' types. PostgreSQL keeps a
/// prepared statement's parse and plan for the session: running it again sends only its values (Bind and Execute)
/// and skips both.
package final class PreparedStatements: Sendable {
    /// Most statements one connection prepares; past it, SQL not yet prepared runs unnamed (SQL built with a
    /// varying number of placeholders cannot fill the session's memory).
    package static let capacity = 256

    package enum Entry: Sendable {
        case prepared(PreparedQuery)
        /// PostgreSQL cannot prepare it as written (a parameter whose type it cannot tell): it runs unnamed.
        case unprepared
    }

    /// A statement as prepared: its SQL as the ledger writes it (`?` placeholders) and its arguments' kinds
    /// (``LedgerValue/kindCode``), which together make the text PostgreSQL prepares (``PostgresLedgerDatabase/placeholders(_:_:typed:)``)
    /// without building it for each statement.
    package struct Key: Hashable, Sendable {
        package var sql: String
        package var kinds: [UInt8]
    }

    package let entries = NIOLockedValueBox<[Key: Entry]>([:])

    package init() {}
}

/// Closes `connection` and keeps it alive until the close completes: a TLS connection stays open while its
/// close_notify goes out, and postgres-nio requires a connection to be closed before its last reference goes.
private func closeKeepingAlive(_ connection: PostgresConnection) {
    connection.close().whenComplete { _ in withExtendedLifetime(connection) {} }
}

/// `future` did not complete within its timeout.
package struct PostgresTimedOut: Error {}

/// A new connection, waiting at most `timeout`; one that connects after the wait gave up is closed, not leaked.
private func connectWithin(
    _ timeout: TimeAmount, on loop: any EventLoop, configuration: PostgresConnection.Configuration, id: Int,
    logger: Logger
) throws -> PostgresConnection {
    let connecting = PostgresConnection.connect(on: loop, configuration: configuration, id: id, logger: logger)
    let connection: PostgresConnection
    do {
        connection = try waitFor(connecting, timeout: timeout)
    } catch let error as PostgresTimedOut {
        connecting.whenSuccess { closeKeepingAlive($0) }
        throw error
    }
    do {
        _ = try waitFor(connection.query(PostgresLedgerBackend.sessionSettings, logger: logger), timeout: timeout)
    } catch {
        closeKeepingAlive(connection)
        throw error
    }
    return connection
}

/// `future`'s connection closed before it completed.
package struct PostgresConnectionClosed: Error {}

/// Waits on this thread (never an event loop's nor a Swift concurrency thread's) for `future`, at most `timeout`.
/// With `connection` (the one `future`'s statement went on), a wait also ends once the connection is closed and
/// `future` has not completed: postgres-nio fails the statements in flight when a connection closes, but leaves one
/// written as it closed unanswered for good. The connection is looked at every ``closedCheckInterval`` of a wait.
package func waitFor<T: Sendable>(
    _ future: EventLoopFuture<T>, timeout: TimeAmount, unlessClosed connection: PostgresConnection? = nil
) throws -> T {
    let done = DispatchSemaphore(value: 0)
    let result = NIOLockedValueBox<Result<T, any Error>?>(nil)
    future.whenComplete { outcome in
        result.withLockedValue { $0 = outcome }
        done.signal()
    }
    let deadline = DispatchTime.now() + .nanoseconds(Int(timeout.nanoseconds))
    while true {
        let slice = connection == nil ? deadline : min(deadline, .now() + closedCheckInterval)
        if done.wait(timeout: slice) == .success { break }
        // Completed as the wait ended: its answer stands.
        if let outcome = result.withLockedValue({ $0 }) { return try outcome.get() }
        if DispatchTime.now() >= deadline { throw PostgresTimedOut() }
        if connection?.isClosed == true {
            // Answered as the connection closed: the answer stands.
            if let outcome = result.withLockedValue({ $0 }) { return try outcome.get() }
            throw PostgresConnectionClosed()
        }
    }
    return try result.withLockedValue { $0! }.get()
}

/// How often a statement's wait looks whether its connection closed (``waitFor(_:timeout:unlessClosed:)``).
private let closedCheckInterval = DispatchTimeInterval.milliseconds(100)

/// Whether PostgreSQL answers in time. A checkout, connect or statement that times out marks it stalled: for the
/// next second every call that needs the database fails at once with ``LedgerError/Kind/unavailable`` (14 on the
/// wire) instead of waiting its own timeout; then one call tries again, and an answer clears the mark.
package final class PostgresHealth: Sendable {
    /// How long one checkout, connect or statement may take.
    package let timeout: TimeAmount
    private let stalledUntil = NIOLockedValueBox<NIODeadline?>(nil)

    package init(timeout: TimeAmount) { self.timeout = timeout }

    package var timeoutDescription: String { "\(Double(timeout.nanoseconds) / 1e9) s" }

    package func requireAnswering() throws {
        let stalled = stalledUntil.withLockedValue { until -> Bool in
            guard let deadline = until else { return false }
            if NIODeadline.now() < deadline { return true }
            // Half open: calls try again; the first that times out puts the mark back.
            until = nil
            return false
        }
        if stalled {
            throw LedgerError(
                .unavailable,
                "PostgreSQL is not answering (a statement or connection took over \(timeoutDescription)); retry later")
        }
    }

    package func noteStalled() { stalledUntil.withLockedValue { $0 = .now() + .seconds(1) } }

    package func noteAnswered() { stalledUntil.withLockedValue { $0 = nil } }
}

/// One PostgreSQL connection inside a transaction, as a ``LedgerDatabase``.
package struct PostgresLedgerDatabase: LedgerDatabase {
    package let connection: PostgresConnection
    package let health: PostgresHealth
    package let logger: Logger
    /// What this transaction has done so far (a transaction is one body on one thread).
    private let progress = Progress()

    /// What event ids add to transaction id × 2^16 (``PostgresLedgerBackend/eventIDBase``).
    package let eventIDBase: Int64

    /// Where this database counts its waits (``PostgresLedgerBackend/roundTrips``), if anywhere.
    private let roundTrips: NIOLockedValueBox<Int>?

    /// The connection's prepared statements: nil runs every statement unnamed (parsed and planned each time).
    private let prepared: PreparedStatements?

    package init(
        connection: PostgresConnection, health: PostgresHealth, logger: Logger, eventIDBase: Int64 = 0,
        roundTrips: NIOLockedValueBox<Int>? = nil, prepared: PreparedStatements? = nil
    ) {
        self.connection = connection
        self.health = health
        self.logger = logger
        self.eventIDBase = eventIDBase
        self.roundTrips = roundTrips
        self.prepared = prepared
    }

    package var dialect: LedgerDialect { .postgres }

    package func nextEventPlace() -> Int64 {
        defer { progress.recorded += 1 }
        return progress.recorded
    }

    package func firstSerialization(of accountID: String) -> Bool {
        progress.serialized.insert(accountID).inserted
    }

    /// Makes the transaction's first write, whatever it is, come after an update of `accountID`'s row (the
    /// ordering update of ``LedgerDatabase/serializeOnAccount(_:)``, sent with that write): any two writes about the
    /// account that overlap then collide on the row. A transaction that only reads updates nothing.
    package func orderWrites(on accountID: String) {
        progress.ordering = accountID
    }

    /// The next write of a group's transaction (``PostgresGroupCommit``), about `accountID`: ordered by its account's
    /// row, and answered nothing the write before it read ahead.
    package func startWrite(on accountID: String) {
        progress.ordering = accountID
        progress.readAhead = []
    }

    /// A statement of this transaction failed as one does when another write about the same rows committed after
    /// its snapshot: a serialization failure or deadlock, a unique or check violation (whatever the body made of
    /// the error).
    package var contended: Bool { progress.contended }

    /// Before a statement that may change rows, the ordering update (``orderWrites(on:)``), once.
    private func orderBefore(_ sql: String) throws {
        guard let account = progress.ordering, !progress.serialized.contains(account), Self.mayWrite(sql) else {
            return
        }
        try serializeOnAccount(account)
    }

    /// Whether `sql` may change rows: anything but a `SELECT`, `VALUES`, `SHOW` or a transaction's control.
    package static func mayWrite(_ sql: String) -> Bool {
        // Bytes, not Characters: this runs for every statement of a write about an account until its first change.
        let word = sql.utf8.drop(while: { isSpace($0) || $0 == UInt8(ascii: "(") }).prefix(while: isWordByte)
        return !readingWords.contains { $0.elementsEqual(word.lazy.map(asciiUppercased)) }
    }

    /// The first words of statements that change no row.
    private static let readingWords = ["SELECT", "VALUES", "SHOW", "BEGIN", "COMMIT", "ROLLBACK", "END"].map {
        Array($0.utf8)
    }

    private static func asciiUppercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) ? byte - 32 : byte
    }

    /// How many times this transaction has waited for PostgreSQL's answer (lock and BEGIN apart).
    package var waits: Int { progress.waits }

    /// How many statements this transaction has sent (prepares apart).
    package var sent: Int { progress.sent }

    /// Most statements sent and not yet waited for: past it, ``executeLater(_:_:refusal:)`` waits for them first.
    package static let maximumUnanswered = 64

    /// What one transaction has done so far: the events it recorded, the accounts whose rows it updated to order
    /// writes about them, the statements it sent without waiting for their answers (oldest first).
    private final class Progress: @unchecked Sendable {
        var recorded: Int64 = 0
        var serialized: Set<String> = []
        /// The account whose row the first write updates first (``orderWrites(on:)``).
        var ordering: String?
        /// A statement failed as a collision with another write does (``contended``).
        var contended = false
        var waits = 0
        var sent = 0
        /// The lock and BEGIN sent ahead of the body's first statement are answered (or there were none).
        var begun = false
        /// A statement sent without waiting failed: the transaction is aborted, whatever the body did with the error.
        var failed = false
        /// PostgreSQL answered the COMMIT with ROLLBACK.
        var rolledBack = false
        var unanswered: [(sent: EventLoopFuture<Void>, refusal: ((LedgerError) -> (any Error)?)?)] = []
        /// Writes not yet sent (``executeLater(_:_:refusal:)``): they go with the next statement, several as one.
        var held: [HeldWrite] = []
        /// Rows read ahead (``readAhead(_:)``), each for the next read of its SQL and arguments.
        var readAhead: [(sql: String, arguments: [LedgerValue], rows: [LedgerRow])] = []
    }

    /// An insert, update or delete whose answer the write does not read, held until the write's next statement.
    package struct HeldWrite {
        package var sql: String
        package var arguments: [any LedgerArgument]
        /// The one table it changes.
        package var table: String
        package var refusal: ((LedgerError) -> (any Error)?)?

        package init(
            sql: String, arguments: [any LedgerArgument], table: String, refusal: ((LedgerError) -> (any Error)?)?
        ) {
            self.sql = sql
            self.arguments = arguments
            self.table = table
            self.refusal = refusal
        }
    }

    /// Holds a plain insert, update or delete until the write's next statement that is sent: then the writes held
    /// go as one statement (``batches(_:)``), or ahead of that statement in it. Anything else is sent at once.
    package func executeLater(
        _ sql: String, _ arguments: [any LedgerArgument], refusal: ((LedgerError) -> (any Error)?)?
    ) throws {
        try orderBefore(sql)
        progress.readAhead = []
        if progress.unanswered.count + progress.held.count >= Self.maximumUnanswered {
            try sendHeld()
            try answerSent()
        }
        if let table = Self.changedTable(sql) {
            progress.held.append(HeldWrite(sql: sql, arguments: arguments, table: table, refusal: refusal))
            return
        }
        try sendHeld()
        progress.unanswered.append((try send(sql, arguments), refusal))
    }

    /// The table a single `INSERT INTO`, `UPDATE` or `DELETE FROM` changes, when it returns nothing; nil for any
    /// other statement.
    package static func changedTable(_ sql: String) -> String? {
        // Bytes, not Characters: this runs for every write a transaction holds.
        let bytes = Array(sql.utf8)
        guard !bytes.contains(UInt8(ascii: ";")), find(Array("RETURNING".utf8), in: bytes) == nil else { return nil }
        var words: [ArraySlice<UInt8>] = []
        var index = 0
        while words.count < 3, index < bytes.count {
            while index < bytes.count, isSpace(bytes[index]) { index += 1 }
            let start = index
            while index < bytes.count, !isSpace(bytes[index]) { index += 1 }
            if index > start { words.append(bytes[start..<index]) }
        }
        let name: ArraySlice<UInt8>
        switch words.first.map({ String(decoding: $0, as: UTF8.self) }) {
        case "INSERT"?, "DELETE"?:
            let preposition = words.first?.first == UInt8(ascii: "I") ? "INTO" : "FROM"
            guard words.count == 3, String(decoding: words[1], as: UTF8.self) == preposition else { return nil }
            name = words[2]
        case "UPDATE"?:
            guard words.count > 1 else { return nil }
            name = words[1]
        default: return nil
        }
        // A lowercase identifier as the ledger's SQL writes them: `UPDATE ONLY t`, a quoted or a capitalised name
        // (which PostgreSQL folds) is sent alone rather than compared wrongly with another write's.
        guard !name.isEmpty,
            name.allSatisfy({ isWordByte($0) && !(UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }),
            !name.elementsEqual("only".utf8)
        else { return nil }
        return String(decoding: name, as: UTF8.self)
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\t")
            || byte == UInt8(ascii: "\r")
    }

    /// A byte of an SQL identifier: an ASCII letter, digit or underscore.
    private static func isWordByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_")
    }

    /// Where `needle` first occurs in `bytes` at or after `start`.
    private static func find(_ needle: [UInt8], in bytes: [UInt8], from start: Int = 0) -> Int? {
        guard let first = needle.first, bytes.count >= needle.count else { return nil }
        var index = start
        while index + needle.count <= bytes.count {
            if bytes[index] == first, bytes[index..<index + needle.count].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }

    /// Held writes in runs PostgreSQL can run as one statement with data-modifying `WITH` clauses: each of a run
    /// changes another table, and none mentions a table an earlier one of its run changes (all of a statement's
    /// clauses see the snapshot it started with, not one another's rows; foreign keys are checked at its end).
    package static func batches(_ held: [HeldWrite]) -> [[HeldWrite]] {
        var batches: [[HeldWrite]] = []
        var current: [HeldWrite] = []
        for write in held {
            if current.contains(where: { $0.table == write.table || mentions(write.sql, $0.table) }) {
                batches.append(current)
                current = []
            }
            current.append(write)
        }
        if !current.isEmpty { batches.append(current) }
        return batches
    }

    /// Held writes less each update that only orders writes about an account (``LedgerWrites/orderAccount``) where a
    /// later held update of the same account's row (``LedgerWrites/addCredits``, known by its text) makes the new
    /// version of the row that orders them: the two would otherwise change one table and go as two statements.
    package static func withoutRedundantOrdering(_ held: [HeldWrite]) -> [HeldWrite] {
        guard held.count > 1 else { return held }
        return held.enumerated().filter { index, write in
            guard write.sql == LedgerWrites.orderAccount, let account = write.arguments.first?.ledgerValue else {
                return true
            }
            return !held[(index + 1)...].contains { later in
                later.sql == LedgerWrites.addCredits && later.arguments.last?.ledgerValue == account
            }
        }.map(\.element)
    }

    /// True when `sql` has `table` as a word of its own.
    package static func mentions(_ sql: String, _ table: String) -> Bool {
        // Case-insensitively: PostgreSQL folds unquoted names to lowercase.
        let bytes = sql.utf8.map { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) ? $0 + 32 : $0 }
        let name = Array(table.utf8)
        var from = 0
        while let found = find(name, in: bytes, from: from) {
            let end = found + name.count
            if (found == 0 || !isWordByte(bytes[found - 1])) && (end == bytes.count || !isWordByte(bytes[end])) {
                return true
            }
            from = found + 1
        }
        return false
    }

    /// `writes` and then `main` as one statement: `WITH w1 AS (write), … main`; its arguments in the same order.
    package static func combined(
        _ writes: [HeldWrite], _ main: String, _ arguments: [any LedgerArgument]
    ) -> (
        String, [any LedgerArgument]
    ) {
        var sql = "WITH "
        var all: [any LedgerArgument] = []
        for (index, write) in writes.enumerated() {
            sql += (index == 0 ? "" : ", ") + "kiosk_w\(index + 1) AS (\(write.sql))"
            all += write.arguments
        }
        return (sql + " " + main, all + arguments)
    }

    /// The refusal of the write of `writes` whose table PostgreSQL named; the error as it is when it named none of
    /// theirs (the main statement's own error).
    private static func refusal(among writes: [HeldWrite]) -> (LedgerError) -> (any Error)? {
        { error in
            guard let table = error.table, let write = writes.first(where: { $0.table == table }) else { return nil }
            return write.refusal?(error) ?? error
        }
    }

    /// Sends every held write, each run as one statement (``batches(_:)``), and returns the last run unsent when
    /// `keepingLast` (for the caller's statement to carry).
    @discardableResult
    private func sendHeld(keepingLast: Bool = false) throws -> [HeldWrite] {
        guard !progress.held.isEmpty else { return [] }
        var batches = Self.batches(Self.withoutRedundantOrdering(progress.held))
        progress.held = []
        let last = keepingLast ? batches.removeLast() : []
        for batch in batches { try send(batch: batch) }
        return last
    }

    /// Sends one run of held writes as one statement, its last write the main one.
    private func send(batch: [HeldWrite]) throws {
        guard let main = batch.last else { return }
        if batch.count == 1 {
            progress.unanswered.append((try send(main.sql, main.arguments), main.refusal))
        } else {
            let (sql, arguments) = Self.combined(Array(batch.dropLast()), main.sql, main.arguments)
            progress.unanswered.append((try send(sql, arguments), Self.refusal(among: batch)))
        }
    }

    /// Lets the next statement that waits answer `sent` (its error thrown as it is) with the rest.
    package func answerLater(_ sent: EventLoopFuture<Void>) {
        progress.unanswered.append((sent, nil))
    }

    /// Waits for every statement ``executeLater(_:_:refusal:)`` sent, in order; throws the first one's error (as its
    /// refusal turns it). Called by each statement that waits, after sending itself: one wait answers all.
    private func answerSent() throws {
        roundTrips?.withLockedValue { $0 += 1 }
        progress.waits += 1
        let unanswered = progress.unanswered
        progress.unanswered = []
        for (sent, refusal) in unanswered {
            do {
                _ = try translatingErrors { try wait(sent) }
            } catch let error as LedgerError {
                progress.failed = true
                throw refusal?(error) ?? error
            }
        }
        progress.begun = true
    }

    /// Sends what is held and waits for every statement sent: the end of a body that runs outside a transaction.
    package func answerEverything() throws {
        try sendHeld()
        if !progress.unanswered.isEmpty { try answerSent() }
    }

    /// ROLLBACK, the errors of statements sent and not waited for forgotten: the transaction is given up already.
    package func rollback() throws {
        progress.unanswered = []
        progress.held = []
        try run("ROLLBACK")
    }

    package func execute(_ sql: String, _ arguments: [any LedgerArgument]) throws -> Int {
        if arguments.isEmpty, sql.utf8.contains(UInt8(ascii: ";")) {
            // Several statements (the schema, clearing): one at a time, the extended protocol takes one. One whose
            // only semicolons are in single quotes (a function's body so quoted) goes as it is.
            let statements = Self.statements(sql)
            if statements != [sql] {
                var changed = 0
                for statement in statements { changed += try execute(statement, []) }
                return changed
            }
        }
        try orderBefore(sql)
        progress.readAhead = []
        try sendHeld()
        progress.sent += 1
        try requireOpen()
        let sent = connection.query(Self.query(sql, arguments), logger: logger)
        try answerSent()
        return try translatingErrors { try wait(sent) }.metadata.rows ?? 0
    }

    package func fetchAll(_ sql: String, _ arguments: [any LedgerArgument]) throws -> [LedgerRow] {
        if !progress.readAhead.isEmpty {
            let values = arguments.map(\.ledgerValue)
            if let read = progress.readAhead.firstIndex(where: { $0.sql == sql && $0.arguments == values }) {
                return progress.readAhead.remove(at: read).rows
            }
            // Any other statement may change what was read: nothing read ahead answers after it.
            progress.readAhead = []
        }
        try orderBefore(sql)
        // A read that mentions none of the tables the last run of held writes changes carries them: one statement.
        // Any other statement (an INSERT … RETURNING, a WITH) goes after every held write, as sent.
        var carried: [HeldWrite] = []
        if sql.hasPrefix("SELECT "), !sql.utf8.contains(UInt8(ascii: ";")) {
            carried = try sendHeld(keepingLast: true)
            if carried.contains(where: { Self.mentions(sql, $0.table) }) {
                try send(batch: carried)
                carried = []
            }
        } else {
            try sendHeld()
        }
        let sent: EventLoopFuture<[PostgresRow]>
        if carried.isEmpty {
            sent = try sendForRows(sql, arguments)
        } else {
            let (combined, all) = Self.combined(carried, sql, arguments)
            sent = try sendForRows(combined, all)
        }
        try answerSent()
        let rows: [PostgresRow]
        do {
            rows = try translatingErrors { try wait(sent) }
        } catch let error as LedgerError {
            // A carried write's refusal aborts the write, as its own statement's would have.
            guard let refused = Self.refusal(among: carried)(error) else { throw error }
            progress.failed = true
            throw refused
        }
        var columns: LedgerRow.Columns?
        return try rows.map { row in
            var values: [LedgerValue] = []
            values.reserveCapacity(row.count)
            var names: [String] = []
            for cell in row {
                if columns == nil { names.append(cell.columnName) }
                values.append(try Self.value(cell))
            }
            let shared = columns ?? LedgerRow.Columns(names)
            columns = shared
            return LedgerRow(columns: shared, values: values)
        }
    }

    /// The reads as one statement: each `LEFT JOIN LATERAL`ed to one row, after a column `kiosk_read_N` that is 1
    /// when it found its row; the row of each read is the columns between its marker and the next.
    package func readAhead(_ reads: [LedgerRead]) throws {
        progress.readAhead = []
        guard reads.count > 1 else { return }
        var sql = "SELECT * FROM (SELECT 1 AS kiosk_read) kiosk_r0"
        var arguments: [any LedgerArgument] = []
        for (index, read) in reads.enumerated() {
            sql +=
                " LEFT JOIN LATERAL (SELECT 1 AS kiosk_read_\(index + 1), * FROM (\(read.sql)) kiosk_q LIMIT 2)"
                + " kiosk_r\(index + 1) ON true"
            arguments += read.arguments
        }
        let rows = try fetchAll(sql, arguments)
        // More than one row: a read found two; each runs alone when its turn comes.
        guard rows.count == 1, let row = rows.first else { return }
        progress.readAhead = try Self.parts(of: row, count: reads.count).enumerated().map { index, part in
            (reads[index].sql, reads[index].arguments.map(\.ledgerValue), part.map { [$0] } ?? [])
        }
    }

    /// The rows of a read-ahead's `count` reads in its one row: nil for a read that found none.
    package static func parts(of row: LedgerRow, count: Int) throws -> [LedgerRow?] {
        let names = row.columns.names
        var starts: [Int] = []
        for number in 1...count {
            guard let start = row.columns.index["kiosk_read_\(number)"] else {
                throw LedgerError(.schema, "a read ahead came back without its marker kiosk_read_\(number)")
            }
            starts.append(start)
        }
        return starts.enumerated().map { number, start in
            guard row.values[start] != .null else { return nil }
            let end = number + 1 < starts.count ? starts[number + 1] : names.count
            return LedgerRow(
                columns: LedgerRow.Columns(Array(names[(start + 1)..<end])),
                values: Array(row.values[(start + 1)..<end]))
        }
    }

    /// Sends a statement without waiting for its answer: the connection runs its statements in the order sent.
    package func send(_ sql: String, _ arguments: [any LedgerArgument]) throws -> EventLoopFuture<Void> {
        try sendForRows(sql, arguments).map { _ in }
    }

    /// Sends a statement, prepared on this connection when it can be, without waiting for its rows.
    private func sendForRows(_ sql: String, _ arguments: [any LedgerArgument]) throws -> EventLoopFuture<[PostgresRow]>
    {
        // postgres-nio refuses more arguments than the protocol carries with a future already failed, which a write
        // whose COMMIT goes with it would see only after the COMMIT: refused here, before anything is sent.
        guard arguments.count <= Int(UInt16.max) else {
            progress.failed = true
            throw LedgerError(
                .refused, "a ledger statement with \(arguments.count) arguments: PostgreSQL takes at most 65,535")
        }
        progress.sent += 1
        // Whatever this statement is, nothing read ahead answers after it (``fetchAll(_:_:)`` looked first).
        progress.readAhead = []
        try requireOpen()
        if let prepared {
            let values = arguments.map(\.ledgerValue)
            if let statement = try prepare(sql, values, in: prepared) {
                var data: [PostgresData] = []
                data.reserveCapacity(values.count)
                for value in values {
                    switch value {
                    case .null: data.append(.null)
                    case .integer(let integer): data.append(PostgresData(int64: integer))
                    case .text(let string): data.append(PostgresData(string: string))
                    case .bytes(let bytes): data.append(PostgresData(bytes: bytes))
                    }
                }
                return statement.execute(data)
            }
        }
        return connection.query(Self.query(sql, arguments), logger: logger).map(\.rows)
    }

    /// The statement prepared for `sql` with the types of `values` on this connection, prepared now (one wait,
    /// not counted in ``waits``: once a connection, not once a write) when it is new; nil when it runs unnamed.
    /// The prepare is queued behind what the transaction sent before it, so the order of statements holds. The
    /// text PostgreSQL prepares is built only then: a statement prepared before is found by its SQL and kinds.
    private func prepare(
        _ sql: String, _ values: [LedgerValue], in prepared: PreparedStatements
    ) throws -> PreparedQuery? {
        let key = PreparedStatements.Key(sql: sql, kinds: values.map(\.kindCode))
        let (entry, full) = prepared.entries.withLockedValue { ($0[key], $0.count >= PreparedStatements.capacity) }
        switch entry {
        case .prepared(let statement)?: return statement
        case .unprepared?: return nil
        case nil: if full { return nil }
        }
        do {
            let statement = try wait(connection.prepare(query: Self.placeholders(sql, castAs: values)))
            prepared.entries.withLockedValue { $0[key] = .prepared(statement) }
            return statement
        } catch let error as LedgerError {
            throw error
        } catch {
            // Not the server's answer (a lost connection): the unnamed statement meets it and reports it. A
            // transaction a statement sent before aborted (25P02): that statement's error is reported first.
            guard let state = Self.serverState(error), state != "25P02" else { return nil }
            // The server refused the Parse, which aborts a transaction: the unnamed statement could not run after
            // it. SQL PostgreSQL cannot prepare as written (class 42: a parameter whose type it cannot tell) runs
            // unnamed from now on, and the write is retried; anything else (a deadlock, a lock or statement
            // timeout) is the statement's own error.
            var refused = Self.ledgerError(error, sqlState: state)
            if state.hasPrefix("42") {
                prepared.entries.withLockedValue { $0[key] = .unprepared }
                refused.kind = .serializationFailure
                refused.rerun = true
            }
            throw refused
        }
    }

    /// A statement with no rows to read (BEGIN, COMMIT).
    package func run(_ sql: String) throws {
        try orderBefore(sql)
        progress.readAhead = []
        try sendHeld()
        progress.sent += 1
        try requireOpen()
        let sent = connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
        try answerSent()
        _ = try translatingErrors { try wait(sent) }
    }

    /// COMMIT, refused when the transaction cannot have committed: a statement of it failed (even one whose error
    /// a body caught and went past), or PostgreSQL answered the COMMIT with ROLLBACK (it does, without an error,
    /// for a transaction a failed statement aborted), or with an error at severity ERROR (a serialization failure, a
    /// deferred constraint or trigger): the session goes on and the transaction rolled back (``rolledBack``). Any other
    /// end of the COMMIT (no answer, the session ended with FATAL or PANIC, as when the commit record cannot be
    /// flushed) may have committed it: ``LedgerError/Kind/unavailable``, never a refusal, so that nothing takes it for
    /// unrecorded.
    package func commit() throws {
        // A body that sent only statements it does not wait for has not yet seen its BEGIN (and, after a collision,
        // its lock) answered; the connection runs what follows a failed statement, so COMMIT goes only once they are
        // (or a write could commit outside its transaction, or without the lock it waited for).
        try sendHeld()
        if !progress.begun { try answerSent() }
        // A statement that failed here and not on the server (refused before it was sent) leaves the transaction
        // able to commit: it must not, since its caller is told that nothing was recorded.
        guard !progress.failed else { throw Self.notRecorded }
        progress.sent += 1
        try requireOpen()
        let sent = connection.query(PostgresQuery(unsafeSQL: "COMMIT"), logger: logger)
        try answerSent()
        let answer: PostgresQueryResult
        do {
            answer = try wait(sent)
        } catch let error as LedgerError {
            // No answer in time, or the connection closed first.
            throw Self.outcomeUnknown(error.message)
        } catch {
            guard Self.serverAnswer(error)?.severity == "ERROR", !connection.isClosed else {
                throw Self.outcomeUnknown(Self.describe(error))
            }
            progress.rolledBack = true
            try translatingErrors { () throws -> Void in throw error }
            throw error
        }
        guard !progress.failed, answer.metadata.command == "COMMIT" else {
            progress.rolledBack = answer.metadata.command == "ROLLBACK"
            throw Self.notRecorded
        }
    }

    private static func outcomeUnknown(_ cause: String) -> LedgerError {
        LedgerError(
            .unavailable,
            "PostgreSQL ended the COMMIT without saying whether it committed (\(cause)): the write may have been "
                + "recorded; retry the same request")
    }

    private static let notRecorded = LedgerError(
        .refused, "a statement of the write failed, so PostgreSQL rolled it back: nothing of it was recorded")

    /// Refuses to send on a connection already closed: the session is gone (PostgreSQL restarted, or ended it), and
    /// postgres-nio leaves a statement sent after the close unanswered (it fails those in flight when the connection
    /// closes). One sent as the connection closes is not answered either: its wait sees the connection closed.
    private func requireOpen() throws {
        guard connection.isClosed else { return }
        throw LedgerError(.unavailable, "the connection to PostgreSQL closed: its session ended; retry later")
    }

    /// Whether a statement of this transaction failed (even one whose error a body caught and went past).
    package var failed: Bool { progress.failed }

    /// Whether PostgreSQL answered this transaction's COMMIT with ROLLBACK.
    package var rolledBack: Bool { progress.rolledBack }

    /// A statement's answer, at most the backend's timeout: past it the connection is closed (PostgreSQL then
    /// ends the statement and lets go of its locks) and the call fails with ``LedgerError/Kind/unavailable``.
    private func wait<T: Sendable>(_ future: EventLoopFuture<T>) throws -> T {
        do {
            let value = try waitFor(future, timeout: health.timeout, unlessClosed: connection)
            health.noteAnswered()
            return value
        } catch is PostgresConnectionClosed {
            // The session ended (PostgreSQL restarted, or ended it): not a database that stopped answering.
            throw LedgerError(
                .unavailable, "the connection to PostgreSQL closed before PostgreSQL answered; retry later")
        } catch is PostgresTimedOut {
            health.noteStalled()
            closeKeepingAlive(connection)
            throw LedgerError(
                .unavailable, "PostgreSQL did not answer a statement within \(health.timeoutDescription); retry later")
        }
    }

    /// The statements of a script, split at the semicolons outside quoted literals (`'…'`), quoted names (`"…"`),
    /// dollar-quoted strings (`$$…$$`, `$tag$…$tag$`: a function's body) and comments (`-- …`, `/* … */`).
    package static func statements(_ sql: String) -> [String] {
        let bytes = Array(sql.utf8)
        var statements: [String] = []
        var start = 0
        var index = 0
        /// The dollar quote's tag (`$tag$`) that starts at `at`, if one does: `$` then an identifier (not a
        /// placeholder's digits) or nothing, then `$`.
        func dollarTag(at at: Int) -> ArraySlice<UInt8>? {
            var end = at + 1
            while end < bytes.count, bytes[end] != UInt8(ascii: "$") {
                let byte = bytes[end]
                let digit = byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
                guard isWordByte(byte) || byte >= 0x80, !(digit && end == at + 1) else { return nil }
                end += 1
            }
            return end < bytes.count ? bytes[at...end] : nil
        }
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "'"), UInt8(ascii: "\""):
                // To the closing quote; a doubled quote inside reads as two quoted runs, which splits nothing.
                let quote = bytes[index]
                index += 1
                while index < bytes.count, bytes[index] != quote { index += 1 }
                index += 1
            case UInt8(ascii: "-") where index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "-"):
                while index < bytes.count, bytes[index] != UInt8(ascii: "\n") { index += 1 }
            case UInt8(ascii: "/") where index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "*"):
                // To the matching `*/`: PostgreSQL's block comments nest.
                var depth = 0
                while index < bytes.count {
                    if bytes[index...].starts(with: [UInt8(ascii: "/"), UInt8(ascii: "*")]) {
                        depth += 1
                        index += 2
                    } else if bytes[index...].starts(with: [UInt8(ascii: "*"), UInt8(ascii: "/")]) {
                        depth -= 1
                        index += 2
                        if depth == 0 { break }
                    } else {
                        index += 1
                    }
                }
            case UInt8(ascii: "$"):
                // A `$` inside a name (`a$b`) quotes nothing.
                guard index == 0 || !isWordByte(bytes[index - 1]), let tag = dollarTag(at: index) else {
                    index += 1
                    continue
                }
                index += tag.count
                while index < bytes.count, !bytes[index...].starts(with: tag) { index += 1 }
                index += tag.count
            case UInt8(ascii: ";"):
                statements.append(String(decoding: bytes[start..<index], as: UTF8.self))
                index += 1
                start = index
            default:
                index += 1
            }
        }
        if start < bytes.count { statements.append(String(decoding: bytes[start...], as: UTF8.self)) }
        return statements.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
    }

    /// `sql` with its `?` placeholders as PostgreSQL's `$1, $2, …` (outside quoted literals). `typed`: each one
    /// cast to its argument's type (`$1::int8`), as the unnamed statement's Parse declares them, for SQL prepared
    /// once and run with other values of the same types; a NULL's type is left to PostgreSQL.
    package static func placeholders(_ sql: String, _ arguments: [any LedgerArgument], typed: Bool = false) -> String {
        placeholders(sql, castAs: typed ? arguments.map(\.ledgerValue) : nil)
    }

    /// `sql` with its placeholders numbered, each cast to the type of its value in `values` (none when nil).
    static func placeholders(_ sql: String, castAs values: [LedgerValue]?) -> String {
        // Bytes, not Characters: every statement passes here. `'` and `?` are ASCII, so no UTF-8 sequence holds them.
        var text: [UInt8] = []
        text.reserveCapacity(sql.utf8.count + 9 * (values?.count ?? 4))
        var number = 0
        var quoted = false
        for byte in sql.utf8 {
            if byte == UInt8(ascii: "'") { quoted.toggle() }
            guard byte == UInt8(ascii: "?"), !quoted else {
                text.append(byte)
                continue
            }
            number += 1
            text.append(UInt8(ascii: "$"))
            text.append(contentsOf: String(number).utf8)
            if let values, number <= values.count {
                switch values[number - 1] {
                case .null: break
                case .integer: text.append(contentsOf: "::int8".utf8)
                case .text: text.append(contentsOf: "::text".utf8)
                case .bytes: text.append(contentsOf: "::bytea".utf8)
                }
            }
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// `?` placeholders as PostgreSQL's `$1, $2, …` (outside quoted literals), with the arguments bound.
    package static func query(_ sql: String, _ arguments: [any LedgerArgument]) -> PostgresQuery {
        let text = placeholders(sql, arguments)
        var binds = PostgresBindings(capacity: arguments.count)
        for argument in arguments {
            switch argument.ledgerValue {
            case .null: binds.appendNull()
            case .integer(let integer): binds.append(integer)
            case .text(let string): binds.append(string)
            case .bytes(let bytes): binds.append(ByteBuffer(bytes: bytes))
            }
        }
        return PostgresQuery(unsafeSQL: text, binds: binds)
    }

    /// A cell in PostgreSQL's binary format, which every statement asks for (unnamed or prepared: postgres-nio's
    /// prepared statements describe their columns as text, so the cell's own format is not trusted).
    package static func value(_ cell: PostgresCell) throws -> LedgerValue {
        guard var bytes = cell.bytes else { return .null }
        let malformed = LedgerError(
            .schema, "ledger column \(cell.columnName) holds \(bytes.readableBytes) bytes, not a \(cell.dataType)")
        switch cell.dataType {
        case .int8:
            guard bytes.readableBytes == 8, let integer = bytes.readInteger(as: Int64.self) else { throw malformed }
            return .integer(integer)
        case .int4:
            guard bytes.readableBytes == 4, let integer = bytes.readInteger(as: Int32.self) else { throw malformed }
            return .integer(Int64(integer))
        case .int2:
            guard bytes.readableBytes == 2, let integer = bytes.readInteger(as: Int16.self) else { throw malformed }
            return .integer(Int64(integer))
        case .bool:
            guard bytes.readableBytes == 1, let flag = bytes.readInteger(as: UInt8.self) else { throw malformed }
            return .integer(flag == 0 ? 0 : 1)
        case .text, .varchar, .name, .bpchar:
            return .text(String(buffer: bytes))
        case .bytea:
            return .bytes(Array(bytes.readableBytesView))
        default:
            throw LedgerError(
                .schema,
                "ledger column \(cell.columnName) has PostgreSQL type \(cell.dataType), which the ledger does not use")
        }
    }

    /// PostgreSQL's SQLSTATEs as the ``LedgerError`` kinds both backends share; a lost connection as unavailable.
    package func translatingErrors<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as LedgerError {
            if PostgresLedgerBackend.isContention(error) { progress.contended = true }
            throw error
        } catch {
            // PSQLError, or postgres-nio's older PostgresError for a prepared statement (which turns a lost
            // connection into the channel's own error: a reset, a TLS failure): without a server's answer, unavailable.
            let server = Self.serverAnswer(error)
            var translated = Self.ledgerError(error, sqlState: server?.state)
            translated.table = server?.table
            let thrown = forgettingStalePlans(translated, sqlState: server?.state)
            if PostgresLedgerBackend.isContention(thrown) { progress.contended = true }
            throw thrown
        }
    }

    /// A prepared statement the schema has overtaken (a newer store migrated a table under `SELECT *`: "cached plan
    /// must not change result type") or that the session no longer has (26000): the connection's statements are
    /// forgotten, to be prepared again, and the error is one to retry (``LedgerError/rerun``: a retry, not a collision).
    private func forgettingStalePlans(_ error: LedgerError, sqlState: String?) -> LedgerError {
        guard let prepared, sqlState == "26000" || sqlState == "0A000" else { return error }
        prepared.entries.withLockedValue { $0 = [:] }
        var retry = error
        retry.kind = .serializationFailure
        retry.rerun = true
        return retry
    }

    /// The SQLSTATE of an error the server sent, in either of postgres-nio's forms; nil for any other error.
    package static func serverState(_ error: any Error) -> String? { serverAnswer(error)?.state }

    /// What the server's error said: its SQLSTATE, the table it named, its message; nil for an error that is not
    /// the server's (in either of postgres-nio's forms).
    private static func serverAnswer(
        _ error: any Error
    ) -> (state: String?, table: String?, message: String?, severity: String?)? {
        switch error {
        case let error as PSQLError:
            error.serverInfo.map {
                ($0[.sqlState], $0[.tableName], $0[.message], $0[.severity] ?? $0[.localizedSeverity])
            }
        case PostgresError.server(let answer) as PostgresError:
            (
                answer.fields[.sqlState], answer.fields[.tableName], answer.fields[.message],
                answer.fields[.severity] ?? answer.fields[.localizedSeverity]
            )
        default: nil
        }
    }

    /// The ledger's kind for a PostgreSQL error: the server going away, shutting down, refusing connections for
    /// now or out of resources is unavailable (14 on the wire: retry later), never a refusal of the statement.
    package static func ledgerError(_ error: any Error, sqlState: String?) -> LedgerError {
        switch sqlState {
        case "23505": return LedgerError(.uniqueViolation, describe(error))
        case "23514": return LedgerError(.checkViolation, describe(error))
        case "40001", "40P01": return LedgerError(.serializationFailure, describe(error))
        case nil: return LedgerError(.unavailable, "PostgreSQL: \(describe(error))")
        // Permanent whatever the retry: a protocol violation (a client defect), a configured limit the statement
        // exceeds, the database dropped.
        case "08P01", "53400", "57P04":
            return LedgerError(.refused, "PostgreSQL refused a ledger statement: \(describe(error))")
        // 08: connection exception; 53: insufficient resources (too many connections, out of memory or disk);
        // 57: operator intervention (57P01 shut down by the administrator, 57P02 crash, 57P03 starting or stopping,
        // 57014 a statement cancelled); 25006: a read-only server (a demoted primary after a failover); 25P03: the
        // session ended for idling in a transaction; 55P03: a lock not granted in time.
        case let state?
        where state.hasPrefix("08") || state.hasPrefix("53") || state.hasPrefix("57") || state == "25006"
            || state == "25P03" || state == "55P03":
            return LedgerError(.unavailable, "PostgreSQL: \(describe(error))")
        default: return LedgerError(.refused, "PostgreSQL refused a ledger statement: \(describe(error))")
        }
    }

    /// The server's message when there is one (PSQLError's own description hides it).
    package static func describe(_ error: any Error) -> String {
        if let answer = serverAnswer(error), let message = answer.message {
            return "\(message) (SQLSTATE \(answer.state ?? "?"))"
        }
        guard let error = error as? PSQLError else { return "\(error)" }
        // A refused certificate, a refused TLS request, a lost socket: what went wrong underneath (postgres-nio's
        // own description of a connection error says only that).
        if let underlying = error.underlying {
            return "\(error.code): \(underlying)"
        }
        return "\(error.code)"
    }
}
