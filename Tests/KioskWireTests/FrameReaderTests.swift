import KioskWire
import NIOCore
import Testing

/// FrameReader, the framing inside the connection handlers: the same frames
/// however the bytes are cut, the same refusals as FrameDecoder, and no more
/// kept than an incomplete frame.
@Suite struct FrameReaderTests {
    static let limits = FrameLimits(maximumMessageSize: 1024, maximumHeadersSize: 256, maximumControlSize: 16)

    /// The preface and three frames, the way a client sends them.
    static let stream: ByteBuffer = {
        var wire = ByteBuffer(bytes: Frame.preface)
        Frame(
            type: .headers, callID: 1, message: CallHeaders(method: "/t.S/M", metadata: ["authorization": "Bearer x"])
        ).write(to: &wire)
        Frame(
            type: .message, flags: [.endStream, .compressed], callID: 1,
            payload: ByteBuffer(repeating: 0xAB, count: 900)
        ).write(to: &wire)
        Frame(type: .ping, callID: 0, message: Ping(opaque: 7)).write(to: &wire)
        return wire
    }()

    func read(
        _ cuts: [Int], from stream: ByteBuffer = Self.stream
    ) throws -> (events: [FrameReader.Event], buffered: [Int]) {
        var reader = FrameReader(expectPreface: true, limits: Self.limits)
        var events: [FrameReader.Event] = []
        var buffered: [Int] = []
        var offset = 0
        for end in cuts + [stream.readableBytes] where end > offset {
            reader.append(stream.getSlice(at: stream.readerIndex + offset, length: end - offset)!)
            offset = end
            while let event = try reader.next() { events.append(event) }
            buffered.append(reader.bufferedBytes)
        }
        return (events, buffered)
    }

    /// A reader whose bytes were all framed holds no storage: an idle connection does not keep
    /// its last read's buffer (up to 64 KiB; with a thousand connections, tens of MiB).
    @Test func anIdleReaderHoldsNoBuffer() throws {
        var reader = FrameReader(expectPreface: true, limits: Self.limits)
        var read = ByteBufferAllocator().buffer(capacity: 64 * 1024)
        read.writeImmutableBuffer(Self.stream)
        reader.append(read)
        var frames = 0
        while let event = try reader.next() { if case .frame = event { frames += 1 } }
        #expect(frames == 3)
        #expect(reader.heldCapacity == 0)
        // Part of a frame is kept, and only until the rest arrives.
        reader.append(Self.stream.getSlice(at: Self.stream.readerIndex + 8, length: 5)!)
        #expect(try reader.next() == nil)
        #expect(reader.bufferedBytes == 5 && reader.heldCapacity > 0)
    }

    @Test func theSameFramesHoweverTheBytesAreCut() throws {
        let whole = try read([])
        #expect(whole.events.count == 4)
        #expect(whole.events.first == .preface)
        guard case .frame(let message) = whole.events[2] else {
            Issue.record("no MESSAGE")
            return
        }
        #expect(message.type == .message && message.flags == [.endStream, .compressed] && message.callID == 1)
        #expect(message.payload.readableBytes == 900)
        #expect(whole.buffered == [0])
        let byteByByte = try read(Array(1..<Self.stream.readableBytes))
        #expect(byteByByte.events == whole.events)
        #expect(byteByByte.buffered.max() ?? 0 < Frame.headerSize + 900, "never more than the incomplete frame is kept")
        for seed in 0..<200 {
            var generator = SplitMix64(seed: UInt64(seed))
            let cuts = (0..<4).map { _ in Int(generator.next() % UInt64(Self.stream.readableBytes)) }.sorted()
            #expect(try read(cuts).events == whole.events, "cut at \(cuts)")
        }
    }

    @Test func refusesAsFrameDecoderDoesThenReadsNothingMore() throws {
        // A wrong byte in the preface: refused at once, before the other 7 arrive.
        var reader = FrameReader(expectPreface: true, limits: Self.limits)
        reader.append(ByteBuffer(bytes: [UInt8(ascii: "K"), UInt8(ascii: "X")]))
        #expect(throws: WireError(.badPreface, "connection did not start with the preface KIOSK/1\\n")) {
            try reader.next()
        }
        reader.append(Self.stream)
        #expect(try reader.next() == nil, "nothing is read after a refusal")
        // HEADERS over their limit: refused from the first 5 bytes, before the payload is waited for.
        reader = FrameReader(expectPreface: false, limits: Self.limits)
        reader.append(ByteBuffer(bytes: [0, 0, 1, 7, FrameType.headers.rawValue]))
        #expect(throws: WireError.self) { try reader.next() }
        // A LENGTH below the 6 bytes it counts.
        reader = FrameReader(expectPreface: false, limits: Self.limits)
        reader.append(ByteBuffer(bytes: [0, 0, 0, 5]))
        #expect(throws: WireError(.frameTooShort, "frame LENGTH 5 is below the minimum of 6")) { try reader.next() }
        #expect(reader.bufferedBytes == 0)
    }
}
