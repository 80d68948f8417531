import KioskAPI
import NIOConcurrencyHelpers

/// The console's signed-in sessions, in the store process's memory: a session ends when signed out, after
/// ``AdminConsole/Configuration-swift.struct/idleTimeout`` without a request, after
/// ``AdminConsole/Configuration-swift.struct/sessionLifetime`` whatever, when its credential is revoked, or when the
/// store restarts. Its id is 32 random bytes, sent only in an `HttpOnly` cookie; its CSRF token another 32.
final class ConsoleSessions: Sendable {
    struct Session: Sendable {
        var credentialID: String
        var credentialName: String
        var csrf: String
        var createdMs: Int64
        var lastSeenMs: Int64
        /// What the last action did (or why it was refused), shown once on the next page.
        var flash: (text: String, isError: Bool)?
        /// A credential just created: its secret, shown on the next keys page only.
        var secret: (id: String, secret: String)?
    }

    private let sessions = NIOLockedValueBox<[String: Session]>([:])
    /// Sign-in failures by address within the last minute, numbered.
    private let failures = NIOLockedValueBox<(next: Int, byAddress: [String: [(number: Int, at: Int64)]])>((0, [:]))
    let idleTimeoutMs: Int64
    let lifetimeMs: Int64
    let maxSessions: Int

    init(idleTimeoutMs: Int64, lifetimeMs: Int64, maxSessions: Int) {
        self.idleTimeoutMs = idleTimeoutMs
        self.lifetimeMs = lifetimeMs
        self.maxSessions = maxSessions
    }

    /// 32 random bytes as hex.
    static func token() -> String {
        [UInt8].secureRandom(count: 32).hexString
    }

    /// True when `a` and `b` are equal, in a time that depends on their lengths only.
    static func equal(_ a: String, _ b: String) -> Bool {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }

    /// A new session for the credential; returns its id (the cookie's value). The oldest session is dropped when
    /// ``maxSessions`` are open.
    func create(credentialID: String, name: String, nowMs: Int64) -> String {
        let id = Self.token()
        sessions.withLockedValue { sessions in
            sessions = sessions.filter { !expired($0.value, nowMs) }
            if sessions.count >= maxSessions, let oldest = sessions.min(by: { $0.value.createdMs < $1.value.createdMs })
            {
                sessions.removeValue(forKey: oldest.key)
            }
            sessions[id] = Session(
                credentialID: credentialID, credentialName: name, csrf: Self.token(), createdMs: nowMs,
                lastSeenMs: nowMs)
        }
        return id
    }

    private func expired(_ session: Session, _ nowMs: Int64) -> Bool {
        nowMs - session.lastSeenMs >= idleTimeoutMs || nowMs - session.createdMs >= lifetimeMs
    }

    /// The session `id` names, when it is open (it counts as seen now); an expired one is ended.
    func session(_ id: String?, nowMs: Int64) -> Session? {
        guard let id, id.utf8.count == 64 else { return nil }
        return sessions.withLockedValue { sessions in
            guard var session = sessions[id] else { return nil }
            guard !expired(session, nowMs) else {
                sessions.removeValue(forKey: id)
                return nil
            }
            session.lastSeenMs = nowMs
            sessions[id] = session
            return session
        }
    }

    /// Takes the session's flash message (shown once).
    func takeFlash(_ id: String) -> (text: String, isError: Bool)? {
        sessions.withLockedValue { sessions in
            defer { sessions[id]?.flash = nil }
            return sessions[id]?.flash
        }
    }

    /// Takes the secret of the credential the session just created (shown once).
    func takeSecret(_ id: String) -> (id: String, secret: String)? {
        sessions.withLockedValue { sessions in
            defer { sessions[id]?.secret = nil }
            return sessions[id]?.secret
        }
    }

    /// Keeps a created credential's secret for the session's next keys page.
    func keepSecret(_ id: String, _ secret: (id: String, secret: String)) {
        sessions.withLockedValue { $0[id]?.secret = secret }
    }

    /// Leaves `text` for the session's next page.
    func flash(_ id: String, _ text: String, isError: Bool = false) {
        sessions.withLockedValue { $0[id]?.flash = (text, isError) }
    }

    /// Ends session `id`.
    func end(_ id: String) { _ = sessions.withLockedValue { $0.removeValue(forKey: id) } }

    /// Notes a sign-in attempt from `address` as failed until ``forgive(_:_:)`` says otherwise (its failures older
    /// than a minute are forgotten); returns the attempt's number.
    func noteFailure(from address: String, nowMs: Int64) -> Int {
        failures.withLockedValue { failures in
            if failures.byAddress.count > 10_000 {
                failures.byAddress = failures.byAddress.filter { $0.value.contains { nowMs - $0.at < 60_000 } }
            }
            let number = failures.next
            failures.next += 1
            failures.byAddress[address] =
                (failures.byAddress[address] ?? []).filter { nowMs - $0.at < 60_000 } + [(number, nowMs)]
            return number
        }
    }

    /// The attempt `number` from `address` succeeded: it is not a failure.
    func forgive(_ address: String, _ number: Int) {
        failures.withLockedValue { $0.byAddress[address]?.removeAll { $0.number == number } }
    }

    /// True when `address` failed to sign in `limit` times within the last minute.
    func isThrottled(_ address: String, nowMs: Int64, limit: Int) -> Bool {
        failures.withLockedValue { ($0.byAddress[address] ?? []).filter { nowMs - $0.at < 60_000 }.count >= limit }
    }
}
