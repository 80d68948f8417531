@testable import KioskRPC
import KioskWire
import Logging
import NIOCore
import NIOEmbedded
import Testing

/// ClientConnectionHandler on an EmbeddedChannel: the calls opened in one
/// pass of the event loop leave in one flush, after the pass.
@Suite struct ClientConnectionHandlerTests {
    @Test func callsOpenedInOnePassAreFlushedOnceAfterIt() throws {
        let channel = EmbeddedChannel()
        let handler = ClientConnectionHandler(target: "test", logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })) {}
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let bound = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        let headers = CallHeaders(method: "/t.S/Echo")
        for opaque in UInt64(1)...3 {
            let call = ClientCall(method: "/t.S/Echo", connection: bound, sink: .unary(ClientCall.UnarySlot()))
            var request = ByteBuffer()
            Ping(opaque: opaque).serialize(into: &request)
            handler.open(call, headers: headers, request: request, flags: [], timeout: nil)
        }
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil, "nothing is flushed while the pass that opened the calls runs")
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
}
