import Crypto
import Foundation
import KioskAPI
import NIOConcurrencyHelpers
#if canImport(Glibc)
import Glibc
#endif

/// The store's Ed25519 signing keys: private keys in `keys/` of the data dir
/// (one file each, mode 0600), public keys in the ledger. The newest key signs;
/// every key keeps verifying what it signed (a retired one: what it signed up to its retirement).
final class KeyStore: Sendable {
    private let directory: String
    private let ledger: Ledger
    private let cache = NIOLockedValueBox<ReceiptSigningKey?>(nil)

    /// Opens the key store, generating the first key when there is none.
    init(dataDirectory: String, ledger: Ledger, nowMs: Int64) throws {
        self.directory = (dataDirectory as NSString).appendingPathComponent("keys")
        self.ledger = ledger
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if try ledger.publicKeys().isEmpty {
            _ = try rotate(nowMs: nowMs)
        }
    }

    /// The key that signs new receipts: the newest one that is not retired (the newest
    /// key cannot be retired, see ``Ledger/retirePublicKey(id:atMs:)``: this never signs with a retired key).
    func activeKey() throws -> ReceiptSigningKey {
        let keys = try ledger.publicKeys()
        guard !keys.isEmpty else {
            throw StoreError(.internalFailure, "the ledger has no signing key")
        }
        guard let newest = keys.last(where: { !$0.isRetired }) else {
            throw StoreError(.internalFailure, "every signing key is retired: add one with `kiosk-store keys rotate`")
        }
        if let cached = cache.withLockedValue({ $0 }), cached.id == newest.id { return cached }
        let key = try load(newest)
        cache.withLockedValue { $0 = key }
        return key
    }

    /// The key to sign with at `signedAtMs`, read inside the write transaction `db` that records what
    /// it signs: `chosen` (picked before the transaction) unless a retirement committed meanwhile (by
    /// another process, `keys rotate` then `keys retire`) covers that time; then the active key. A
    /// retirement committed after this transaction takes its time after it, so a receipt signed here is
    /// never one its own key refuses.
    func signer(_ chosen: ReceiptSigningKey, at signedAtMs: Int64, _ db: any LedgerDatabase) throws -> ReceiptSigningKey {
        let keys = try Ledger.publicKeys(db)
        if let current = keys.first(where: { $0.id == chosen.id }), current.isValid(atMs: signedAtMs) { return chosen }
        guard let newest = keys.last(where: { !$0.isRetired }) else {
            throw StoreError(.internalFailure, "every signing key is retired: add one with `kiosk-store keys rotate`")
        }
        return try load(newest)
    }

    /// The key that signs access tokens: the newest usable key that has been
    /// published for at least `settle` (content services learn a new key from
    /// the revocation feed within a moment, and verify tokens offline, never
    /// asking the store about a key they do not know), else the newest usable one.
    func accessTokenKey(nowMs: Int64, settle: Int64) throws -> ReceiptSigningKey {
        let usable = try ledger.publicKeys().filter { !$0.isRetired || $0.notAfterMs > nowMs }
        guard let chosen = usable.last(where: { $0.notBeforeMs <= nowMs - settle }) ?? usable.last else {
            throw StoreError(.internalFailure, "no signing key can sign now: add one with `kiosk-store keys rotate`")
        }
        let active = try activeKey()
        return chosen.id == active.id ? active : try load(chosen)
    }

    /// Adds a new signing key; it signs from now on.
    func rotate(nowMs: Int64) throws -> ReceiptPublicKey {
        let signingKey = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: nowMs)
        try writePrivateKey(signingKey)
        try ledger.addPublicKey(signingKey.publicKey)
        return signingKey.publicKey
    }

    private func path(for id: String) -> String {
        (directory as NSString).appendingPathComponent("\(id).ed25519")
    }

    private func load(_ publicKey: ReceiptPublicKey) throws -> ReceiptSigningKey {
        let file = path(for: publicKey.id)
        guard let data = FileManager.default.contents(atPath: file) else {
            throw StoreError(.internalFailure, "private key file \(file) for signing key \(publicKey.id) is missing")
        }
        let privateKey = try Curve25519.Signing.PrivateKey(rawRepresentation: data)
        let key = ReceiptSigningKey(privateKey: privateKey, notBeforeMs: publicKey.notBeforeMs)
        guard key.id == publicKey.id else {
            throw StoreError(.internalFailure, "private key file \(file) does not match signing key \(publicKey.id)")
        }
        return key
    }

    /// Writes the raw private key to a new file with mode 0600, durably.
    private func writePrivateKey(_ key: ReceiptSigningKey) throws {
        let file = path(for: key.id)
        let fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw StoreError(.internalFailure, "cannot create private key file \(file): errno \(errno)") }
        defer { close(fd) }
        let bytes = Array(key.privateKey.rawRepresentation)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0 else {
            throw StoreError(.internalFailure, "cannot write private key file \(file): errno \(errno)")
        }
    }
}
