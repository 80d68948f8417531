import KioskAPI
import KioskSigning

// Retiring a signing key: receipts it signed after the retirement time stop
// verifying (21003), those it signed before keep verifying. The schema change
// (`signing_keys.not_after_ms`), the ledger's checked update, and the store's
// entry point behind `kiosk-store keys retire`.

extension Ledger {
    /// v3: a retirement time per signing key (`not_after_ms`, 0 = not retired).

    /// Retires signing key `id` at `atMs`, checked and written in one transaction (so a `keys rotate`
    /// in another process cannot slip between the check and the write); returns the retired key.
    ///
    /// - Throws: ``StoreError`` not found for an unknown key id; invalid request for a time at or
    ///   before 0 or before the key's `not_before_ms`; conflict for the newest key (it is the one
    ///   that signs: rotate first) and for a retired key moved later (that would make receipts it
    ///   signed after its retirement verify again; an earlier time is allowed).
    /// - Parameter atMs: the time; nil: `now()` read once the write lock is held (BEGIN IMMEDIATE), so
    ///   every receipt committed before it was signed earlier (see ``KeyStore/signer(_:at:_:)``).
    func retirePublicKey(id: String, atMs requested: Int64?, now: () -> Int64) throws -> ReceiptPublicKey {
        var retired: ReceiptPublicKey?
        // The backend's write holds the ledger's write lock before the body runs (SQLite: BEGIN IMMEDIATE).
        try backend.write { db in
            let atMs = requested ?? now()
            let keys = try Self.publicKeys(db)
            guard let index = keys.firstIndex(where: { $0.id == id }) else {
                throw StoreError.notFound("no signing key \(id) (`kiosk-store keys export` lists the keys)")
            }
            var key = keys[index]
            guard index < keys.count - 1 else {
                throw StoreError(
                    .conflict,
                    "signing key \(id) is the active key (the newest; it signs every new receipt) and cannot be retired: "
                        + "rotate first (`kiosk-store keys rotate`), then retire it")
            }
            guard atMs > 0 else {
                throw StoreError.invalid("a retirement time must be after 1970-01-01T00:00:00Z (got \(atMs) ms)")
            }
            guard atMs >= key.notBeforeMs else {
                throw StoreError.invalid(
                    "cannot retire signing key \(id) at \(atMs) ms: it only started signing at \(key.notBeforeMs) ms (its not_before_ms)"
                )
            }
            if key.isRetired {
                if atMs == key.notAfterMs {
                    retired = key
                    return
                }
                guard atMs < key.notAfterMs else {
                    throw StoreError(
                        .conflict,
                        "signing key \(id) is already retired at \(key.notAfterMs) ms; a later time would make "
                            + "receipts it signed after that verify again")
                }
            }
            try db.retireSigningKey(id: id, atMs: atMs)
            try db.recordOperatorAction("retired signing key \(id) at \(atMs) ms", nowMs: now())
            try Self.announceChange(db)
            key.notAfterMs = atMs
            retired = key
        }
        guard let retired else { throw StoreError(.internalFailure, "retiring signing key \(id) did not complete") }
        return retired
    }
}

extension Store {
    /// Retires signing key `id`: receipts it signed after `atMs` (default: now) no longer verify
    /// (21003), those it signed before still do. This store's `VerifyReceipt` applies it at once.
    ///
    /// The active key (the newest) cannot be retired: rotate first (``rotateKeys()``), so that a
    /// newer key signs; a retired key never signs again.
    /// - Parameter atMs: the retirement time in milliseconds since 1970, not before the key's
    ///   `notBeforeMs`; a time in the past also refuses what the key signed since then.
    /// - Returns: the key, with its ``ReceiptPublicKey/notAfterMs``.
    /// - Throws: ``StoreError`` (see ``Ledger/retirePublicKey(id:atMs:)``).
    @discardableResult
    public func retireKey(id: String, atMs: Int64? = nil) throws -> ReceiptPublicKey {
        let key = try ledger.retirePublicKey(id: id, atMs: atMs, now: { self.now })
        keys.forgetKeyList()
        refreshVerifier()
        noteKeysChanged()
        return key
    }
}
