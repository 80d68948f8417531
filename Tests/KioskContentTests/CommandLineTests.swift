import Foundation
import Testing

/// `kiosk-content` as a process.
@Suite(.timeLimit(.minutes(1))) struct ContentCommandLineTests {
    static var binary: String {
        let me =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent("kiosk-content").path
    }

    func run(_ arguments: [String]) async throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let text = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let data = errors.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(returning: String(decoding: data, as: UTF8.self))
            }
        }
        return (process.terminationStatus, text)
    }

    @Test func badManifestStopsStartUpWithAClearMessage() async throws {
        let directory = temporaryDirectory("cli")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try Data(#"{"products": [{"product_id": "book.swift", "file": "../../etc/passwd", "version": "1"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: directory + "/manifest.json"))
        // The credential from a file (a command line is readable by every user of the machine).
        let credentialFile = directory + "/credential"
        try Data("ksvc_t\n".utf8).write(to: URL(fileURLWithPath: credentialFile))
        let (status, message) = try await run([
            "serve", "--content-dir", directory, "--store-credential-file", credentialFile, "--port", "0",
        ])
        #expect(status != 0)
        #expect(
            message.contains(#"product "book.swift", field "file": must be a path inside the content directory"#),
            "\(message)")
    }

    @Test func anUnreadableCredentialFileIsNamed() async throws {
        let (status, message) = try await run([
            "serve", "--content-dir", "/nonexistent", "--store-credential-file", "/nonexistent/credential", "--port",
            "0",
        ])
        #expect(status != 0)
        #expect(message.contains("--store-credential-file /nonexistent/credential: cannot read it"), "\(message)")
    }

    @Test func missingStoreCredentialIsExplained() async throws {
        let (status, message) = try await run(["serve", "--content-dir", "/nonexistent", "--port", "0"])
        #expect(status != 0)
        #expect(message.contains("kiosk-store service create --role content"), "\(message)")
    }

    @Test func plaintextOffLoopbackIsRefusedAndProductionRefusesItEvenWhenAllowed() async throws {
        let directory = try makeContentDirectory(files: ["book.swift": [1, 2, 3]])
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Refused before anything is bound (the tests listen on loopback only).
        let (status, message) = try await run([
            "serve", "--content-dir", directory, "--store-credential", "ksvc_t", "--host", "0.0.0.0", "--port", "0",
        ])
        #expect(status != 0)
        #expect(message.contains("not a loopback address"), "\(message)")
        let (production, refusal) = try await run([
            "serve", "--content-dir", directory, "--store-credential", "ksvc_t", "--host", "0.0.0.0", "--port", "0",
            "--environment", "production", "--insecure-plaintext",
        ])
        #expect(production != 0)
        #expect(refusal.contains("a production content service serves TLS"), "\(refusal)")
    }
}
