import KioskWire
import Testing

/// Round trips of every envelope message through protobuf-c, and decoding of bad bytes.
@Suite struct MessageCodecTests {
    static let nonASCII = "Grüße, 世界 🛒 — ñ"
    static let long = String(repeating: "kiosk✓", count: 50_000)

    func roundTrip<M: WireMessage & Equatable>(_ message: M) throws {
        let bytes = message.serializedBytes()
        #expect(bytes.count == message.serializedSize)
        let decoded = try M(serializedBytes: bytes)
        #expect(decoded == message)
    }

    @Test func callHeadersRoundTrip() throws {
        try roundTrip(CallHeaders(method: ""))
        try roundTrip(CallHeaders(method: "/kiosk.rpc.v1.Health/Check", timeoutMs: 1500))
        try roundTrip(
            CallHeaders(
                method: Self.long, timeoutMs: .max,
                metadata: Metadata([
                    MetadataEntry(key: "authorization", value: "Bearer \(Self.nonASCII)"),
                    MetadataEntry(key: "idempotency-key", value: ""),
                    MetadataEntry(key: "trace-bin", binaryValue: Array(0...255)),
                    MetadataEntry(key: "", value: Self.long),
                ])))
    }

    /// Decoding carves the C message out of a stack arena of `decodingArenaSize`
    /// bytes and takes the rest from malloc: messages around, across and far
    /// past that size decode the same.
    @Test func messagesAcrossTheDecodingArenaRoundTrip() throws {
        for count in [0, 1, 10, 30, 31, 32, 33, 40, 100, 1_000] {
            let entries = (0..<count).map {
                MetadataEntry(key: "k\($0)", value: String(repeating: "v", count: 40 + $0 % 7))
            }
            try roundTrip(CallHeaders(method: "/kiosk.content.v1.Content/Authorize", metadata: Metadata(entries)))
        }
        for size in [
            decodingArenaSize - 200, decodingArenaSize - 1, decodingArenaSize, decodingArenaSize + 1,
            4 * decodingArenaSize,
        ] {
            try roundTrip(GoAway(lastCallID: 1, code: 2, message: String(repeating: "m", count: size)))
        }
    }

    @Test func callStatusRoundTrip() throws {
        try roundTrip(CallStatus(code: 0))
        try roundTrip(CallStatus(code: 16, message: Self.nonASCII, metadata: ["retry-after": "5"]))
        try roundTrip(
            CallStatus(
                code: .max, message: Self.long, metadata: Metadata([MetadataEntry(key: "x", binaryValue: [0, 0, 0])])))
    }

    @Test func smallMessagesRoundTrip() throws {
        for opaque in [UInt64(0), 1, 0x7F, 0x80, .max] { try roundTrip(Ping(opaque: opaque)) }
        try roundTrip(GoAway(lastCallID: 0, code: 0))
        try roundTrip(GoAway(lastCallID: .max, code: 13, message: Self.nonASCII))
        for increment in [UInt32(0), 1, 1 << 20, .max] { try roundTrip(WindowUpdate(increment: increment)) }
        try roundTrip(MetadataEntry(key: "", value: ""))
        try roundTrip(MetadataEntry(key: "k", value: Self.long, binaryValue: Array(repeating: 0xFF, count: 100_000)))
        try roundTrip(HealthCheckRequest())
        try roundTrip(HealthCheckRequest(service: Self.nonASCII))
        for status in [
            HealthCheckResponse.ServingStatus.unknown, .serving, .notServing, .serviceUnknown, .init(rawValue: 42),
        ] {
            try roundTrip(HealthCheckResponse(status: status))
        }
    }

    /// Encodings fixed by protobuf itself, so any other implementation agrees.
    @Test func knownEncodings() throws {
        #expect(HealthCheckResponse(status: .serving).serializedBytes() == [0x08, 0x01])
        #expect(HealthCheckRequest().serializedBytes() == [])
        #expect(CallStatus(code: 0).serializedBytes() == [])
        #expect(Ping(opaque: 300).serializedBytes() == [0x08, 0xAC, 0x02])
        #expect(WindowUpdate(increment: 1).serializedBytes() == [0x08, 0x01])
        #expect(
            GoAway(lastCallID: 3, code: 8, message: "x").serializedBytes() == [
                0x08, 0x03, 0x10, 0x08, 0x1A, 0x01, 0x78,
            ])
        #expect(
            CallHeaders(method: "/a", timeoutMs: 5, metadata: ["k": "v"]).serializedBytes()
                == [0x0A, 0x02, 0x2F, 0x61, 0x10, 0x05, 0x1A, 0x06, 0x0A, 0x01, 0x6B, 0x12, 0x01, 0x76])
        // Empty input is the empty message of every type.
        #expect(try Ping(serializedBytes: [UInt8]()) == Ping(opaque: 0))
    }

    @Test func truncatedEncodingsThrowOrDecode() throws {
        let full = CallHeaders(
            method: "/kiosk.rpc.v1.Health/Check", timeoutMs: 99, metadata: ["authorization": "Bearer t"]
        ).serializedBytes()
        // Where the fields end: one-byte keys, varints, and length-delimited fields shorter than 128 bytes.
        var boundaries: Set<Int> = [0]
        var index = 0
        while index < full.count {
            let key = full[index]
            index += 1
            if key & 7 == 0 {
                while full[index] & 0x80 != 0 { index += 1 }
                index += 1
            } else {
                try #require(key & 7 == 2 && full[index] < 0x80)
                index += 1 + Int(full[index])
            }
            boundaries.insert(index)
        }
        #expect(boundaries.count == 4, "method, timeout, one metadata entry")
        for length in 0..<full.count {
            // A prefix that ends between fields is a smaller message; one that ends inside a field is refused.
            let prefix = Array(full[..<length])
            if boundaries.contains(length) {
                #expect(throws: Never.self) { try CallHeaders(serializedBytes: prefix) }
            } else {
                #expect(throws: WireError.self, "prefix of \(length) bytes") {
                    try CallHeaders(serializedBytes: prefix)
                }
            }
        }
        #expect(throws: WireError.self) { try HealthCheckRequest(serializedBytes: [0x0A, 0x05, 0x61]) }
    }

    @Test func invalidUTF8IsRefused() {
        #expect(throws: WireError.self) { try HealthCheckRequest(serializedBytes: [0x0A, 0x02, 0xC3, 0x28]) }
    }

    @Test func randomBytesNeverCrash() {
        var generator = SplitMix64(seed: 0x5EED)
        var decoded = 0
        for _ in 0..<20_000 {
            let count = Int(generator.next() % 64)
            let bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            if (try? CallHeaders(serializedBytes: bytes)) != nil { decoded += 1 }
            _ = try? CallStatus(serializedBytes: bytes)
            _ = try? GoAway(serializedBytes: bytes)
            _ = try? Ping(serializedBytes: bytes)
            _ = try? WindowUpdate(serializedBytes: bytes)
            _ = try? MetadataEntry(serializedBytes: bytes)
            _ = try? HealthCheckResponse(serializedBytes: bytes)
        }
        #expect(decoded < 20_000)
    }
}

/// A small deterministic generator, so a failing random input can be replayed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
