import KioskWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import KioskRPC

/// ClientConnectionHandler on an EmbeddedChannel: the calls opened in one
/// pass of the event loop leave in one flush, after the pass.
@Suite struct ClientConnectionHandlerTests {
    /// A connected channel with the handler, and the handler bound to its loop (as calls hold it).
    func makeChannel() throws -> (EmbeddedChannel, ClientConnectionHandler, NIOLoopBound<ClientConnectionHandler>) {
        let channel = EmbeddedChannel()
        let handler = ClientConnectionHandler(
            target: "test", logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
        ) {}
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return (channel, handler, NIOLoopBound(handler, eventLoop: channel.eventLoop))
    }

    @Test func callsOpenedInOnePassAreFlushedOnceAfterIt() throws {
        let (channel, handler, bound) = try makeChannel()
        let headers = CallHeaders(method: "/t.S/Echo")
        for opaque in UInt64(1)...3 {
            let call = ClientCall(method: "/t.S/Echo", connection: bound, sink: .unary(ClientCall.UnarySlot()))
            var request = ByteBuffer()
            Ping(opaque: opaque).serialize(into: &request)
            handler.open(call, headers: headers, request: request, flags: [], timeout: nil)
        }
        #expect(
            try channel.readOutbound(as: ByteBuffer.self) == nil,
            "nothing is flushed while the pass that opened the calls runs")
        channel.embeddedEventLoop.run()
        var frames: [Frame] = []
        var writes = 0
        while let bytes = try channel.readOutbound(as: ByteBuffer.self) {
            frames += try Frame.all(in: bytes)
            writes += 1
        }
        #expect(writes == 1, "the six frames leave in one write")
        #expect(frames.map(\.type) == [.headers, .message, .headers, .message, .headers, .message])
        #expect(frames.map(\.callID) == [1, 1, 2, 2, 3, 3])
        #expect(frames[0].payload == frames[2].payload, "the same HEADERS, encoded once")
        _ = try? channel.finish()
    }

    /// A call whose frames were never flushed when the connection died was never sent: it fails as
    /// unprocessed, which RPCClient retries on another connection; a flushed one may have run.
    @Test func aCallTheConnectionNeverFlushedFailsAsUnprocessed() throws {
        let (channel, handler, bound) = try makeChannel()
        let outcomes = NIOLockedValueBox<[UInt64: RPCError.Source]>([:])
        func open(_ opaque: UInt64) {
            let slot = ClientCall.UnarySlot(
                .callback { result in
                    if case .failure(let error as RPCError) = result {
                        outcomes.withLockedValue { $0[opaque] = error.source }
                    }
                })
            let call = ClientCall(method: "/t.S/Echo", connection: bound, sink: .unary(slot))
            var request = ByteBuffer()
            Ping(opaque: opaque).serialize(into: &request)
            handler.open(call, headers: CallHeaders(method: "/t.S/Echo"), request: request, flags: [], timeout: nil)
        }
        open(1)
        channel.embeddedEventLoop.run()
        #expect(try channel.readOutbound(as: ByteBuffer.self) != nil, "call 1 was flushed")
        open(2)
        try channel.close().wait()
        #expect(outcomes.withLockedValue { $0 } == [1: .connection, 2: .unprocessed])
        channel.embeddedEventLoop.run()
    }
}
