import Crypto
import Foundation
import KioskAPI

#if canImport(Glibc)
import Glibc
#endif

// Signing keys shared by store replicas: each private half is kept in the
// ledger sealed (ChaCha20-Poly1305) with a key-encryption key that every
// replica reads from a file, so a replica can sign with a key another one
// made, and a copy of the database alone signs nothing. The schema change
// (`signing_keys.sealed_private_key`), the key-encryption key, and the
// ledger's reads and writes of sealed keys.

/// The 256-bit key that seals the store's private signing keys in the ledger
/// (`kiosk-store … --key-encryption-key-file`, made by `kiosk-store keys new-kek`).
///
/// Give every replica of one store the same file. Without it the private keys
/// stay in each data dir's `keys/` (one store process per ledger).
public struct KeyEncryptionKey: Sendable {
    private let key: SymmetricKey
    /// The first 8 bytes of the key's SHA-256, in hex: names the key in logs and errors without revealing it.
    public let fingerprint: String

    /// Wraps 32 bytes.
    public init(bytes: [UInt8]) throws {
        guard bytes.count == 32 else {
            throw StoreError(.invalidRequest, "a key-encryption key is 32 bytes, not \(bytes.count)")
        }
        key = SymmetricKey(data: bytes)
        fingerprint = Array(SHA256.hash(data: Array("kiosk key-encryption key".utf8) + bytes)).prefix(8).map {
            String(format: "%02x", $0)
        }.joined()
    }

    /// Reads a key file: 64 hex digits (as `keys new-kek` writes) or 32 raw bytes. The file must be
    /// private to its owner (no group or other access), as an SSH private key must.
    /// - Throws: ``StoreError`` invalid request naming the file and what is wrong with it.
    public init(contentsOfFile path: String) throws {
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw StoreError(
                .invalidRequest, "cannot read the key-encryption key file \(path): \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & 0o077 == 0 else {
            throw StoreError(
                .invalidRequest,
                "the key-encryption key file \(path) is open to others (mode \(String(status.st_mode & 0o777, radix: 8))): chmod 600 it"
            )
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StoreError(.invalidRequest, "cannot read the key-encryption key file \(path)")
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text.count == 64, let bytes = Self.hex(text) {
            try self.init(bytes: bytes)
        } else if data.count == 32 {
            try self.init(bytes: Array(data))
        } else {
            throw StoreError(
                .invalidRequest,
                "the key-encryption key file \(path) holds neither 64 hex digits nor 32 bytes (make one with `kiosk-store keys new-kek FILE`)"
            )
        }
    }

    /// Writes a new random key to `path` as 64 hex digits, creating the file 0600 (never replacing one).
    @discardableResult
    public static func generate(toFile path: String) throws -> KeyEncryptionKey {
        var bytes = [UInt8](repeating: 0, count: 32)
        SymmetricKey(size: .bits256).withUnsafeBytes { bytes = Array($0) }
        let key = try KeyEncryptionKey(bytes: bytes)
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else {
            throw StoreError(.invalidRequest, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let text = Array((bytes.map { String(format: "%02x", $0) }.joined() + "\n").utf8)
        let written = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == text.count, fsync(fd) == 0 else {
            throw StoreError(.internalFailure, "cannot write \(path): \(String(cString: strerror(errno)))")
        }
        return key
    }

    /// `private` sealed for signing key `keyID` (its id is authenticated too: a sealed key moved to another row does not open).
    func seal(_ privateKey: [UInt8], keyID: String) throws -> [UInt8] {
        let box = try ChaChaPoly.seal(privateKey, using: key, authenticating: Array("kiosk signing key \(keyID)".utf8))
        return Self.format + Array(box.combined)
    }

    /// The private key sealed for `keyID`.
    /// - Throws: ``StoreError`` internal failure when it was sealed with another key-encryption key, or damaged.
    func unseal(_ sealed: [UInt8], keyID: String) throws -> [UInt8] {
        guard sealed.starts(with: Self.format) else {
            throw StoreError(
                .internalFailure, "the sealed private half of signing key \(keyID) is in an unknown format")
        }
        do {
            let box = try ChaChaPoly.SealedBox(combined: sealed.dropFirst(Self.format.count))
            return Array(try ChaChaPoly.open(box, using: key, authenticating: Array("kiosk signing key \(keyID)".utf8)))
        } catch {
            throw StoreError(
                .internalFailure,
                "signing key \(keyID) does not open with key-encryption key \(fingerprint): it was sealed with another one (give every replica the same --key-encryption-key-file), or the ledger's copy is damaged"
            )
        }
    }

    /// A version tag in front of every sealed key.
    private static let format = Array("KSK1".utf8)

    private static func hex(_ text: String) -> [UInt8]? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let h = Self.nibble(high), let l = Self.nibble(low) else { return nil }
            bytes.append(h << 4 | l)
        }
        return bytes
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
