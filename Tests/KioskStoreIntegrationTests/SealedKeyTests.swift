import Foundation
import KioskAPI
import KioskStoreTestSupport
import Testing

@testable import KioskStore

/// Private signing keys sealed in the ledger with a key-encryption key (both backends).
@Suite(.timeLimit(.minutes(1))) struct SealedKeyTests {
    static func kek() throws -> KeyEncryptionKey { try KeyEncryptionKey(bytes: Array(0..<32)) }

    static func store(_ directory: String, kek: KeyEncryptionKey?) throws -> Store {
        var configuration = try StoreConfiguration(dataDirectory: directory, catalog: testCatalog).onTestLedger()
        configuration.keyEncryptionKey = kek
        return try Store(configuration: configuration)
    }

    static func keyFiles(_ directory: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory + "/keys")) ?? []
    }

    @Test func withAKeyEncryptionKeyThePrivateKeyIsSealedInTheLedgerAndNoFileIsWritten() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try Self.store(directory, kek: try Self.kek())
        let account = try store.createAccount()
        let receipt = try #require(
            try store.mintReceipts(accountID: account.id, productID: "filter.sepia", count: 1).first)
        #expect(Self.keyFiles(directory).isEmpty)
        let key = try #require(try store.publicKeys().last)
        let sealed = try #require(try store.ledger.sealedPrivateKey(id: key.id))
        // Another store process on the ledger — a fresh data dir, the same key-encryption key — signs with the same key.
        let other = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: other) }
        var replica = StoreConfiguration(dataDirectory: other, catalog: testCatalog)
        replica.database = store.configuration.database
        replica.keyEncryptionKey = try Self.kek()
        if !TestLedger.isPostgres { replica.dataDirectory = directory }  // SQLite: one file, so the same data dir
        let second = try Store(configuration: replica)
        let again = try #require(
            try second.mintReceipts(accountID: account.id, productID: "filter.sepia", count: 1).first)
        #expect(try ReceiptV1.SignedReceipt(serializedBytes: again).keyID == key.id)
        #expect(try await second.verifyReceipt(receipt).check.status == .valid)
        #expect(try await store.verifyReceipt(again).check.status == .valid)
        // The ledger holds no byte run of the raw private key (on SQLite: nowhere in its files).
        let raw = try second.keys.activeKey().privateKey.rawRepresentation
        #expect(!Self.contains(sealed, Array(raw)))
        if !TestLedger.isPostgres {
            for file in try FileManager.default.contentsOfDirectory(atPath: directory)
            where file.hasPrefix(Ledger.fileName) {
                let bytes = try Array(Data(contentsOf: URL(fileURLWithPath: directory + "/" + file)))
                #expect(!Self.contains(bytes, Array(raw)), "\(file) must not hold the raw private key")
            }
        }
    }

    @Test func aWrongOrMissingKeyEncryptionKeyFailsAtStartWithAClearError() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try Self.store(directory, kek: try Self.kek())
        let wrong = #expect(throws: StoreError.self) {
            try Self.store(directory, kek: try KeyEncryptionKey(bytes: Array(repeating: 7, count: 32)))
        }
        #expect(wrong?.message.contains("does not open with key-encryption key") == true)
        let missing = #expect(throws: StoreError.self) { try Self.store(directory, kek: nil) }
        #expect(missing?.message.contains("is sealed in the ledger") == true)
    }

    @Test func keysKeptInTheDataDirAreSealedWhenTheStoreIsGivenAKeyEncryptionKey() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let single = try Self.store(directory, kek: nil)
        let account = try single.createAccount()
        let receipt = try #require(
            try single.mintReceipts(accountID: account.id, productID: "filter.sepia", count: 1).first)
        let keyID = try #require(try single.publicKeys().last?.id)
        #expect(Self.keyFiles(directory) == ["\(keyID).ed25519"])
        #expect(try single.ledger.sealedPrivateKey(id: keyID) == nil)

        _ = try Self.store(directory, kek: try Self.kek())  // the step to replicas: the existing key is sealed
        #expect(try single.ledger.sealedPrivateKey(id: keyID) != nil)
        try FileManager.default.removeItem(atPath: directory + "/keys/\(keyID).ed25519")
        let replicated = try Self.store(directory, kek: try Self.kek())
        let signed = try #require(
            try replicated.mintReceipts(accountID: account.id, productID: "filter.sepia", count: 1).first)
        #expect(try ReceiptV1.SignedReceipt(serializedBytes: signed).keyID == keyID)
        #expect(try await replicated.verifyReceipt(receipt).check.status == .valid)
        // Rotation seals the new key too.
        let rotated = try replicated.rotateKeys()
        #expect(try replicated.ledger.sealedPrivateKey(id: rotated.id) != nil)
        #expect(Self.keyFiles(directory).isEmpty)
    }

    @Test func keyFilesAreReadStrictly() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/kek"
        let made = try KeyEncryptionKey.generate(toFile: path)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)
        #expect(try KeyEncryptionKey(contentsOfFile: path).fingerprint == made.fingerprint)
        #expect(throws: StoreError.self, "never replaces a key") { try KeyEncryptionKey.generate(toFile: path) }
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        let open = #expect(throws: StoreError.self) { try KeyEncryptionKey(contentsOfFile: path) }
        #expect(open?.message.contains("chmod 600") == true)
        for bad in ["", "abc", String(repeating: "g", count: 64), String(repeating: "a", count: 63)] {
            let file = directory + "/bad-\(bad.count)-\(bad.first.map(String.init) ?? "")"
            FileManager.default.createFile(
                atPath: file, contents: Data(bad.utf8), attributes: [.posixPermissions: 0o600])
            #expect(throws: StoreError.self, "\(bad.debugDescription) is not a key") {
                try KeyEncryptionKey(contentsOfFile: file)
            }
        }
        let raw = directory + "/raw"
        FileManager.default.createFile(
            atPath: raw, contents: Data(Array(0..<32) as [UInt8]), attributes: [.posixPermissions: 0o600])
        #expect(try KeyEncryptionKey(contentsOfFile: raw).fingerprint == (try Self.kek()).fingerprint)
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { haystack[$0..<$0 + needle.count].elementsEqual(needle) }
    }
}

/// `kiosk-store keys new-kek` and `--key-encryption-key-file`, as processes.
@Suite(.timeLimit(.minutes(1))) struct SealedKeyCommandLineTests {
    @Test func newKEKWritesAPrivateKeyFileThatCommandsSealWith() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let kek = directory + "/kek"
        let made = try await StoreProcess.run(["keys", "new-kek", kek])
        #expect(made.contains("wrote key-encryption key \(try KeyEncryptionKey(contentsOfFile: kek).fingerprint)"))
        let again = try await StoreProcess.outcome(["keys", "new-kek", kek])
        #expect(again.status != 0 && again.errors.contains("File exists"), "\(again.errors)")

        let data = directory + "/store"
        _ = try await StoreProcess.run(["account", "create", "--data-dir", data, "--key-encryption-key-file", kek])
        #expect(SealedKeyTests.keyFiles(data).isEmpty, "the private key is sealed in the ledger, not in keys/")
        let exported = try await StoreProcess.run([
            "keys", "export", "--data-dir", data, "--key-encryption-key-file", kek,
        ])
        #expect(exported.contains("ed25519-"))

        // Without it, or with a file open to others: refused with what to do.
        let without = try await StoreProcess.outcome(["keys", "rotate", "--data-dir", data])
        #expect(without.status != 0 && without.errors.contains("--key-encryption-key-file"), "\(without.errors)")
        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: kek)
        let open = try await StoreProcess.outcome([
            "keys", "rotate", "--data-dir", data, "--key-encryption-key-file", kek,
        ])
        #expect(open.status == 64 && open.errors.contains("chmod 600"), "\(open.errors)")
    }
}
