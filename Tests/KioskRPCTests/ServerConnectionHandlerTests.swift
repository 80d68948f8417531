import KioskWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import KioskRPC

/// ServerConnectionHandler on an EmbeddedChannel: every timer on a manual
/// clock (no sleeps), every refusal seen as the frames written.
@Suite struct ServerConnectionHandlerTests {
    static let limits = ServerLimits(
        maximumConcurrentCalls: 2, requestTimeout: .seconds(10), handshakeTimeout: .seconds(5),
        idleTimeout: .seconds(60),
        maximumPingStrikes: 2, minimumPingInterval: .seconds(5))

    struct Locked: RPCAuthenticator {
        func authenticate(_ context: ServerContext) async throws -> (any Sendable)? { nil }
    }

    /// Refuses inline, checking nothing else: a token "ok" passes, anything else is 16.
    struct Gatekeeper: RPCAuthenticator {
        func authenticate(_ context: ServerContext) async throws -> (any Sendable)? { nil }
        func authenticateInline(_ context: ServerContext) throws -> InlineAuthentication {
            guard context.metadata.bearerToken == "ok" else { throw RPCError(.unauthenticated, "not ok") }
            return .principal("gatekeeper")
        }
    }

    /// Passes tokens starting "ok" (the principal is the token), counting its checks; a principal it
    /// returned still holds while `holds` is true.
    final class Counting: RPCAuthenticator, @unchecked Sendable {
        private let lock = NIOLock()
        private var _checks = 0
        private var _holds = true
        private var _refuses = false
        var checks: Int { lock.withLock { _checks } }
        var holds: Bool {
            get { lock.withLock { _holds } }
            set { lock.withLock { _holds = newValue } }
        }
        /// Refuses every token while set.
        var refuses: Bool {
            get { lock.withLock { _refuses } }
            set { lock.withLock { _refuses = newValue } }
        }
        func authenticate(_ context: ServerContext) async throws -> (any Sendable)? { nil }
        func authenticateInline(_ context: ServerContext) throws -> InlineAuthentication {
            lock.withLock { _checks += 1 }
            guard !refuses, let token = context.metadata.bearerToken, token.hasPrefix("ok") else {
                throw RPCError(.unauthenticated, "not ok")
            }
            return .principal(token)
        }
        func stillHolds(_ principal: (any Sendable)?) -> Bool { principal is String && holds }
    }

    func makeChannel(
        limits: ServerLimits = Self.limits, preface: Bool = true, shutdown: ShutdownFlag = ShutdownFlag(),
        runsHandlersOnEventLoop: Bool = false, counting: Counting = Counting()
    ) throws -> EmbeddedChannel {
        var router = RPCRouter()
        router.registerUnary("/t.S/Echo", request: Ping.self, response: Ping.self) { request, _ in request }
        router.registerUnary("/t.S/Locked", request: Ping.self, response: Ping.self, authenticator: Locked()) {
            request, _ in request
        }
        router.registerInlineUnary("/t.S/Inline", request: Ping.self, response: Ping.self, authenticator: Gatekeeper())
        { request, context in
            guard request.opaque != 7 else { throw RPCError(.permissionDenied, "seven is refused") }
            return .response(Ping(opaque: request.opaque + (context.principal as? String == "gatekeeper" ? 1000 : 0)))
        }
        router.registerInlineUnary("/t.S/Counted", request: Ping.self, response: Ping.self, authenticator: counting) {
            request, context in
            let principal = context.principal as? String
            return .response(
                Ping(opaque: request.opaque + (principal == "ok-a" ? 1000 : principal == "ok-b" ? 2000 : 0)))
        }
        router.registerInlineUnary("/t.S/Later", request: Ping.self, response: Ping.self, authenticator: Gatekeeper()) {
            request, _ in
            .suspend { Ping(opaque: request.opaque + 1) }
        }
        router.registerInlineUnary(
            "/t.S/LockedInline", request: Ping.self, response: Ping.self, authenticator: Locked()
        ) { request, _ in
            .response(Ping(opaque: request.opaque + 2))
        }
        let handler = ServerConnectionHandler(
            router: router, limits: limits, maximumMessageSize: 64 * 1024,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
            shutdown: shutdown, runsHandlersOnEventLoop: runsHandlersOnEventLoop)
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        if preface {
            channel.pipeline.fireChannelRead(ByteBuffer(bytes: Frame.preface))
            channel.pipeline.fireChannelReadComplete()
        }
        return channel
    }

    func headers(
        _ callID: UInt32, _ method: String = "/t.S/Echo", timeoutMs: UInt32 = 0, metadata: Metadata = Metadata()
    ) -> Frame {
        Frame(
            type: .headers, callID: callID,
            message: CallHeaders(method: method, timeoutMs: timeoutMs, metadata: metadata))
    }

    func written(_ channel: EmbeddedChannel) throws -> [Frame] {
        var frames: [Frame] = []
        while let bytes = try channel.readOutbound(as: ByteBuffer.self) { frames += try Frame.all(in: bytes) }
        return frames
    }

    func status(_ frame: Frame?) throws -> CallStatus? {
        guard let frame, frame.type == .trailers else { return nil }
        return try frame.decode(CallStatus.self)
    }

    /// Inline calls run inside the read that brought them, with no task, and
    /// their answers leave with one flush once the read's last frame is
    /// handled, as a bare NIO server's do (without waiting for NIO's read loop
    /// to end); statuses thrown by the handler or the authenticator end the
    /// call like a task's would.
    @Test func inlineCallsOfOneReadAreAnsweredTogetherAtTheEndOfTheRead() throws {
        let channel = try makeChannel(limits: ServerLimits(maximumConcurrentCalls: 10), runsHandlersOnEventLoop: true)
        let bearer: Metadata = ["authorization": "Bearer ok"]
        var read = ByteBuffer()
        for (id, opaque) in [(1, 1), (3, 7), (5, 5)] as [(UInt32, UInt64)] {
            read.writeImmutableBuffer(headers(id, "/t.S/Inline", timeoutMs: 1000, metadata: bearer).wire)
            read.writeImmutableBuffer(
                Frame(type: .message, flags: .endStream, callID: id, message: Ping(opaque: opaque)).wire)
        }
        read.writeImmutableBuffer(headers(9, "/t.S/Inline", metadata: ["authorization": "Bearer no"]).wire)
        // The last request split across two reads: the first read's answers leave when its whole frames are handled.
        var last = Frame(type: .message, flags: .endStream, callID: 9, message: Ping(opaque: 2)).wire
        read.writeImmutableBuffer(last.readSlice(length: 5)!)
        channel.pipeline.fireChannelRead(read)
        var writes: [ByteBuffer] = []
        while let bytes = try channel.readOutbound(as: ByteBuffer.self) { writes.append(bytes) }
        #expect(writes.count == 1, "one write for the read's answers")
        #expect(try writes.flatMap { try Frame.all(in: $0) }.map(\.callID) == [1, 1, 3, 5, 5])
        channel.pipeline.fireChannelRead(last)
        let split = try written(channel)
        #expect(split.map(\.callID) == [9], "flushed at once: the read holds nothing more")
        channel.pipeline.fireChannelReadComplete()
        #expect(try written(channel).isEmpty)
        let frames = try writes.flatMap { try Frame.all(in: $0) } + split
        #expect(frames.map(\.callID) == [1, 1, 3, 5, 5, 9])
        #expect(try frames[0].decode(Ping.self).opaque == 1001, "the authenticator's principal reached the handler")
        #expect(try status(frames[1])?.code == 0)
        #expect(
            try status(frames[2]).map { ($0.code, $0.message) } ?? (0, "") == (
                StatusCode.permissionDenied.rawValue, "seven is refused"
            ))
        #expect(try frames[3].decode(Ping.self).opaque == 1005)
        #expect(
            try status(frames[5]).map { ($0.code, $0.message) } ?? (0, "") == (
                StatusCode.unauthenticated.rawValue, "not ok"
            ))
        // HEADERS over 2 KiB are not remembered (a peer cannot make a connection keep 16 KiB), and still served.
        let handler = try channel.pipeline.syncOperations.handler(type: ServerConnectionHandler.self)
        let remembered = handler.rememberedHeadersBytes
        #expect(remembered > 0 && remembered < 200, "the small HEADERS before were remembered")
        var big = bearer
        big.add("x-padding", String(repeating: "p", count: 3000))
        for id in [11, 13] as [UInt32] {
            channel.pipeline.fireChannelRead(headers(id, "/t.S/Inline", metadata: big).wire)
            channel.pipeline.fireChannelRead(
                Frame(type: .message, flags: .endStream, callID: id, message: Ping(opaque: 6)).wire)
        }
        channel.pipeline.fireChannelReadComplete()
        let bigFrames = try written(channel)
        #expect(bigFrames.map(\.callID) == [11, 11, 13, 13])
        #expect(try bigFrames[2].decode(Ping.self).opaque == 1006)
        #expect(handler.rememberedHeadersBytes == remembered, "HEADERS over 2 KiB are not kept")
        // No deadline timer was left behind for the calls answered in the read: nothing fires later.
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(try written(channel).isEmpty)
        _ = try? channel.finish()
    }

    /// A connection's next call with byte-identical HEADERS takes the caller the authenticator found for
    /// the previous one while the authenticator says it still holds; other HEADERS, or a principal that no
    /// longer holds, are checked again; a call whose HEADERS are no longer the remembered ones (another
    /// call's came in between) is checked and leaves nothing to reuse.
    @Test func sameHeadersReuseTheCallerWhileItHolds() throws {
        let counting = Counting()
        let channel = try makeChannel(
            limits: ServerLimits(maximumConcurrentCalls: 10), runsHandlersOnEventLoop: true, counting: counting)
        func call(_ id: UInt32, _ token: String, _ opaque: UInt64) {
            channel.pipeline.fireChannelRead(
                headers(id, "/t.S/Counted", metadata: ["authorization": "Bearer \(token)"]).wire)
            channel.pipeline.fireChannelRead(
                Frame(type: .message, flags: .endStream, callID: id, message: Ping(opaque: opaque)).wire)
        }
        func answers() throws -> [UInt64] {
            channel.pipeline.fireChannelReadComplete()
            return try written(channel).filter { $0.type == .message }.map { try $0.decode(Ping.self).opaque }
        }
        for id in [1, 3, 5] as [UInt32] { call(id, "ok-a", 1) }
        #expect(try answers() == [1001, 1001, 1001])
        #expect(counting.checks == 1, "checked once, then reused for the same HEADERS")
        call(7, "bad", 1)
        call(9, "ok-a", 2)
        #expect(try answers() == [1002], "call 7 refused, call 9 answered")
        #expect(counting.checks == 3, "other HEADERS in between: checked again")
        counting.holds = false
        call(11, "ok-a", 3)
        call(13, "ok-a", 4)
        #expect(try answers() == [1003, 1004])
        #expect(counting.checks == 5, "a principal that no longer holds is not reused")
        counting.holds = true
        // Pipelined: HEADERS of 15 (ok-a) then 17 (ok-b), then both requests: 15 is checked as itself, and
        // 19 with ok-b's HEADERS reuses the caller found for 17, not 15's.
        channel.pipeline.fireChannelRead(headers(15, "/t.S/Counted", metadata: ["authorization": "Bearer ok-a"]).wire)
        channel.pipeline.fireChannelRead(headers(17, "/t.S/Counted", metadata: ["authorization": "Bearer ok-b"]).wire)
        channel.pipeline.fireChannelRead(
            Frame(type: .message, flags: .endStream, callID: 15, message: Ping(opaque: 5)).wire)
        channel.pipeline.fireChannelRead(
            Frame(type: .message, flags: .endStream, callID: 17, message: Ping(opaque: 6)).wire)
        call(19, "ok-b", 7)
        #expect(try answers() == [1005, 2006, 2007])
        #expect(counting.checks == 7, "15 and 17 checked, 19 reused 17's")
        // A check that refuses forgets the earlier answer: once the principal holds again, the same HEADERS are
        // checked again rather than passed on what was found before the refusal.
        call(21, "ok-a", 8)
        counting.holds = false
        counting.refuses = true
        call(23, "ok-a", 9)
        #expect(try answers() == [1008], "call 23 refused")
        counting.holds = true
        counting.refuses = false
        call(25, "ok-a", 10)
        #expect(try answers() == [1010])
        #expect(counting.checks == 10, "21, 23 and 25 all checked")
        _ = try? channel.finish()
    }

    /// An inline call whose request follows its HEADERS in the same read is
    /// answered without ever being entered as an open call (no call state,
    /// no timers); until then it counts as open (the cap holds), and any other
    /// frame, the end of the read, or a handler or authenticator that has to
    /// wait enters it as a call like any other.
    @Test func inlineCallAnsweredInItsReadIsNeverEntered() throws {
        let channel = try makeChannel(
            limits: ServerLimits(maximumConcurrentCalls: 1, requestTimeout: .seconds(10)), runsHandlersOnEventLoop: true
        )
        let handler = try channel.pipeline.syncOperations.handler(type: ServerConnectionHandler.self)
        let bearer: Metadata = ["authorization": "Bearer ok"]
        func request(_ id: UInt32, _ opaque: UInt64) -> Frame {
            Frame(type: .message, flags: .endStream, callID: id, message: Ping(opaque: opaque))
        }
        channel.pipeline.fireChannelRead(headers(1, "/t.S/Inline", timeoutMs: 1000, metadata: bearer).wire)
        #expect(handler.openCalls == 1, "admitted, its request awaited")
        channel.pipeline.fireChannelRead(request(1, 1).wire)
        #expect(handler.openCalls == 0, "answered at once")
        // Call 3's HEADERS are followed by 5's: 3 is entered, and 5 is over the cap of 1.
        channel.pipeline.fireChannelRead(headers(3, "/t.S/Inline", metadata: bearer).wire)
        channel.pipeline.fireChannelRead(headers(5, "/t.S/Inline", metadata: bearer).wire)
        channel.pipeline.fireChannelRead(request(3, 3).wire)
        channel.pipeline.fireChannelRead(request(5, 5).wire)
        channel.pipeline.fireChannelReadComplete()
        var frames = try written(channel)
        #expect(frames.map(\.callID) == [1, 1, 5, 3, 3])
        #expect(try frames[0].decode(Ping.self).opaque == 1001)
        #expect(try status(frames[1])?.code == 0)
        #expect(try status(frames[2])?.code == StatusCode.resourceExhausted.rawValue)
        #expect(try frames[3].decode(Ping.self).opaque == 1003)
        #expect(handler.openCalls == 0)
        // A handler that has to wait, then an authenticator that has to wait: entered, answered by a task.
        for (id, method, answer) in [(7, "/t.S/Later", 8), (9, "/t.S/LockedInline", 11)] as [(UInt32, String, UInt64)] {
            channel.pipeline.fireChannelRead(headers(id, method, metadata: bearer).wire)
            channel.pipeline.fireChannelRead(request(id, UInt64(id)).wire)
            #expect(handler.openCalls == 1, "\(method): entered while its task runs")
            channel.pipeline.fireChannelReadComplete()
            channel.embeddedEventLoop.run()
            frames = try written(channel)
            #expect(frames.map(\.callID) == [id, id])
            #expect(try frames.first?.decode(Ping.self).opaque == answer)
            #expect(try status(frames.last)?.code == 0)
            #expect(handler.openCalls == 0)
        }
        // HEADERS then CANCEL in one read: entered, then cancelled; nothing is written.
        channel.pipeline.fireChannelRead(headers(11, "/t.S/Inline", metadata: bearer).wire)
        channel.pipeline.fireChannelRead(Frame(type: .cancel, callID: 11).wire)
        channel.pipeline.fireChannelReadComplete()
        #expect(try written(channel).isEmpty)
        #expect(handler.openCalls == 0)
        // HEADERS alone: entered at the end of the read, and its request timer runs.
        channel.pipeline.fireChannelRead(headers(13, "/t.S/Inline", metadata: bearer).wire)
        channel.pipeline.fireChannelReadComplete()
        #expect(handler.openCalls == 1)
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        let timedOut = try #require(try status(written(channel).first))
        #expect(timedOut.code == StatusCode.deadlineExceeded.rawValue)
        #expect(handler.openCalls == 0)
        _ = try? channel.finish()
    }

    /// An inline call whose request comes in a later read than its HEADERS
    /// is answered then; its deadline was watched from the HEADERS on.
    @Test func inlineCallWhoseRequestComesInALaterRead() throws {
        let channel = try makeChannel(runsHandlersOnEventLoop: true)
        let bearer: Metadata = ["authorization": "Bearer ok"]
        try channel.writeInbound(headers(1, "/t.S/Inline", timeoutMs: 500, metadata: bearer).wire)
        try channel.writeInbound(headers(3, "/t.S/Inline", timeoutMs: 500, metadata: bearer).wire)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(300))
        try channel.writeInbound(Frame(type: .message, flags: .endStream, callID: 1, message: Ping(opaque: 4)).wire)
        let frames = try written(channel)
        #expect(frames.map(\.callID) == [1, 1])
        #expect(try frames[0].decode(Ping.self).opaque == 1004)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(200))
        let expired = try #require(try status(written(channel).first))
        #expect(
            expired.code == StatusCode.deadlineExceeded.rawValue, "call 3 never sent its request: its deadline ends it")
        _ = try? channel.finish()
    }

    @Test func connectionWithoutPrefaceIsClosedAfterTheHandshakeTimeout() throws {
        let channel = try makeChannel(preface: false)
        channel.embeddedEventLoop.advanceTime(by: .seconds(4))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive)
        #expect(try written(channel).isEmpty, "closed without a word")
    }

    @Test func callWithoutItsRequestEndsAfterTheRequestTimeout() throws {
        let channel = try makeChannel()
        try channel.writeInbound(headers(1).wire)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(9_999))
        #expect(try written(channel).isEmpty)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(1))
        let status = try #require(try status(written(channel).first))
        #expect(status.code == StatusCode.deadlineExceeded.rawValue && status.message.contains("no request message"))
        #expect(channel.isActive)
        _ = try? channel.finish()
    }

    @Test func deadlineFiresBeforeTheRequestTimeout() throws {
        let channel = try makeChannel()
        try channel.writeInbound(headers(1, timeoutMs: 250).wire)
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(250))
        let status = try #require(try status(written(channel).first))
        #expect(status.code == StatusCode.deadlineExceeded.rawValue && status.message == "deadline of 250 ms exceeded")
        _ = try? channel.finish()
    }

    @Test func idleConnectionGetsGoAwayAndIsClosedByTheSecondSweep() throws {
        let channel = try makeChannel()
        let handler = try channel.pipeline.syncOperations.handler(type: ServerConnectionHandler.self)
        // A call, ended by its request timeout: activity for the next sweep.
        try channel.writeInbound(headers(1).wire)
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        _ = try written(channel)
        handler.idleCheck()
        #expect(channel.isActive, "the first sweep saw the call")
        handler.idleCheck()
        let goAway = try #require(try written(channel).first)
        #expect(goAway.type == .goAway)
        #expect(try goAway.decode(GoAway.self).code == 0)
        channel.embeddedEventLoop.run()
        #expect(!channel.isActive, "closed once the GOAWAY was written")
    }

    @Test func pingFloodGetsPongsThenEnhanceYourCalm() throws {
        let channel = try makeChannel()
        for opaque in 1...5 {
            _ = try? channel.writeInbound(Frame(type: .ping, callID: 0, message: Ping(opaque: UInt64(opaque))).wire)
        }
        let frames = try written(channel)
        #expect(
            frames.map(\.type) == [.pong, .pong, .pong, .goAway],
            "the first PING and two strikes are answered, the third strike ends it")
        #expect(try frames[0].decode(Ping.self).opaque == 1)
        let goAway = try frames[3].decode(GoAway.self)
        #expect(goAway.code == StatusCode.resourceExhausted.rawValue && goAway.message.hasPrefix("too_many_pings"))
        #expect(!channel.isActive)
    }

    /// A connection error's GOAWAY is followed by a half-close, not a reset: what the peer
    /// still sends is dropped unread, and the connection closes when the peer does or a second later.
    @Test func aBreachHalfClosesAfterItsGoAwayAndDropsWhatFollows() throws {
        let channel = try makeChannel()
        let recorder = CloseRecorder()
        try channel.pipeline.syncOperations.addHandler(recorder, position: .first)
        // A call never opened.
        var bytes = Frame(type: .message, flags: .endStream, callID: 9, message: Ping(opaque: 1)).wire
        headers(11).write(to: &bytes)
        channel.pipeline.fireChannelRead(bytes)
        channel.pipeline.fireChannelReadComplete()
        let frames = try written(channel)
        #expect(frames.map(\.type) == [.goAway], "HEADERS after the breach are not framed")
        #expect(try frames.first?.decode(GoAway.self).code == StatusCode.internal.rawValue)
        #expect(recorder.modes == [.output])
        #expect(channel.isActive, "still reading, to drop what the peer sends")
        _ = try? channel.writeInbound(headers(13).wire)
        #expect(try written(channel).isEmpty, "nothing more is framed or answered")
        channel.embeddedEventLoop.advanceTime(by: ServerConnectionHandler.lingerAfterGoAway)
        #expect(recorder.modes == [.output, .all])
        #expect(!channel.isActive)
    }

    @Test func pingsSpacedByTheMinimumIntervalAreFine() throws {
        let channel = try makeChannel()
        for opaque in 1...10 {
            try channel.writeInbound(Frame(type: .ping, callID: 0, message: Ping(opaque: UInt64(opaque))).wire)
            channel.embeddedEventLoop.advanceTime(by: .seconds(5))
        }
        #expect(try written(channel).map(\.type) == Array(repeating: .pong, count: 10))
        #expect(channel.isActive)
        _ = try? channel.finish()
    }

    @Test func callsOverTheCapAreRefusedAndTheConnectionLives() throws {
        let channel = try makeChannel()
        try channel.writeInbound(headers(1).wire)
        try channel.writeInbound(headers(2).wire)
        try channel.writeInbound(headers(3).wire)
        let refused = try #require(try status(written(channel).first))
        #expect(refused.code == StatusCode.resourceExhausted.rawValue)
        #expect(channel.isActive)
        _ = try? channel.finish()
    }

    @Test func missingCredentialIsRefusedFromTheHeaders() throws {
        let channel = try makeChannel()
        try channel.writeInbound(headers(1, "/t.S/Locked").wire)
        let refused = try #require(try status(written(channel).first))
        #expect(refused.code == StatusCode.unauthenticated.rawValue)
        // Its body, when it comes, is dropped unread.
        try channel.writeInbound(
            Frame(type: .message, flags: [.endStream, .compressed], callID: 1, payload: ByteBuffer(bytes: [1, 2, 3]))
                .wire)
        #expect(try written(channel).isEmpty)
        #expect(channel.isActive)
        _ = try? channel.finish()
    }

    @Test func unwritableConnectionHoldsReads() throws {
        let counter = ReadCounter()
        let channel = try makeChannel()
        try channel.pipeline.syncOperations.addHandler(counter, position: .first)
        channel.read()
        #expect(counter.reads == 1)
        channel.isWritable = false
        channel.pipeline.fireChannelWritabilityChanged()
        channel.read()
        channel.read()
        #expect(counter.reads == 1, "no read while the peer does not read what we write")
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        #expect(counter.reads == 2, "the held read is issued once writable")
        _ = try? channel.finish()
    }

    /// Frames already read when the peer stops reading ours wait, unanswered, until it reads again:
    /// answering them would pile our answers up past the high-water mark.
    @Test func framesReadWhileThePeerDoesNotReadWaitUntilItDoes() throws {
        let channel = try makeChannel(limits: ServerLimits(maximumConcurrentCalls: 10), runsHandlersOnEventLoop: true)
        let bearer: Metadata = ["authorization": "Bearer ok"]
        channel.isWritable = false
        channel.pipeline.fireChannelWritabilityChanged()
        var bytes = ByteBuffer()
        for id in [1, 3] as [UInt32] {
            headers(id, "/t.S/Inline", metadata: bearer).write(to: &bytes)
            Frame(type: .message, flags: .endStream, callID: id, message: Ping(opaque: UInt64(id))).write(to: &bytes)
        }
        channel.pipeline.fireChannelRead(bytes)
        channel.pipeline.fireChannelReadComplete()
        #expect(try written(channel).isEmpty, "nothing is answered while the peer does not read")
        let handler = try channel.pipeline.syncOperations.handler(type: ServerConnectionHandler.self)
        #expect(handler.openCalls == 0, "not even opened")
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        let frames = try written(channel)
        #expect(frames.map(\.callID) == [1, 1, 3, 3])
        #expect(try frames[2].decode(Ping.self).opaque == 1003)
        _ = try? channel.finish()
    }

    @Test func gracefulShutdownBeforeThePrefaceIsToldWhenItArrives() throws {
        let shutdown = ShutdownFlag()
        let channel = try makeChannel(preface: false, shutdown: shutdown)
        let handler = try channel.pipeline.syncOperations.handler(type: ServerConnectionHandler.self)
        shutdown.set()
        handler.beginGracefulShutdown()
        #expect(try written(channel).isEmpty, "nothing before the preface")
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: Frame.preface))
        channel.pipeline.fireChannelReadComplete()
        let goAway = try #require(try written(channel).first)
        #expect(goAway.type == .goAway)
        #expect(try goAway.decode(GoAway.self).code == 0)
        channel.embeddedEventLoop.run()
        #expect(!channel.isActive)
    }
}

/// Counts the reads that reach the socket end of the pipeline.
final class ReadCounter: ChannelOutboundHandler {
    typealias OutboundIn = Any
    var reads = 0

    func read(context: ChannelHandlerContext) {
        reads += 1
        context.read()
    }
}

/// Records the close modes that reach the socket end; takes a half-close as a socket
/// would (the channel stays active, reading), passes a full close on.
final class CloseRecorder: ChannelOutboundHandler {
    typealias OutboundIn = Any
    var modes: [CloseMode] = []

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        modes.append(mode)
        if mode == .output { promise?.succeed(()) } else { context.close(mode: mode, promise: promise) }
    }
}

extension Frame {
    /// The frames in `bytes` (a connection handler's writes gather several into one buffer).
    static func all(in bytes: ByteBuffer) throws -> [Frame] {
        var reader = FrameReader(expectPreface: false, limits: FrameLimits(uniform: 1 << 24))
        reader.append(bytes)
        var frames: [Frame] = []
        while case .frame(let frame)? = try reader.next() { frames.append(frame) }
        #expect(reader.bufferedBytes == 0, "a write ends on a frame boundary")
        return frames
    }

    /// The frame's bytes on the wire, as the connection handler reads them.
    var wire: ByteBuffer {
        var buffer = ByteBuffer()
        write(to: &buffer)
        return buffer
    }
}
