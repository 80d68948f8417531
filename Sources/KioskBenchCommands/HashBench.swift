import ArgumentParser
import Foundation
import KioskAPI

/// SHA-256 on one core, as a download hashes its chunks: each chunk alone
/// (one stream, BoringSSL's block function) against 8 chunks at once in the
/// vector registers' lanes (``SHA256Hasher/update(lanes:with:)``, what
/// `kiosk download` uses when the CPU has them). `KIOSK_SHA256_LANES=0` turns
/// the lanes off, as for a download.
struct HashBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sha256",
        abstract: "SHA-256 on one core: download chunks hashed one at a time against 8 at once in the vector lanes.")

    @Option(help: "Seconds measured for each way.") var duration = 1.0
    @Option(help: "Bytes per chunk (the content service's default: 256 KiB).") var chunk = 256 * 1024
    @Flag(help: "One JSON object instead of text.") var json = false

    func validate() throws {
        guard chunk >= 64, chunk <= 16 << 20 else { throw ValidationError("--chunk must be 64 bytes…16 MiB") }
        guard duration > 0 else { throw ValidationError("--duration must be positive") }
    }

    func run() throws {
        let total = 8 * chunk
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: total, alignment: 64)
        defer { memory.deallocate() }
        var seed: UInt64 = 42
        for index in 0..<total {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            memory[index] = UInt8(truncatingIfNeeded: seed >> 33)
        }
        let pieces = (0..<8).map {
            UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(memory)[($0 * chunk)..<(($0 + 1) * chunk)])
        }
        // The two ways alternate in 10 slices each (a VM's slow seconds fall on both); medians.
        let slices = 10
        let slice = Duration.milliseconds(max(Int64(duration * 1000) / Int64(slices), 1))
        /// MB/s of chunk bytes hashed by `body` (8 chunks a round) in one slice.
        func rate(_ body: () -> [SHA256Hasher]) -> Double {
            var rounds = 0
            let start = ContinuousClock.now
            repeat {
                _ = body()
                rounds += 1
            } while start.duration(to: .now) < slice
            let elapsed = start.duration(to: .now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            return Double(rounds * total) / seconds / 1e6
        }
        func oneAtATime() -> [SHA256Hasher] {
            pieces.map { piece in
                var hasher = SHA256Hasher()
                hasher.update(piece)
                return hasher
            }
        }
        func inLanes() -> [SHA256Hasher] {
            var hashers = [SHA256Hasher](repeating: SHA256Hasher(), count: 8)
            SHA256Hasher.update(lanes: &hashers, with: pieces)
            return hashers
        }
        guard oneAtATime().map({ $0.finalize() }) == inLanes().map({ $0.finalize() }) else {
            throw ValidationError("sha256: the lanes gave other digests than one stream")
        }
        var alones: [Double] = []
        var togethers: [Double] = []
        for _ in 0..<slices {
            alones.append(rate(oneAtATime))
            togethers.append(rate(inLanes))
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let alone = median(alones)
        let together = median(togethers)
        let ratio = (median(zip(togethers, alones).map { $0 / $1 }) * 100).rounded() / 100
        if json {
            let object: [String: Any] = [
                "benchmark": "sha256", "chunk_bytes": chunk, "lanes": SHA256Hasher.lanes,
                "implementation": SHA256Hasher.laneImplementation,
                "one_stream_mb_per_s": alone.rounded(), "lanes_mb_per_s": together.rounded(), "ratio": ratio,
            ]
            let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        } else {
            print("sha256 on one core, \(chunk)-byte chunks:")
            print("  one chunk at a time (BoringSSL): \(Int(alone)) MB/s")
            print("  8 at once in lanes (\(SHA256Hasher.laneImplementation)): \(Int(together)) MB/s (\(ratio)×)")
        }
    }
}
