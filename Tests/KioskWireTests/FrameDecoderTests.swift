import KioskWire
import NIOCore
import NIOEmbedded
import Testing

@Suite struct FrameDecoderTests {
    func makeChannel(expectPreface: Bool = true, limit: Int = Frame.defaultMaximumPayloadSize) throws -> EmbeddedChannel
    {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            ByteToMessageHandler(FrameDecoder(expectPreface: expectPreface, maximumPayloadSize: limit)))
        return channel
    }

    func bytes(_ values: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: values) }

    @Test func decodesFramesAfterPrefaceDeliveredByteByByte() throws {
        let channel = try makeChannel()
        var wire = ByteBuffer(bytes: Frame.preface)
        Frame(type: .ping, callID: 0, message: Ping(opaque: 7)).write(to: &wire)
        Frame(
            type: .message, flags: [.endStream, .compressed], callID: 0xDEAD_BEEF,
            payload: ByteBuffer(bytes: [1, 2, 3])
        ).write(to: &wire)
        for byte in wire.readableBytesView { try channel.writeInbound(bytes([byte])) }
        let ping = try #require(try channel.readInbound(as: Frame.self))
        #expect(ping.type == .ping && ping.callID == 0)
        #expect(try ping.decode(Ping.self) == Ping(opaque: 7))
        let message = try #require(try channel.readInbound(as: Frame.self))
        #expect(message.type == .message)
        #expect(message.flags == [.endStream, .compressed])
        #expect(message.callID == 0xDEAD_BEEF)
        #expect(Array(message.payload.readableBytesView) == [1, 2, 3])
        #expect(try channel.finish().isClean)
    }

    @Test func wireLayoutIsBigEndianWithLengthCountingTypeFlagsAndCallID() {
        var out = ByteBuffer()
        Frame(type: .message, flags: .endStream, callID: 0x0102_0304, payload: ByteBuffer(bytes: [0xAA])).write(
            to: &out)
        #expect(Array(out.readableBytesView) == [0, 0, 0, 7, 2, 1, 1, 2, 3, 4, 0xAA])
    }

    @Test func wrongPrefaceIsRefusedAtTheFirstWrongByte() throws {
        let channel = try makeChannel()
        #expect(throws: WireError(.badPreface, "connection did not start with the preface KIOSK/1\\n")) {
            try channel.writeInbound(ByteBuffer(string: "GET"))
        }
    }

    @Test func twoGiBLengthIsRefusedFromTheLengthAlone() throws {
        let channel = try makeChannel()
        try channel.writeInbound(ByteBuffer(bytes: Frame.preface))
        // Only the 4 LENGTH bytes: the decoder must refuse before waiting for (or allocating) the payload.
        let error = #expect(throws: WireError.self) { try channel.writeInbound(bytes([0x80, 0x00, 0x00, 0x00])) }
        #expect(error?.code == .frameTooLarge)
    }

    @Test func limitIsConfigurableAndInclusive() throws {
        var buffer = ByteBuffer()
        Frame(type: .message, callID: 1, payload: ByteBuffer(repeating: 0, count: 100)).write(to: &buffer)
        var copy = buffer
        #expect(try FrameDecoder.readFrame(from: &copy, maximumPayloadSize: 100)?.payload.readableBytes == 100)
        copy = buffer
        #expect(throws: WireError.self) { try FrameDecoder.readFrame(from: &copy, maximumPayloadSize: 99) }
    }

    @Test func lengthBelowSixIsRefused() throws {
        var buffer = ByteBuffer(bytes: [0, 0, 0, 5, 1, 0, 0, 0, 0])
        let error = #expect(throws: WireError.self) {
            try FrameDecoder.readFrame(from: &buffer, maximumPayloadSize: 100)
        }
        #expect(error?.code == .frameTooShort)
    }

    @Test func clientSideNeedsNoPreface() throws {
        let channel = try makeChannel(expectPreface: false)
        var wire = ByteBuffer()
        Frame(type: FrameType(rawValue: 200), callID: 9).write(to: &wire)
        try channel.writeInbound(wire)
        let frame = try #require(try channel.readInbound(as: Frame.self))
        #expect(frame.type.rawValue == 200 && frame.callID == 9 && frame.payload.readableBytes == 0)
    }

    @Test func writerWritesTheSameBytes() throws {
        let channel = EmbeddedChannel(handler: FrameWriter())
        let frame = Frame(type: .goAway, callID: 0, message: GoAway(lastCallID: 5, code: 8, message: "too big"))
        try channel.writeOutbound(frame)
        let written = try #require(try channel.readOutbound(as: ByteBuffer.self))
        var expected = ByteBuffer()
        frame.write(to: &expected)
        #expect(written == expected)
        #expect(try channel.finish().isClean)
    }

    /// The frames written between two flushes leave as one buffer; a payload
    /// over `passThroughSize` leaves in its own buffer, after the header.
    @Test func writerGathersFramesBetweenFlushes() throws {
        let channel = EmbeddedChannel(handler: FrameWriter())
        let small = [
            Frame(type: .headers, callID: 1, payload: ByteBuffer(string: "h")),
            Frame(type: .message, flags: .endStream, callID: 1, payload: ByteBuffer(string: "request")),
            Frame(type: .message, callID: 3),
        ]
        let big = Frame(
            type: .message, callID: 5, payload: ByteBuffer(repeating: 7, count: FrameWriter.passThroughSize + 1))
        let promises = (0..<4).map { _ in channel.eventLoop.makePromise(of: Void.self) }
        for (frame, promise) in zip(small, promises) { channel.write(frame, promise: promise) }
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)  // nothing before the flush
        channel.write(big, promise: promises[3])
        channel.flush()
        var expected = ByteBuffer()
        for frame in small { frame.write(to: &expected) }
        big.writeHeader(to: &expected)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == expected)
        let passed = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(passed == big.payload)
        // The same memory, not a copy.
        #expect(
            passed.withUnsafeReadableBytes { $0.baseAddress } == big.payload.withUnsafeReadableBytes { $0.baseAddress })
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)
        for promise in promises { try promise.futureResult.wait() }
        // What is written and never flushed fails its promise when the channel goes.
        let unflushed = channel.eventLoop.makePromise(of: Void.self)
        channel.write(small[0], promise: unflushed)
        _ = try? channel.finish()
        #expect(throws: ChannelError.self) { try unflushed.futureResult.wait() }
    }
}
