import KioskRPC
import KioskWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// What the test service's handlers report, so tests wait on events instead of sleeping.
final class Probe: Sendable {
    enum Event: Sendable, Equatable {
        case started(UInt64)
        case cancelled(UInt64)
        case finished(UInt64)
    }

    private struct State {
        var released = false
        var waiters: [Int: CheckedContinuation<Void, Error>] = [:]
        var cancelled: Set<Int> = []
        var nextWaiter = 0
        var gathered = 0
    }

    let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation
    private let state = NIOLockedValueBox(State())
    /// Messages a streaming handler managed to send.
    let sent = NIOLockedValueBox(0)
    /// For Gather: the number of concurrent calls that releases them all.
    let gatherTarget: Int

    init(gatherTarget: Int = 0) {
        (events, continuation) = AsyncStream.makeStream(of: Event.self)
        self.gatherTarget = gatherTarget
    }

    func emit(_ event: Event) { continuation.yield(event) }

    /// Waits for the first event matching `predicate`, skipping others.
    func wait(for predicate: (Event) -> Bool) async -> Event? {
        for await event in events where predicate(event) { return event }
        return nil
    }

    func wait(for event: Event) async {
        _ = await wait { $0 == event }
    }

    /// Lets every handler blocked in ``waitForRelease()`` go on.
    func release() {
        let waiters = state.withLockedValue { state in
            state.released = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Blocks until ``release()``; throws `CancellationError` when the task is cancelled.
    func waitForRelease() async throws {
        let id = state.withLockedValue { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                // The cancellation handler may have run before this point: check both under the lock.
                let outcome = state.withLockedValue { state -> Bool? in
                    if state.cancelled.contains(id) { return false }
                    if state.released { return true }
                    state.waiters[id] = continuation
                    return nil
                }
                switch outcome {
                case true?: continuation.resume()
                case false?: continuation.resume(throwing: CancellationError())
                case nil: break
                }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state in
                state.cancelled.insert(id)
                return state.waiters.removeValue(forKey: id)
            }
            waiter?.resume(throwing: CancellationError())
        }
        try Task.checkCancellation()
    }

    /// Counts one gathered call and releases all once the target is reached.
    func gather() {
        let count = state.withLockedValue { state in
            state.gathered += 1
            return state.gathered
        }
        if count == gatherTarget { release() }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String { "the test handler failed on purpose" }
}

/// A service exercising every shape of call, with `Ping` as the all-purpose message.
/// Checks only asynchronously (no authenticateInline): a token "ok" is worth 100.
struct AsyncOnly: RPCAuthenticator {
    func authenticate(_ context: ServerContext) async throws -> (any Sendable)? {
        await Task.yield()
        guard context.metadata.bearerToken == "ok" else { throw RPCError(.unauthenticated, "not ok") }
        return UInt64(100)
    }
}

struct TestService: RPCService {
    static let prefix = "/kiosk.test.v1.Test/"
    var serviceName: String { "kiosk.test.v1.Test" }
    let probe: Probe

    func register(in router: inout RPCRouter) {
        let probe = self.probe
        router.registerUnary(Self.prefix + "Echo", request: Ping.self, response: Ping.self) { request, _ in request }
        // Inline: answers at once, unless opaque is odd: then it suspends (as a key fetch would) and answers later.
        router.registerInlineUnary(Self.prefix + "InlineEcho", request: Ping.self, response: Ping.self) { request, _ in
            guard request.opaque % 2 == 1 else { return .response(request) }
            return .suspend {
                try await Task.sleep(for: .milliseconds(1))
                return Ping(opaque: request.opaque * 10)
            }
        }
        // Inline, then suspended until cancelled (a deadline, a CANCEL): emits .cancelled(opaque) when it is.
        router.registerInlineUnary(Self.prefix + "InlineHold", request: Ping.self, response: Ping.self) { request, _ in
            .suspend {
                do {
                    try await Task.sleep(for: .seconds(60))
                } catch {
                    probe.emit(.cancelled(request.opaque))
                    throw error
                }
                return request
            }
        }
        // Inline, behind an authenticator that can only check asynchronously: the call runs as a task.
        router.registerInlineUnary(
            Self.prefix + "InlineBehindAsync", request: Ping.self, response: Ping.self,
            authenticator: AsyncOnly()
        ) { request, context in
            .response(Ping(opaque: request.opaque + (context.principal as? UInt64 ?? 0)))
        }
        router.registerServerStreaming(Self.prefix + "Count", request: Ping.self, response: Ping.self) {
            request, writer, _ in
            for i in 0..<request.opaque { try await writer.send(Ping(opaque: i)) }
        }
        // Waits until released or cancelled, reporting both.
        router.registerUnary(Self.prefix + "Hold", request: Ping.self, response: Ping.self) { request, _ in
            probe.emit(.started(request.opaque))
            do {
                try await probe.waitForRelease()
            } catch {
                probe.emit(.cancelled(request.opaque))
                throw error
            }
            probe.emit(.finished(request.opaque))
            return request
        }
        // Answers only once `probe.gatherTarget` calls are in the handler at the same time.
        router.registerUnary(Self.prefix + "Gather", request: Ping.self, response: Ping.self) { request, _ in
            probe.gather()
            try await probe.waitForRelease()
            return request
        }
        router.registerUnary(Self.prefix + "Fail", request: Ping.self, response: Ping.self) { request, _ in
            if request.opaque == 0 {
                throw RPCError(.permissionDenied, "payments are not allowed", metadata: ["reason": "restricted"])
            }
            throw TestFailure()
        }
        // Echoes the caller's metadata and deadline back.
        router.registerUnary(Self.prefix + "Whoami", request: Ping.self, response: CallHeaders.self) { _, context in
            // timeout_ms: the milliseconds left before the deadline the handler sees (0: none).
            let left = context.deadline.map { ContinuousClock.now.duration(to: $0).components.seconds * 1000 + 1 }
            return CallHeaders(
                method: context.method, timeoutMs: left.map { UInt32(clamping: $0) } ?? 0, metadata: context.metadata)
        }
        // A large, compressible response of `opaque` bytes.
        router.registerUnary(Self.prefix + "Blob", request: MetadataEntry.self, response: MetadataEntry.self) {
            request, _ in
            MetadataEntry(key: request.key, value: String(repeating: "kiosk ", count: Int(request.value) ?? 0))
        }
        // Streams `opaque` messages of 64 KiB; reports .started when its handler returns and
        // .finished once the call's last frame has left for the socket (`whenFinished`).
        router.registerServerStreaming(Self.prefix + "Tail", request: Ping.self, response: MetadataEntry.self) {
            request, writer, _ in
            writer.whenFinished {
                probe.sent.withLockedValue { $0 = -1 }
                probe.emit(.finished(request.opaque))
            }
            let chunk = MetadataEntry(key: "chunk", binaryValue: Array(repeating: 0xCD, count: 64 * 1024))
            for _ in 0..<request.opaque { try await writer.send(chunk) }
            probe.emit(.started(request.opaque))
        }
        // Streams `opaque` messages of 64 KiB, counting those sent.
        router.registerServerStreaming(Self.prefix + "Flood", request: Ping.self, response: MetadataEntry.self) {
            request, writer, _ in
            let chunk = MetadataEntry(key: "chunk", binaryValue: Array(repeating: 0xAB, count: 64 * 1024))
            do {
                for _ in 0..<request.opaque {
                    try await writer.send(chunk)
                    probe.sent.withLockedValue { $0 += 1 }
                }
            } catch {
                probe.emit(.cancelled(request.opaque))
                throw error
            }
        }
    }
}

/// Starts a server with the test service on 127.0.0.1 and an ephemeral port,
/// runs `body` with a client, and shuts both down.
func withServer<R>(
    probe: Probe = Probe(),
    configuration: ServerConfiguration = ServerConfiguration(shutdownGracePeriod: .seconds(5)),
    clientConfiguration: ClientConfiguration = .defaults,
    _ body: (RPCServer, RPCClient) async throws -> R
) async throws -> R {
    let server = RPCServer(configuration: configuration, services: [TestService(probe: probe)])
    try await server.start()
    let port = try #require(server.port)
    let client = RPCClient(host: "127.0.0.1", port: port, configuration: clientConfiguration)
    do {
        let result = try await body(server, client)
        await client.close()
        await server.shutdown(gracePeriod: .seconds(5))
        return result
    } catch {
        await client.close()
        await server.shutdown(gracePeriod: .seconds(1))
        throw error
    }
}

/// A connection that writes raw bytes and reads raw frames, bypassing the client.
struct RawPeer {
    private var inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    private let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>
    private var buffer = ByteBuffer()

    /// Connects to 127.0.0.1:`port` and runs `body`; the connection closes afterwards.
    /// `receiveBuffer` sets SO_RCVBUF: a small one keeps the kernel from soaking up what the server sends.
    static func with<R: Sendable>(
        port: Int, receiveBuffer: Int? = nil, _ body: (inout RawPeer) async throws -> R
    ) async throws -> R {
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        if let receiveBuffer {
            bootstrap = bootstrap.channelOption(.socketOption(.so_rcvbuf), value: SocketOptionValue(receiveBuffer))
        }
        let channel =
            try await bootstrap
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        var result: R?
        do {
            try await channel.executeThenClose { inbound, outbound in
                var peer = RawPeer(inbound: inbound.makeAsyncIterator(), outbound: outbound)
                result = try await body(&peer)
            }
        } catch let error as ChannelError where error == .ioOnClosedChannel && result != nil {
            // The server closed first; closing our side found nothing left to close.
        }
        guard let result else { throw ChannelError.ioOnClosedChannel }
        return result
    }

    /// The connection's writer, for a task that writes while another reads.
    var writer: NIOAsyncChannelOutboundWriter<ByteBuffer> { outbound }

    func send(_ bytes: [UInt8]) async throws {
        try await outbound.write(ByteBuffer(bytes: bytes))
    }

    func send(_ frames: Frame...) async throws {
        var out = ByteBuffer()
        for frame in frames { frame.write(to: &out) }
        try await outbound.write(out)
    }

    /// The next frame, or nil when the server closed the connection.
    mutating func readFrame() async throws -> Frame? {
        while true {
            if let frame = try FrameDecoder.readFrame(from: &buffer, maximumPayloadSize: 1 << 30) { return frame }
            let next: ByteBuffer?
            do {
                next = try await inbound.next()
            } catch let error as ChannelError where error == .ioOnClosedChannel {
                next = nil  // closed under us by the server's close, as in readUntilClosed
            }
            guard var more = next else { return nil }
            buffer.writeBuffer(&more)
        }
    }

    /// Raw bytes until `count` are read, or fewer if the connection closes.
    mutating func readBytes(_ count: Int) async throws -> [UInt8] {
        while buffer.readableBytes < count {
            guard var more = try await inbound.next() else { break }
            buffer.writeBuffer(&more)
        }
        return buffer.readBytes(length: min(count, buffer.readableBytes)) ?? []
    }

    /// Returns once the server has closed the connection (any bytes before it are skipped);
    /// a server that never closes it runs into the suite's time limit.
    mutating func readUntilClosed() async throws {
        do {
            while try await inbound.next() != nil {}
        } catch let error as ChannelError where error == .ioOnClosedChannel {
            // Closed under us: that is what we were waiting for.
        }
    }
}

extension Frame {
    static func headers(_ callID: UInt32, _ method: String, timeoutMs: UInt32 = 0) -> Frame {
        Frame(type: .headers, callID: callID, message: CallHeaders(method: method, timeoutMs: timeoutMs))
    }

    static func request(_ callID: UInt32, _ message: some WireMessage) -> Frame {
        Frame(type: .message, flags: .endStream, callID: callID, message: message)
    }
}

let healthCheck = "/kiosk.rpc.v1.Health/Check"
