import CProtobufC

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Owns every C allocation made while a Swift message is turned into a protoc-c
/// struct for packing, and frees them all at once.
///
/// An arena lives only inside ``WireMessage/withCMessage(_:)``: nothing it hands
/// out may be kept after that call returns.
public final class CArena {
    /// Small allocations are carved out of one block, so a message of a few
    /// fields costs one malloc, not one per field.
    private static let blockSize = 1024
    /// The first block (most messages need no other) and the rest.
    private var first: UnsafeMutableRawPointer?
    private var blocks: [UnsafeMutableRawPointer] = []
    private var current: UnsafeMutableRawPointer?
    private var used = 0

    @usableFromInline
    init() {}

    deinit {
        first?.deallocate()
        for block in blocks { block.deallocate() }
    }

    /// Allocates zeroed memory for `count` values of `T`.
    public func allocate<T>(_ type: T.Type, count: Int = 1) -> UnsafeMutablePointer<T> {
        let bytes = MemoryLayout<T>.stride * max(count, 1)
        let raw = allocateRaw(bytes, alignment: MemoryLayout<T>.alignment)
        raw.initializeMemory(as: UInt8.self, repeating: 0, count: bytes)
        return raw.bindMemory(to: T.self, capacity: max(count, 1))
    }

    private func allocateRaw(_ bytes: Int, alignment: Int) -> UnsafeMutableRawPointer {
        let alignment = max(alignment, 16)
        if bytes > Self.blockSize / 2 {
            let raw = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: alignment)
            blocks.append(raw)
            return raw
        }
        let start = (used + alignment - 1) & ~(alignment - 1)
        if let current, start + bytes <= Self.blockSize {
            used = start + bytes
            return current + start
        }
        let block = UnsafeMutableRawPointer.allocate(byteCount: Self.blockSize, alignment: 16)
        if first == nil { first = block } else { blocks.append(block) }
        current = block
        used = bytes
        return block
    }

    /// A NUL-terminated copy of `string`.
    ///
    /// A Swift string holding U+0000 is cut at that point, as C strings are.
    public func cString(_ string: String) -> UnsafeMutablePointer<CChar>? {
        var string = string
        return string.withUTF8 { utf8 in
            let out = allocate(CChar.self, count: utf8.count + 1)
            if let base = utf8.baseAddress {
                UnsafeMutableRawPointer(out).copyMemory(from: base, byteCount: utf8.count)
            }
            return out
        }
    }

    /// A protobuf-c `bytes` value holding a copy of `bytes`.
    public func binary(_ bytes: [UInt8]) -> ProtobufCBinaryData {
        guard !bytes.isEmpty else { return ProtobufCBinaryData(len: 0, data: nil) }
        let out = allocate(UInt8.self, count: bytes.count)
        out.initialize(from: bytes, count: bytes.count)
        return ProtobufCBinaryData(len: bytes.count, data: out)
    }

    /// A protobuf-c repeated string field: the count and an array of C strings.
    public func strings(_ elements: [String]) -> (Int, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) {
        guard !elements.isEmpty else { return (0, nil) }
        let array = allocate(UnsafeMutablePointer<CChar>?.self, count: elements.count)
        for (i, element) in elements.enumerated() {
            array[i] = cString(element)
        }
        return (elements.count, array)
    }

    /// A protobuf-c repeated scalar or enum field: the count and an array of the values.
    public func values<C>(_ elements: [C]) -> (Int, UnsafeMutablePointer<C>?) {
        guard !elements.isEmpty else { return (0, nil) }
        let array = allocate(C.self, count: elements.count)
        for (i, element) in elements.enumerated() { array[i] = element }
        return (elements.count, array)
    }

    /// A protobuf-c repeated message field: the count and an array of pointers to
    /// filled C structs, one per element.
    public func messages<M: WireMessage>(
        _ elements: [M]
    ) -> (Int, UnsafeMutablePointer<UnsafeMutablePointer<M.CStruct>?>?) {
        guard !elements.isEmpty else { return (0, nil) }
        let array = allocate(UnsafeMutablePointer<M.CStruct>?.self, count: elements.count)
        for (i, element) in elements.enumerated() {
            array[i] = element.makeCStruct(in: self)
        }
        return (elements.count, array)
    }
}

/// Helpers for reading fields out of an unpacked protoc-c struct.
public enum CField {
    /// A Swift string from a protobuf-c string field; invalid UTF-8 throws.
    public static func string(_ pointer: UnsafePointer<CChar>?, field: String) throws(WireError) -> String {
        guard let pointer else { return "" }
        guard let string = String(validatingCString: pointer) else {
            throw WireError(.malformedMessage, "field \(field) is not valid UTF-8")
        }
        return string
    }

    /// A protobuf-c string field's bytes read in place, not checked for UTF-8 (``isValidUTF8(_:)`` checks):
    /// valid only while its unpacked message is (inside ``WireMessage/withUnpacked(_:_:)``'s body).
    public static func utf8View(_ pointer: UnsafePointer<CChar>?) -> UnsafeRawBufferPointer {
        guard let pointer else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: pointer, count: strlen(pointer))
    }

    /// True when a protobuf-c string field is valid UTF-8, as ``string(_:field:)`` requires, without
    /// making a Swift string of it (a malloc for one over 15 bytes): ASCII is checked in place.
    public static func isValidUTF8(_ pointer: UnsafePointer<CChar>?) -> Bool {
        guard let pointer else { return true }
        var next = pointer
        while next.pointee != 0 {
            guard UInt8(bitPattern: next.pointee) < 0x80 else { return String(validatingCString: pointer) != nil }
            next += 1
        }
        return true
    }

    /// True when two byte ranges hold the same bytes.
    public static func sameBytes(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Bool {
        left.count == right.count && (left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0)
    }

    /// A protobuf-c `bytes` field read in place: valid only while its unpacked message is
    /// (inside ``WireMessage/withUnpacked(_:_:)``'s body).
    public static func view(_ data: ProtobufCBinaryData) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: data.len > 0 ? data.data : nil, count: data.len)
    }

    /// A copy of a protobuf-c `bytes` field.
    public static func bytes(_ data: ProtobufCBinaryData) -> [UInt8] {
        guard data.len > 0, let base = data.data else { return [] }
        return Array(UnsafeBufferPointer(start: base, count: data.len))
    }

    /// A Swift value from a protobuf-c message field; nil when the field is absent.
    public static func message<M: WireMessage>(
        _ pointer: UnsafeMutablePointer<M.CStruct>?, as type: M.Type
    ) throws(WireError) -> M? {
        guard let pointer else { return nil }
        return try M(cStruct: pointer.pointee)
    }

    /// The elements of a protobuf-c repeated string field.
    public static func strings(
        _ count: Int, _ array: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?, field: String
    ) throws(WireError) -> [String] {
        guard count > 0 else { return [] }
        guard let array else { throw WireError(.malformedMessage, "field \(field) has no elements") }
        var out: [String] = []
        out.reserveCapacity(count)
        for i in 0..<count { out.append(try string(array[i], field: field)) }
        return out
    }

    /// The elements of a protobuf-c repeated scalar or enum field, converted one by one.
    public static func values<C, T>(
        _ count: Int, _ array: UnsafeMutablePointer<C>?, field: String, _ convert: (C) -> T
    ) throws(WireError) -> [T] {
        guard count > 0 else { return [] }
        guard let array else { throw WireError(.malformedMessage, "field \(field) has no elements") }
        return (0..<count).map { convert(array[$0]) }
    }

    /// The elements of a protobuf-c repeated message field, converted one by one.
    public static func messages<M: WireMessage>(
        _ count: Int, _ array: UnsafeMutablePointer<UnsafeMutablePointer<M.CStruct>?>?, as type: M.Type, field: String
    ) throws(WireError) -> [M] {
        guard count > 0 else { return [] }
        guard let array else { throw WireError(.malformedMessage, "field \(field) has no elements") }
        var out: [M] = []
        out.reserveCapacity(count)
        for i in 0..<count {
            guard let element = array[i] else {
                throw WireError(.malformedMessage, "field \(field) has a null element")
            }
            out.append(try M(cStruct: element.pointee))
        }
        return out
    }
}
