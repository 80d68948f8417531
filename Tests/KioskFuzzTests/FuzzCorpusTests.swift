import Foundation
import KioskFuzzing
import Testing

/// The committed fuzz corpus (Scripts/fuzz-corpus), replayed through the fuzz
/// target's function in an ordinary build: every input the fuzzer once
/// crashed on stays fixed.
@Suite struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Scripts/fuzz-corpus").path

    @Test func corpusHasTheSeeds() throws {
        let names = Set(try corpusFiles([Self.corpus]).map { URL(fileURLWithPath: $0).lastPathComponent })
        for seed in [
            "health-check", "ping-pong", "window-update", "goaway", "verify-receipt-compressed",
            "truncated-frame", "oversized-length", "bad-preface", "unknown-type",
        ] {
            #expect(names.contains(seed), "seed \(seed) is missing from \(Self.corpus)")
        }
    }

    @Test(arguments: try! corpusFiles([FuzzCorpusTests.corpus]).map { URL(fileURLWithPath: $0).lastPathComponent })
    func replaysWithoutCrashing(_ name: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.corpus).appendingPathComponent(name))
        fuzzOne([UInt8](data))
    }

    /// Every prefix of the health check, and every single-byte corruption of
    /// it: cheap neighbours of the seeds, run on every test.
    @Test func prefixesAndFlipsOfTheHealthCheck() throws {
        let seed = [UInt8](
            try Data(contentsOf: URL(fileURLWithPath: Self.corpus).appendingPathComponent("health-check")))
        for end in 0...seed.count { fuzzOne(Array(seed[..<end])) }
        for index in seed.indices {
            for value: UInt8 in [0x00, 0x7F, 0x80, 0xFF] {
                var mutated = seed
                mutated[index] = value
                fuzzOne(mutated)
            }
        }
    }

    /// The replayer binary the package builds: `kiosk-fuzz Scripts/fuzz-corpus` exits 0.
    @Test func replayerBinaryRunsTheCorpus() throws {
        let me =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let binary = URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent("kiosk-fuzz")
        try #require(FileManager.default.isExecutableFile(atPath: binary.path), "no kiosk-fuzz next to the test bundle")
        let process = Process()
        process.executableURL = binary
        process.arguments = [Self.corpus]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let count = try corpusFiles([Self.corpus]).count
        #expect(String(decoding: data, as: UTF8.self).contains("replayed \(count) inputs"))
    }
}
