import Foundation
import Logging
import NIOConcurrencyHelpers

/// A file of the payment journal that the SDK could not use as a queued
/// payment (not readable, not a journal entry, or a key that does not match
/// its name), so it moved it aside instead of skipping it silently. Its bytes
/// are kept, unchanged, for inspection; the payment it may have held is not sent.
public struct SetAsideJournalEntry: Hashable, Sendable {
    /// The file's name in the journal, e.g. `1F0C….json`.
    public var name: String
    /// Where the file is now: in the state directory's `journal/corrupt/`.
    public var path: String
    /// Why it could not be used, e.g. `not a journal entry: no "productID"`.
    public var reason: String

    /// Creates a description of a set-aside file.
    public init(name: String, path: String, reason: String) {
        self.name = name
        self.path = path
        self.reason = reason
    }
}

/// A payment the SDK has promised to send: written to disk, with its
/// idempotency key, before it is sent, and removed once the store has answered.
struct JournalEntry: Codable, Hashable, Sendable {
    var key: String
    var productID: String
    var quantity: UInt32
    var paymentMethod: String
    var createdMs: Int64
    /// The subscription offer asked for; absent in entries of older versions.
    var offer: SubscriptionOffer?
}

/// The store-and-forward journal: one small file per payment in `<state>/journal/`
/// (0700; entries 0600, see ``PrivateFiles``). Written atomically (temporary
/// file, fsync, rename, fsync of the directory), so after a crash a payment is
/// either wholly there or was never promised; a removal is followed by an fsync
/// of the directory too. A file that is not a usable entry is moved to
/// `<state>/journal/corrupt/`, logged as a warning and listed in ``setAsideEntries``.
struct PaymentJournal: Sendable {
    let directory: String
    /// Where files that are not usable entries are moved.
    let corruptDirectory: String
    private let logger: Logger
    private let setAside = NIOLockedValueBox(SetAside())

    private struct SetAside {
        var entries: [SetAsideJournalEntry] = []
        /// Files that could not be moved (warned about once).
        var unmovable: Set<String> = []
    }

    /// Opens the journal in `stateDirectory` (which must exist), making its
    /// directory private, and sets aside what cannot be used right away.
    init(stateDirectory: String, logger: Logger) throws {
        directory = (stateDirectory as NSString).appendingPathComponent("journal")
        corruptDirectory = (directory as NSString).appendingPathComponent("corrupt")
        self.logger = logger
        try PrivateFiles.makeDirectory(directory, tighteningExisting: true)
        _ = entries()
    }

    private func path(_ key: String) -> String {
        (directory as NSString).appendingPathComponent("\(key).json")
    }

    func record(_ entry: JournalEntry) throws {
        let data = try JSONEncoder().encode(entry)
        do {
            try PrivateFiles.writeAtomically(data, to: path(entry.key))
        } catch {
            // Not promised: an entry that may not last is not left behind to be sent later.
            _ = try? PrivateFiles.remove(path(entry.key))
            throw KioskError(.unknown, "cannot write the payment journal in \(directory): \(error)")
        }
    }

    func remove(_ key: String) {
        do {
            try PrivateFiles.remove(path(key))
        } catch {
            // Sent again later with the same key, the store answers with the same transaction.
            logger.warning(
                "cannot remove an answered payment from the journal: \(error)",
                metadata: ["kiosk.journal.file": "\(path(key))"])
        }
    }

    /// The queued payments, oldest first. Files that are not usable entries are set aside.
    func entries() -> [JournalEntry] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var found: [JournalEntry] = []
        for name in names where name.hasSuffix(".json") {
            let file = (directory as NSString).appendingPathComponent(name)
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: file))
            } catch {
                // Gone meanwhile: answered and removed.
                if !FileManager.default.fileExists(atPath: file) { continue }
                setAside(name, reason: "cannot be read: \(error.localizedDescription)")
                continue
            }
            do {
                let entry = try JSONDecoder().decode(JournalEntry.self, from: data)
                guard name == "\(entry.key).json" else {
                    setAside(name, reason: "its key \(entry.key) does not match its file name")
                    continue
                }
                found.append(entry)
            } catch {
                setAside(name, reason: Self.reason(error))
            }
        }
        return found.sorted { ($0.createdMs, $0.key) < ($1.createdMs, $1.key) }
    }

    /// The files this journal moved aside, in the order it did.
    var setAsideEntries: [SetAsideJournalEntry] {
        setAside.withLockedValue { $0.entries }
    }

    /// Moves the file `name` to ``corruptDirectory`` (the directories fsynced),
    /// logs a warning and lists it. Under the lock, so concurrent scans move and
    /// report it once.
    private func setAside(_ name: String, reason: String) {
        let source = (directory as NSString).appendingPathComponent(name)
        setAside.withLockedValue { state in
            guard FileManager.default.fileExists(atPath: source) else { return }  // moved by another scan
            var destination = (corruptDirectory as NSString).appendingPathComponent(name)
            if FileManager.default.fileExists(atPath: destination) {
                destination += ".\(String(UInt64.random(in: 0...UInt64.max), radix: 36))"
            }
            do {
                try PrivateFiles.makeDirectory(corruptDirectory, tighteningExisting: true)
                try PrivateFiles.rename(source, to: destination)
            } catch {
                guard FileManager.default.fileExists(atPath: destination) else {
                    if state.unmovable.insert(name).inserted {
                        logger.error(
                            "payment journal entry \(name) cannot be used (\(reason)) nor moved aside: \(error)",
                            metadata: ["kiosk.journal.file": "\(source)", "kiosk.journal.reason": "\(reason)"])
                    }
                    return
                }
                // Moved; only the fsync of a directory failed.
                logger.warning("payment journal: \(error)")
            }
            state.entries.append(SetAsideJournalEntry(name: name, path: destination, reason: reason))
            logger.warning(
                "payment journal entry \(name) cannot be used (\(reason)); moved aside to \(destination)",
                metadata: [
                    "kiosk.journal.file": "\(source)", "kiosk.journal.set-aside-to": "\(destination)",
                    "kiosk.journal.reason": "\(reason)",
                ])
        }
    }

    /// A short reason for a decoding failure.
    private static func reason(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "not a journal entry: \(error)" }
        func at(_ context: DecodingError.Context) -> String {
            context.codingPath.isEmpty
                ? "the entry" : "\"" + context.codingPath.map(\.stringValue).joined(separator: ".") + "\""
        }
        switch error {
        case .dataCorrupted(let context): return "not a journal entry: \(context.debugDescription)"
        case .keyNotFound(let key, _): return "not a journal entry: no \"\(key.stringValue)\""
        case .typeMismatch(let type, let context): return "not a journal entry: \(at(context)) is not a \(type)"
        case .valueNotFound(_, let context): return "not a journal entry: \(at(context)) is null"
        @unknown default: return "not a journal entry: \(error)"
        }
    }
}
