import Crypto
import Foundation
import KioskAPI
import KioskSigning
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// The store's Ed25519 signing keys: public keys in the ledger; private keys
/// sealed beside them with the key-encryption key when the store has one
/// (replicas share them), else in `keys/` of the data dir (one file each, mode
/// 0600). The newest key signs; every key keeps verifying what it signed (a
/// retired one: what it signed up to its retirement).
final class KeyStore: Sendable {
    private let directory: String
    private let ledger: Ledger
    private let keyEncryptionKey: KeyEncryptionKey?
    private let cache = NIOLockedValueBox<ReceiptSigningKey?>(nil)
    /// The ledger's public keys as last read, and when: on PostgreSQL a read is a round trip (three statements)
    /// that every purchase and every signed event would otherwise make, so the list is read again at most every
    /// ``keyListLifetime`` unless this process changes the keys or its revocation feed sees them change
    /// (``forgetKeyList()``). What a receipt is signed with is still checked inside the write that records it
    /// (``signer(_:at:_:)``).
    private let keyList = NIOLockedValueBox<(keys: [ReceiptPublicKey], readAt: ContinuousClock.Instant)?>(nil)
    private let keyListLifetime: Duration

    /// Opens the key store, generating the first key when there is none. With a
    /// key-encryption key, keys kept only in `keys/` are sealed into the ledger
    /// (a store becoming replicated), and the newest key is opened at once: a
    /// wrong key-encryption key fails here, not at the first purchase.
    init(dataDirectory: String, ledger: Ledger, nowMs: Int64, keyEncryptionKey: KeyEncryptionKey? = nil) throws {
        self.directory = (dataDirectory as NSString).appendingPathComponent("keys")
        self.ledger = ledger
        self.keyEncryptionKey = keyEncryptionKey
        // SQLite's read is a local one: always the ledger's present list.
        self.keyListLifetime = ledger.backendName == LedgerDialect.postgres.name ? .seconds(1) : .zero
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let existing = try ledger.publicKeys()
        if existing.isEmpty {
            _ = try rotate(nowMs: nowMs)
        } else if let keyEncryptionKey {
            for key in existing where try ledger.sealedPrivateKey(id: key.id) == nil {
                guard FileManager.default.fileExists(atPath: path(for: key.id)) else { continue }
                let signingKey = try loadFile(key)
                try ledger.sealPrivateKey(
                    id: key.id,
                    sealed: keyEncryptionKey.seal(Array(signingKey.privateKey.rawRepresentation), keyID: key.id))
            }
        }
        if let newest = try ledger.publicKeys().last {
            do {
                _ = try load(newest)
            } catch let error as StoreError where keyEncryptionKey == nil && error.message.contains("is missing") {
                throw StoreError(
                    .internalFailure,
                    error.message
                        + ": a ledger shared by store replicas needs their private keys sealed in it; give every replica the same --key-encryption-key-file"
                )
            }
        }
    }

    /// The key that signs new receipts: the newest one that is not retired (the newest
    /// key cannot be retired, see ``Ledger/retirePublicKey(id:atMs:)``: this never signs with a retired key).
    func activeKey() throws -> ReceiptSigningKey {
        let keys = try publicKeys()
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
    func signer(_ chosen: ReceiptSigningKey, at signedAtMs: Int64, _ db: any LedgerDatabase) throws -> ReceiptSigningKey
    {
        // The chosen key's row alone first (a purchase's outcome reads it ahead): nearly always it still signs.
        if let current = try db.signingKey(id: chosen.id),
            ReceiptPublicKey(
                id: current.id, rawRepresentation: current.publicKey, notBeforeMs: current.notBeforeMs,
                notAfterMs: current.notAfterMs
            ).isValid(atMs: signedAtMs)
        {
            return chosen
        }
        let keys = try Ledger.publicKeys(db)
        guard let newest = keys.last(where: { !$0.isRetired }) else {
            throw StoreError(.internalFailure, "every signing key is retired: add one with `kiosk-store keys rotate`")
        }
        return try load(newest, db)
    }

    /// The key that signs access tokens: the newest usable key that has been
    /// published for at least `settle` (content services learn a new key from
    /// the revocation feed within a moment, and verify tokens offline, never
    /// asking the store about a key they do not know), else the newest usable one.
    func accessTokenKey(nowMs: Int64, settle: Int64) throws -> ReceiptSigningKey {
        let usable = try publicKeys().filter { !$0.isRetired || $0.notAfterMs > nowMs }
        guard let chosen = usable.last(where: { $0.notBeforeMs <= nowMs - settle }) ?? usable.last else {
            throw StoreError(.internalFailure, "no signing key can sign now: add one with `kiosk-store keys rotate`")
        }
        let active = try activeKey()
        return chosen.id == active.id ? active : try load(chosen)
    }

    /// The ledger's public keys, oldest first: read at most every ``keyListLifetime`` (see ``keyList``).
    private func publicKeys() throws -> [ReceiptPublicKey] {
        if keyListLifetime > .zero, let list = keyList.withLockedValue({ $0 }),
            ContinuousClock.now - list.readAt < keyListLifetime
        {
            return list.keys
        }
        let keys = try ledger.publicKeys()
        if keyListLifetime > .zero { keyList.withLockedValue { $0 = (keys, .now) } }
        return keys
    }

    /// Reads the keys from the ledger again next time: they changed (here, or in another process).
    func forgetKeyList() { keyList.withLockedValue { $0 = nil } }

    /// Adds a new signing key; it signs from now on.
    func rotate(nowMs: Int64) throws -> ReceiptPublicKey {
        defer { forgetKeyList() }
        let signingKey = ReceiptSigningKey(privateKey: Curve25519.Signing.PrivateKey(), notBeforeMs: nowMs)
        if let keyEncryptionKey {
            try ledger.addPublicKey(
                signingKey.publicKey,
                sealed: keyEncryptionKey.seal(Array(signingKey.privateKey.rawRepresentation), keyID: signingKey.id))
        } else {
            try writePrivateKey(signingKey)
            try ledger.addPublicKey(signingKey.publicKey)
        }
        return signingKey.publicKey
    }

    private func path(for id: String) -> String {
        (directory as NSString).appendingPathComponent("\(id).ed25519")
    }

    /// The private half of `publicKey`: sealed in the ledger (read through `db` inside a transaction), else its file.
    private func load(_ publicKey: ReceiptPublicKey, _ db: (any LedgerDatabase)? = nil) throws -> ReceiptSigningKey {
        guard let sealed = try ledger.sealedPrivateKey(id: publicKey.id, db) else { return try loadFile(publicKey) }
        guard let keyEncryptionKey else {
            throw StoreError(
                .internalFailure,
                "signing key \(publicKey.id) is sealed in the ledger: give this store the key-encryption key of its replicas (--key-encryption-key-file)"
            )
        }
        let raw = try keyEncryptionKey.unseal(sealed, keyID: publicKey.id)
        let key = ReceiptSigningKey(
            privateKey: try Curve25519.Signing.PrivateKey(rawRepresentation: raw), notBeforeMs: publicKey.notBeforeMs)
        guard key.id == publicKey.id else {
            throw StoreError(
                .internalFailure, "the sealed private half of signing key \(publicKey.id) does not match it")
        }
        return key
    }

    private func loadFile(_ publicKey: ReceiptPublicKey) throws -> ReceiptSigningKey {
        let file = path(for: publicKey.id)
        guard let data = FileManager.default.contents(atPath: file) else {
            let hint =
                keyEncryptionKey == nil
                ? ""
                : " and it has no sealed copy in the ledger (start the store that made it once with the key-encryption key, to seal it)"
            throw StoreError(
                .internalFailure, "private key file \(file) for signing key \(publicKey.id) is missing\(hint)")
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
        guard fd >= 0 else {
            throw StoreError(.internalFailure, "cannot create private key file \(file): errno \(errno)")
        }
        defer { close(fd) }
        let bytes = Array(key.privateKey.rawRepresentation)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0 else {
            throw StoreError(.internalFailure, "cannot write private key file \(file): errno \(errno)")
        }
    }
}
