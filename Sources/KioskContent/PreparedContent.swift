import Crypto
import Foundation
import KioskAPI
import KioskWire
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// One prepared chunk: where its stored bytes lie in `chunks.bin` and what they hold.
public struct PreparedChunk: Codable, Hashable, Sendable {
    /// Offset of the stored bytes in `chunks.bin`.
    public var storedOffset: UInt64
    /// Stored (possibly compressed) length.
    public var storedLength: UInt32
    /// Length of the original bytes.
    public var originalLength: UInt32
    /// True when the stored bytes are a zlib stream.
    public var compressed: Bool
    /// CRC-32 of the original bytes.
    public var crc32: UInt32
    /// SHA-256's chaining value after the file's bytes before this chunk, hex
    /// (`DownloadChunk.sha256_state`); empty when the chunk size is not a multiple of 64.
    public var sha256State: String
}

/// The index kept beside a prepared file, so a restart does not recompress.
struct PreparedIndex: Codable, Hashable {
    /// 2: chunks carry their SHA-256 state (a format-1 preparation is made again).
    static let format = 2
    var format: Int
    var productID: String
    var version: String
    var sourceSize: UInt64
    var sourceModifiedNs: Int64
    var chunkSize: UInt32
    var sha256: String
    var chunks: [PreparedChunk]
}

/// A hosted file split into fixed-size chunks, each zlib-compressed on its own
/// (stored raw when compression does not shrink it), ready to stream.
public final class PreparedContent: Sendable {
    /// The manifest entry.
    public let entry: ManifestEntry
    /// Size of the original file.
    public let originalSize: UInt64
    /// Bytes of original file per chunk (the last chunk may be shorter).
    public let chunkSize: UInt32
    /// SHA-256 of the original file.
    public let sha256: [UInt8]
    /// The chunks, in order.
    public let chunks: [PreparedChunk]
    /// Each chunk's SHA-256 state (32 bytes; empty when the chunk size is not a multiple of 64).
    public let chunkStates: [[UInt8]]
    /// True when this start reused an existing preparation.
    public let reused: Bool
    private let descriptor: Int32

    /// Sum of the stored chunk sizes.
    public var compressedSize: UInt64 { chunks.reduce(0) { $0 + UInt64($1.storedLength) } }

    private init(entry: ManifestEntry, index: PreparedIndex, digests: Digests, descriptor: Int32, reused: Bool) {
        self.entry = entry
        self.originalSize = index.sourceSize
        self.chunkSize = index.chunkSize
        self.sha256 = digests.sha256
        self.chunks = index.chunks
        self.chunkStates = digests.states
        self.reused = reused
        self.descriptor = descriptor
    }

    /// An index's SHA-256 and chunk states as bytes.
    private struct Digests {
        var sha256: [UInt8]
        var states: [[UInt8]]

        /// Nil unless the SHA-256 is 32 bytes of hex and the states are all 32 bytes or all empty
        /// (a damaged index, which is prepared again rather than served).
        init?(_ index: PreparedIndex) {
            guard let sha256 = [UInt8](hex: index.sha256), sha256.count == 32 else { return nil }
            var states: [[UInt8]] = []
            states.reserveCapacity(index.chunks.count)
            for chunk in index.chunks {
                guard let state = [UInt8](hex: chunk.sha256State), state.count == 32 || state.isEmpty else {
                    return nil
                }
                states.append(state)
            }
            guard states.allSatisfy(\.isEmpty) || states.allSatisfy({ !$0.isEmpty }) else { return nil }
            self.sha256 = sha256
            self.states = states
        }
    }

    deinit { close(descriptor) }

    /// The stored bytes of chunk `index`.
    public func storedBytes(of index: Int) throws -> [UInt8] {
        let chunk = chunks[index]
        var out = [UInt8](repeating: 0, count: Int(chunk.storedLength))
        var done = 0
        while done < out.count {
            let n = out.withUnsafeMutableBytes { buffer in
                pread(
                    descriptor, buffer.baseAddress! + done, buffer.count - done, off_t(chunk.storedOffset) + off_t(done)
                )
            }
            guard n > 0 else {
                throw ManifestError(
                    message: "cannot read prepared chunk \(index) of \(entry.productID): errno \(errno)")
            }
            done += n
        }
        return out
    }

    /// Prepares `entry` in `directory` (one sub-directory per product, named by
    /// the SHA-256 of its id), or reuses the preparation when the file, its
    /// version and the chunk size are unchanged.
    public static func prepare(
        _ entry: ManifestEntry, in directory: String, chunkSize: UInt32
    ) throws -> PreparedContent {
        let folder = (directory as NSString).appendingPathComponent(
            Array(SHA256.hash(data: Array(entry.productID.utf8))).hexString)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let indexPath = (folder as NSString).appendingPathComponent("index.json")
        let chunksPath = (folder as NSString).appendingPathComponent("chunks.bin")
        let (size, modifiedNs) = try fileStatus(entry.resolvedPath)

        if let data = FileManager.default.contents(atPath: indexPath),
            let index = try? JSONDecoder().decode(PreparedIndex.self, from: data),
            index.format == PreparedIndex.format, index.productID == entry.productID, index.version == entry.version,
            index.sourceSize == size, index.sourceModifiedNs == modifiedNs, index.chunkSize == chunkSize,
            let (storedSize, _) = try? fileStatus(chunksPath),
            storedSize == index.chunks.reduce(0, { $0 + UInt64($1.storedLength) }),
            let digests = Digests(index)
        {
            return PreparedContent(
                entry: entry, index: index, digests: digests, descriptor: try open(chunksPath), reused: true)
        }

        // Prepare into temporary files, then rename: a crash leaves the old preparation or none.
        let temporaryChunks = chunksPath + ".tmp"
        let temporaryIndex = indexPath + ".tmp"
        FileManager.default.createFile(atPath: temporaryChunks, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: temporaryChunks))
        let input = try FileHandle(forReadingFrom: URL(fileURLWithPath: entry.resolvedPath))
        // Hashed in the open: the state before each chunk is kept with it, so a client can hash chunks in parallel.
        var hasher = SHA256Hasher()
        let announcesStates = chunkSize % UInt32(SHA256Hasher.blockSize) == 0
        var chunks: [PreparedChunk] = []
        var storedOffset: UInt64 = 0
        var total: UInt64 = 0
        while let data = try input.read(upToCount: Int(chunkSize)), !data.isEmpty {
            let original = [UInt8](data)
            let state = announcesStates ? hasher.blockState?.bytes.hexString ?? "" : ""
            hasher.update(original)
            let crc = Zlib.crc32(original)
            let deflated = Zlib.compress(ByteBuffer(bytes: original))
            let useCompressed = deflated.readableBytes < original.count
            let stored = useCompressed ? Data(deflated.readableBytesView) : data
            try output.write(contentsOf: stored)
            chunks.append(
                PreparedChunk(
                    storedOffset: storedOffset, storedLength: UInt32(stored.count),
                    originalLength: UInt32(original.count), compressed: useCompressed, crc32: crc,
                    sha256State: state))
            storedOffset += UInt64(stored.count)
            total += UInt64(original.count)
        }
        try input.close()
        try output.synchronize()
        try output.close()
        let index = PreparedIndex(
            format: PreparedIndex.format, productID: entry.productID, version: entry.version, sourceSize: total,
            sourceModifiedNs: modifiedNs, chunkSize: chunkSize, sha256: hasher.finalize().hexString, chunks: chunks)
        try JSONEncoder().encode(index).write(to: URL(fileURLWithPath: temporaryIndex))
        // chunks first: an index never points at chunks it was not made with.
        _ = try? FileManager.default.removeItem(atPath: indexPath)
        try replace(chunksPath, with: temporaryChunks)
        try replace(indexPath, with: temporaryIndex)
        guard let digests = Digests(index) else {
            throw ManifestError(message: "the preparation of \(entry.productID) made a malformed index")
        }
        return PreparedContent(
            entry: entry, index: index, digests: digests, descriptor: try open(chunksPath), reused: false)
    }

    private static func replace(_ path: String, with temporary: String) throws {
        guard rename(temporary, path) == 0 else {
            throw ManifestError(message: "cannot rename \(temporary) to \(path): errno \(errno)")
        }
    }

    private static func open(_ path: String) throws -> Int32 {
        let fd = Glibc.open(path, O_RDONLY)
        guard fd >= 0 else { throw ManifestError(message: "cannot open \(path): errno \(errno)") }
        return fd
    }

    private static func fileStatus(_ path: String) throws -> (UInt64, Int64) {
        var info = stat()
        guard stat(path, &info) == 0 else { throw ManifestError(message: "cannot stat \(path): errno \(errno)") }
        return (UInt64(info.st_size), Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec))
    }
}
