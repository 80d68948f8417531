import CDeflate
import CZlib
import NIOCore

/// zlib-format (RFC 1950) compression of whole messages, for MESSAGE frames
/// flagged COMPRESSED.
public enum Zlib {
    /// Compresses `input` into a zlib stream.
    /// - Parameter level: 0 (none) to 9 (best); -1 is zlib's default (6).
    public static func compress(
        _ input: ByteBuffer, level: Int32 = -1, allocator: ByteBufferAllocator = ByteBufferAllocator()
    ) -> ByteBuffer {
        let bound = Int(compressBound(uLong(input.readableBytes)))
        var output = allocator.buffer(capacity: bound)
        input.withUnsafeReadableBytes { source in
            var placeholder: UInt8 = 0
            output.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { destination in
                var destinationLength = uLongf(destination.count)
                let status = withUnsafeMutablePointer(to: &placeholder) { fallback in
                    compress2(
                        destination.baseAddress!.assumingMemoryBound(to: Bytef.self), &destinationLength,
                        source.baseAddress?.assumingMemoryBound(to: Bytef.self) ?? UnsafePointer(fallback),
                        uLong(source.count), level)
                }
                // compressBound guarantees room; Z_MEM_ERROR is an out-of-memory condition.
                precondition(status == Z_OK, "zlib compress2 failed with status \(status)")
                return Int(destinationLength)
            }
        }
        return output
    }

    /// The CRC-32 (zlib's, as in gzip and PNG) of `bytes`, computed by libdeflate.
    public static func crc32(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
        return libdeflate_crc32(0, base, bytes.count)
    }

    /// The CRC-32 of `bytes`.
    public static func crc32(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { crc32($0) }
    }

    /// Inflates a zlib stream, refusing output larger than `limit` bytes.
    ///
    /// - Throws: ``WireError`` `decompressionFailed` for a corrupt or truncated
    ///   stream, `decompressedTooLarge` past `limit`.
    public static func decompress(
        _ input: ByteBuffer, limit: Int, allocator: ByteBufferAllocator = ByteBufferAllocator()
    ) throws(WireError) -> ByteBuffer {
        var stream = z_stream()
        guard inflateInit_(&stream, zlibVersion(), Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw WireError(.decompressionFailed, "zlib could not start inflating")
        }
        defer { inflateEnd(&stream) }
        // One byte past the limit tells "exactly the limit" from "more"; clamped so Int.max cannot overflow.
        let ceiling = limit == .max ? limit : limit + 1
        var output = allocator.buffer(capacity: min(max(input.readableBytes * 4, 256), ceiling))
        let result: Result<Void, WireError> = input.withUnsafeReadableBytes { source in
            var placeholder: UInt8 = 0
            return withUnsafeMutablePointer(to: &placeholder) { fallback in
                stream.next_in =
                    UnsafeMutablePointer(mutating: source.baseAddress?.assumingMemoryBound(to: Bytef.self)) ?? fallback
                stream.avail_in = uInt(source.count)
                while true {
                    if output.readableBytes > limit {
                        return .failure(
                            WireError(
                                .decompressedTooLarge, "compressed message inflates beyond the limit of \(limit) bytes")
                        )
                    }
                    let chunk = min(
                        max(output.capacity - output.writerIndex, 16 * 1024), ceiling - output.readableBytes)
                    var status: Int32 = Z_OK
                    output.writeWithUnsafeMutableBytes(minimumWritableBytes: max(chunk, 1)) { destination in
                        stream.next_out = destination.baseAddress!.assumingMemoryBound(to: Bytef.self)
                        stream.avail_out = uInt(max(chunk, 1))
                        status = inflate(&stream, Z_NO_FLUSH)
                        return max(chunk, 1) - Int(stream.avail_out)
                    }
                    switch status {
                    case Z_STREAM_END:
                        if stream.avail_in != 0 {
                            return .failure(WireError(.decompressionFailed, "bytes follow the end of the zlib stream"))
                        }
                        if output.readableBytes > limit {
                            return .failure(
                                WireError(
                                    .decompressedTooLarge,
                                    "compressed message inflates beyond the limit of \(limit) bytes"))
                        }
                        return .success(())
                    case Z_OK:
                        continue
                    case Z_BUF_ERROR where stream.avail_in == 0:
                        return .failure(WireError(.decompressionFailed, "zlib stream is truncated"))
                    case Z_BUF_ERROR:
                        continue
                    default:
                        return .failure(WireError(.decompressionFailed, "zlib stream is corrupt (status \(status))"))
                    }
                }
            }
        }
        try result.get()
        return output
    }

    /// Inflates whole zlib streams of known size into memory the caller
    /// owns, with libdeflate (the same RFC 1950 format): no growing buffer,
    /// no copy. Not thread-safe: one per thread or task.
    public final class Inflater {
        private let decompressor: OpaquePointer

        public init() {
            guard let decompressor = libdeflate_alloc_decompressor() else {
                fatalError("libdeflate could not allocate a decompressor")
            }
            self.decompressor = decompressor
        }

        deinit { libdeflate_free_decompressor(decompressor) }

        /// Inflates the zlib stream `source` into `destination`, which must be
        /// exactly as long as the stream's content; its Adler-32 is checked.
        /// - Throws: ``WireError`` `decompressionFailed` for a corrupt or
        ///   truncated stream, bytes after its end, or content of another length.
        public func inflate(
            _ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer
        ) throws(WireError) {
            var placeholder: UInt8 = 0
            var consumed = 0
            var produced = 0
            let result = withUnsafeMutableBytes(of: &placeholder) { fallback in
                libdeflate_zlib_decompress_ex(
                    decompressor, source.baseAddress ?? UnsafeRawPointer(fallback.baseAddress!), source.count,
                    destination.baseAddress ?? fallback.baseAddress!, destination.count, &consumed, &produced)
            }
            switch result {
            case LIBDEFLATE_SUCCESS:
                guard consumed == source.count else {
                    throw WireError(.decompressionFailed, "bytes follow the end of the zlib stream")
                }
                guard produced == destination.count else {
                    throw WireError(
                        .decompressionFailed, "the zlib stream holds \(produced) bytes, not \(destination.count)")
                }
            case LIBDEFLATE_INSUFFICIENT_SPACE:
                throw WireError(.decompressionFailed, "the zlib stream holds more than \(destination.count) bytes")
            default:
                throw WireError(.decompressionFailed, "the zlib stream is corrupt or truncated")
            }
        }
    }
}
