import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A payment the SDK has promised to send: written to disk, with its
/// idempotency key, before it is sent, and removed once the store has answered.
struct JournalEntry: Codable, Hashable, Sendable {
    var key: String
    var productID: String
    var quantity: UInt32
    var paymentMethod: String
    var createdMs: Int64
}

/// The store-and-forward journal: one small file per payment in `<state>/journal/`.
/// Written atomically (temporary file, fsync, rename, fsync of the directory),
/// so after a crash a payment is either wholly there or was never promised.
struct PaymentJournal: Sendable {
    let directory: String

    init(stateDirectory: String) throws {
        directory = (stateDirectory as NSString).appendingPathComponent("journal")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    private func path(_ key: String) -> String {
        (directory as NSString).appendingPathComponent("\(key).json")
    }

    func record(_ entry: JournalEntry) throws {
        let data = try JSONEncoder().encode(entry)
        let temporary = path(entry.key) + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw KioskError(.unknown, "cannot write the payment journal in \(directory): errno \(errno)") }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == data.count, synced, rename(temporary, path(entry.key)) == 0 else {
            throw KioskError(.unknown, "cannot write the payment journal in \(directory): errno \(errno)")
        }
        let directoryFD = open(directory, O_RDONLY)
        if directoryFD >= 0 {
            fsync(directoryFD)
            close(directoryFD)
        }
    }

    func remove(_ key: String) {
        unlink(path(key))
    }

    /// The queued payments, oldest first.
    func entries() -> [JournalEntry] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }
            .compactMap { name in
                FileManager.default.contents(atPath: (directory as NSString).appendingPathComponent(name))
                    .flatMap { try? JSONDecoder().decode(JournalEntry.self, from: $0) }
            }
            .sorted { ($0.createdMs, $0.key) < ($1.createdMs, $1.key) }
    }
}
