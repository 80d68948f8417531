import KioskRPC
import KioskWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// Peers that never read: the server's outbound buffer stays under its
/// high-water mark (it stops reading, streaming handlers wait), and a server
/// that ignores flow control cannot make the client buffer without bound.
@Suite(.serialized, .timeLimit(.minutes(1))) struct BackpressureTests {
    static let highWater = 256 * 1024
    static let limits = ServerLimits(
        maximumPingStrikes: .max, minimumPingInterval: .zero, outboundHighWaterMark: highWater,
        outboundLowWaterMark: highWater / 2)
    /// Small kernel buffers on both ends, so the server meets its own high-water mark quickly
    /// instead of first filling megabytes of socket buffers (which are not its memory, but cost CPU to fill).
    static let configuration = ServerConfiguration(
        shutdownGracePeriod: .seconds(1),
        transportConfigurator: { channel in channel.setOption(.socketOption(.so_sndbuf), value: 16 * 1024) },
        limits: limits)

    /// Samples the server for `seconds`, returning the largest buffered-bytes reading seen.
    func largestBuffered(_ server: RPCServer, for seconds: Int) async throws -> Int {
        var largest = 0
        let end = ContinuousClock.now + .seconds(seconds)
        while ContinuousClock.now < end {
            largest = max(largest, await server.statistics().largestBufferedOutboundBytes)
            try await Task.sleep(for: .milliseconds(20))  // an observation window, not a wait for an event
        }
        return largest
    }

    @Test func streamToAPeerThatNeverReadsWaitsAtTheHighWaterMark() async throws {
        let probe = Probe()
        try await withServer(probe: probe, configuration: Self.configuration) { server, client in
            try await RawPeer.with(port: try #require(server.port), receiveBuffer: 16 * 1024) { peer in
                // 10,000 messages of 64 KiB (640 MiB), with the window opened wide: only writability can stop it.
                var opening = ByteBuffer(bytes: Frame.preface)
                Frame.headers(1, TestService.prefix + "Flood").write(to: &opening)
                Frame.request(1, Ping(opaque: 10_000)).write(to: &opening)
                Frame(type: .windowUpdate, callID: 1, message: WindowUpdate(increment: UInt32(Int32.max) - 1024 * 1024))
                    .write(to: &opening)
                try await peer.send(Array(opening.readableBytesView))
                // Never reads. Over two seconds the server may fill the kernel's buffers, then must wait.
                let largest = try await largestBuffered(server, for: 2)
                let sent = probe.sent.withLockedValue { $0 }
                #expect(
                    largest <= Self.highWater + 64 * 1024 + 64,
                    "the server buffered \(largest) bytes for a peer that does not read")
                #expect(
                    sent < 10_000 && sent * 64 * 1024 < 64 * 1024 * 1024, "the handler waited after \(sent) messages")
                // Other calls are served meanwhile.
                #expect(
                    try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 3), response: Ping.self)
                        .opaque == 3)
            }
        }
    }

    @Test func pingsNeverReadStopTheServerReading() async throws {
        // No PING strikes here: only backpressure stands between the flood and the server's memory.
        try await withServer(configuration: Self.configuration) { server, client in
            try await RawPeer.with(port: try #require(server.port), receiveBuffer: 16 * 1024) { peer in
                var batch = ByteBuffer(bytes: Frame.preface)
                try await peer.send(Array(batch.readableBytesView))
                batch.clear()
                let ping = Frame(type: .ping, callID: 0, message: Ping(opaque: .max))
                for _ in 0..<10_000 { ping.write(to: &batch) }
                let bytes = Array(batch.readableBytesView)
                let writer = peer.writer
                // Up to 2,000,000 PINGs (about 40 MB), for at most two seconds: the writes stall once the server stops reading.
                let sent = NIOLockedValueBox(0)
                await withTaskGroup(of: Void.self) { group in
                    group.addTask {
                        while sent.withLockedValue({ $0 }) < 2_000_000 {
                            guard (try? await writer.write(ByteBuffer(bytes: bytes))) != nil else { return }
                            sent.withLockedValue { $0 += 10_000 }
                        }
                    }
                    group.addTask { try? await Task.sleep(for: .seconds(2)) }
                    await group.next()
                    group.cancelAll()
                }
                let statistics = await server.statistics()
                // Over the mark by what was gathered when it was crossed (the handler hands the channel its
                // answers every 8 KiB and stops framing what it read once unwritable), not by a read's worth.
                #expect(
                    statistics.largestBufferedOutboundBytes <= Self.highWater + 64 * 1024,
                    "PONGs buffered for a peer that does not read: \(statistics.largestBufferedOutboundBytes) bytes")
                #expect(
                    try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 4), response: Ping.self)
                        .opaque == 4)
            }
        }
    }

    @Test func whatACallHoldsIsReleasedOnlyOnceItsBytesHaveLeft() async throws {
        let probe = Probe()
        // Default 1 MiB high-water mark: the handler queues its 4 × 64 KiB at once and returns.
        let configuration = ServerConfiguration(
            shutdownGracePeriod: .seconds(1),
            transportConfigurator: { channel in channel.setOption(.socketOption(.so_sndbuf), value: 16 * 1024) })
        try await withServer(probe: probe, configuration: configuration) { server, _ in
            try await RawPeer.with(port: try #require(server.port), receiveBuffer: 16 * 1024) { peer in
                var opening = ByteBuffer(bytes: Frame.preface)
                Frame.headers(1, TestService.prefix + "Tail").write(to: &opening)
                Frame.request(1, Ping(opaque: 4)).write(to: &opening)
                try await peer.send(Array(opening.readableBytesView))
                let events = probe.events.makeAsyncIterator()
                var iterator = events
                // The handler has returned: 256 KiB are queued, far more than the kernel's 32 KiB of buffers.
                #expect(await iterator.next() == .started(4))
                // Its TRAILERS are queued behind the 256 KiB (the reading below runs on the same loop, after them):
                // bytes are still waiting, and what the call held is not released yet.
                let waiting = await server.statistics()
                #expect(waiting.largestBufferedOutboundBytes > 0)
                #expect(probe.sent.withLockedValue { $0 } == 0, "released while its bytes were still queued")
                // Only now does the peer read; the release comes once the last frame is written.
                var messages = 0
                while let frame = try await peer.readFrame() {
                    if frame.type == .message { messages += 1 }
                    if frame.type == .trailers { break }
                }
                #expect(messages == 4)
                #expect(
                    await iterator.next() == .finished(4), "released once the last frame was written, and not before")
            }
        }
    }

    @Test func serverIgnoringTheWindowFailsTheClientsCall() async throws {
        // A "server" that answers any call with 2 MiB of MESSAGEs at once, past the client's 1 MiB window.
        let rogue = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Flooder()) }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let client = RPCClient(host: "127.0.0.1", port: try #require(rogue.localAddress?.port))
        // A unary call grants nothing back: the 17th 64 KiB MESSAGE is past the 1 MiB window.
        let error = await #expect(throws: RPCError.self) {
            try await client.unary(TestService.prefix + "Echo", request: Ping(opaque: 1), response: Ping.self)
        }
        #expect(error?.code == .internal)
        #expect(error?.message.contains("window") == true)
        await client.close()
        try await rogue.close()
    }
}

/// Once the client's request MESSAGE has arrived, answers it with 32 MESSAGEs
/// of 64 KiB on its call at once, ignoring flow control.
private final class Flooder: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private var received = ByteBuffer()
    private var flooded = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        received.writeBuffer(&bytes)
        guard !flooded else { return }
        // Skip the preface, then look for the request.
        if received.readerIndex == 0 {
            guard received.readableBytes >= Frame.preface.count else { return }
            received.moveReaderIndex(forwardBy: Frame.preface.count)
        }
        while let frame = try? FrameDecoder.readFrame(from: &received, maximumPayloadSize: 1 << 20) {
            guard frame.type == .message else { continue }
            flooded = true
            var out = ByteBuffer()
            for _ in 0..<32 {
                Frame(type: .message, callID: frame.callID, payload: ByteBuffer(repeating: 1, count: 64 * 1024)).write(
                    to: &out)
            }
            context.writeAndFlush(wrapOutboundOut(out), promise: nil)
            return
        }
    }
}
