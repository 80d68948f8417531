import Foundation
import KioskAPI
import KioskStoreCore

#if canImport(Glibc)
import Glibc
#endif

/// Tells which store processes on a data dir are alive, so that a payment
/// intent left open by a process that died (SIGKILL, power cut) is reconciled
/// at once, while one a live process is still paying is left to it.
///
/// Each opened store holds an exclusive `flock` on
/// `instances/<id>.lock` in its data dir for as long as the process lives; the
/// kernel drops the lock when the process dies, however it dies. On a
/// PostgreSQL ledger, shared by store replicas each with a data dir of its
/// own, the instance also holds a session advisory lock in the database (see
/// ``PostgresLedgerBackend/holdInstanceLock(_:)``), and liveness is asked there:
/// an intent of a live replica elsewhere is never taken for a dead one's.
package final class InstanceLock: Sendable {
    /// This instance's id, written as the owner of its intents.
    package let id: String
    private let directory: String
    private let descriptor: Int32
    private let shared: PostgresLedgerBackend?

    package init(dataDirectory: String, ledger: Ledger? = nil) throws {
        directory = (dataDirectory as NSString).appendingPathComponent("instances")
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        id = "inst_" + [UInt8].secureRandom(count: 8).hexString
        let path = (directory as NSString).appendingPathComponent(id + ".lock")
        descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw StoreError(.internalFailure, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            close(descriptor)
            throw StoreError(.internalFailure, "cannot lock \(path): \(String(cString: strerror(errno)))")
        }
        shared = ledger?.backend as? PostgresLedgerBackend
        do {
            try shared?.holdInstanceLock(id)
        } catch {
            unlink(path)
            close(descriptor)
            throw error
        }
    }

    deinit {
        unlink((directory as NSString).appendingPathComponent(id + ".lock"))
        close(descriptor)
    }

    /// True when `owner` is this instance or another process that still holds its lock.
    /// - Parameter db: the caller's open transaction, if any (on PostgreSQL the question is asked on its connection).
    package func isAlive(_ owner: String, _ db: (any LedgerDatabase)? = nil) -> Bool {
        if owner == id { return true }
        guard owner.hasPrefix("inst_"), !owner.contains("/") else { return false }
        if let shared {
            // Unknown (the database unreachable): alive, so nothing is taken over on a guess; the intent's grace period still ends it.
            return (try? shared.isInstanceAlive(owner, db)) ?? true
        }
        let path = (directory as NSString).appendingPathComponent(owner + ".lock")
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return false }  // no lock file: its process ended
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            unlink(path)  // dead: nobody will take this lock again
            return false
        }
        return true
    }
}
