/// The receipt signing keys as the ledger keeps them.

/// A receipt signing key: its public half and validity window, and, when the store seals private keys with a
/// key-encryption key, its sealed private half (kept apart: listing keys never reads it).
public struct SigningKeyRecord: Hashable, Sendable {
    /// The key's id, named in every receipt it signs.
    public var id: String
    /// The raw Ed25519 public key.
    public var publicKey: [UInt8]
    /// Receipts signed before this are not its, milliseconds since 1970.
    public var notBeforeMs: Int64
    /// Retired: receipts it signed after this are refused, milliseconds since 1970; 0: not retired.
    public var notAfterMs: Int64

    public init(id: String, publicKey: [UInt8], notBeforeMs: Int64, notAfterMs: Int64 = 0) {
        self.id = id
        self.publicKey = publicKey
        self.notBeforeMs = notBeforeMs
        self.notAfterMs = notAfterMs
    }
}

/// The signing keys, in the order they were added (the last one signs).
public protocol KeyRepository {
    /// Every key, in the order added.
    func signingKeys() throws -> [SigningKeyRecord]
    /// Adds a key (nothing when one with its id exists), with its sealed private half or none (kept in a file).
    func addSigningKey(_ key: SigningKeyRecord, sealedPrivateKey: [UInt8]?) throws
    /// The sealed private half of key `id`; nil when it has none.
    func sealedPrivateKey(id: String) throws -> [UInt8]?
    /// Stores the sealed private half of a key that has none (one sealed already is kept).
    func sealPrivateKey(id: String, sealed: [UInt8]) throws
    /// Sets the key's retirement time.
    func retireSigningKey(id: String, atMs: Int64) throws
}

/// The revocation feed: refunded and revoked transactions, in the order they happened.
public protocol RevocationRepository {
    /// Revocations after `cursor`, oldest first, at most `limit`.
    func revocations(after cursor: UInt64, limit: Int) throws -> [RevocationRecord]
    /// The highest cursor (0: none).
    func latestRevocationCursor() throws -> UInt64
}
