import Foundation
import Glibc
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import NIOCore
import Testing

/// A client that is nothing but a TCP socket: blocking, with send and receive
/// timeouts so a server that stops reading (backpressure) shows as a send
/// that times out instead of a test that hangs.
final class RawSocket {
    private let fd: Int32
    private var inbound = ByteBuffer()

    init(port: Int, timeout: Int = 5) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var limit = timeval(tv_sec: timeout, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw RPCError(.unavailable, "connect failed: errno \(errno)")
        }
    }

    deinit { close(fd) }

    /// Writes all of `bytes`; false when the peer stopped reading (timeout) or closed.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 && errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    func send(_ frames: [Frame], preface: Bool = false) -> Bool {
        var buffer = ByteBuffer(bytes: preface ? Frame.preface : [])
        for frame in frames { frame.write(to: &buffer) }
        return send(Array(buffer.readableBytesView))
    }

    /// The next frame, or nil at EOF, on a reset or after the receive timeout.
    func readFrame() -> Frame? {
        while true {
            if let frame = try? FrameDecoder.readFrame(from: &inbound, maximumPayloadSize: 8 * 1024 * 1024) {
                return frame
            }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            inbound.writeBytes(chunk[0..<count])
        }
    }

    /// Reads until a GOAWAY (returned) or the end of the connection (nil).
    func readGoAway() -> GoAway? {
        while let frame = readFrame() {
            if frame.type == .goAway { return try? frame.decode(GoAway.self) }
        }
        return nil
    }

    /// True once the server has closed the connection (EOF or reset).
    func readUntilClosed() -> Bool {
        while readFrame() != nil {}
        return true
    }
}

/// `kiosk-store serve` as a separate process, attacked by raw sockets with no
/// account: every limit of the RPC runtime refuses as documented, the store's
/// resident memory grows by a few MiB at most, and other clients are served
/// all the while. (Issue #11's "done when" list, one test per attack.)
@Suite(.serialized, .timeLimit(.minutes(3))) struct AbuseTests {
    static let listProducts = "/kiosk.store.v1.Store/ListProducts"
    static let purchase = "/kiosk.store.v1.Store/Purchase"

    /// Peak and current resident set of `pid`, in bytes (VmHWM, VmRSS).
    static func memory(of pid: Int32) -> (peak: Int, current: Int) {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        func field(_ name: String) -> Int {
            let line = status.split(separator: "\n").first { $0.hasPrefix(name) } ?? ""
            return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
        }
        return (field("VmHWM:"), field("VmRSS:"))
    }

    /// CPU seconds `pid` has used (user + system).
    static func cpuSeconds(of pid: Int32) -> Double {
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Runs `attack` against a fresh store, checks a Health call on another
    /// connection is answered during and after it, and returns the growth of
    /// the store's peak RSS over its RSS before the attack.
    func attacking(_ name: String, _ attack: (_ port: Int, _ pid: Int32) throws -> Void) async throws -> Int {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try await StoreProcess.run(["account", "create", "--data-dir", directory])
        let store = try await StoreProcess(dataDirectory: directory)
        let pid = store.process.processIdentifier
        let client = RPCClient(host: "127.0.0.1", port: store.port)
        // Warm up the runtime's allocations with a few real calls first.
        for _ in 0..<20 { _ = try await health(client) }
        let before = Self.memory(of: pid).current
        try attack(store.port, pid)
        #expect(try await health(client) == .serving, "\(name): other clients are still served")
        let growth = Self.memory(of: pid).peak - before
        // The figure behind the README's security section, in the test log.
        print("abuse: \(name): kiosk-store peak RSS +\(growth / 1024) KiB over \(before / 1024) KiB")
        await client.close()
        await store.signal(SIGTERM)
        return growth
    }

    func health(_ client: RPCClient) async throws -> HealthCheckResponse.ServingStatus {
        try await client.unary(
            "/kiosk.rpc.v1.Health/Check", request: HealthCheckRequest(), response: HealthCheckResponse.self,
            options: CallOptions(timeout: .seconds(10))
        ).status
    }

    static func headers(_ callID: UInt32, _ method: String, metadata: Metadata = Metadata()) -> Frame {
        Frame(type: .headers, callID: callID, message: CallHeaders(method: method, metadata: metadata))
    }

    static let mib = 1024 * 1024

    @Test func tenThousandCallsWithoutRequestsStopAtTheCap() async throws {
        let growth = try await attacking("10,000 open calls") { port, pid in
            let socket = try RawSocket(port: port)
            let frames = (0..<10_000).map { Self.headers(UInt32($0 + 1), Self.listProducts) }
            #expect(socket.send(frames, preface: true))
            var refused = 0
            while refused < 9_900, let frame = socket.readFrame() {
                if frame.type == .trailers,
                    (try? frame.decode(CallStatus.self))?.code == StatusCode.resourceExhausted.rawValue
                {
                    refused += 1
                }
            }
            #expect(refused == 9_900, "every call over the cap of 100 is refused with RESOURCE_EXHAUSTED")
            // The 100 admitted calls still answer once their requests come.
            let request = Frame(type: .message, flags: .endStream, callID: 1, message: StoreV1.ListProductsRequest())
            #expect(socket.send([request]))
            let answer = socket.readFrame()
            #expect(answer?.type == .message && answer?.callID == 1, "the connection stays usable")
        }
        #expect(growth < 16 * Self.mib, "peak RSS grew by \(growth / 1024) KiB")
    }

    @Test func fourMiBHeadersAreRefusedFromTheirLength() async throws {
        let growth = try await attacking("4 MiB HEADERS") { port, pid in
            let socket = try RawSocket(port: port)
            // Only the frame's first 10 bytes: the refusal must not wait for (or allocate) the 4 MiB.
            var header = ByteBuffer(bytes: Frame.preface)
            header.writeInteger(UInt32(6 + 4 * Self.mib))
            header.writeInteger(FrameType.headers.rawValue)
            header.writeInteger(UInt8(0))
            header.writeInteger(UInt32(1))
            #expect(socket.send(Array(header.readableBytesView)))
            let goAway = try #require(socket.readGoAway())
            #expect(goAway.code == StatusCode.resourceExhausted.rawValue)
            #expect(socket.readUntilClosed())
        }
        #expect(growth < 8 * Self.mib, "peak RSS grew by \(growth / 1024) KiB")
    }

    @Test func metadataOverItsCountOrSizeIsRefused() async throws {
        let growth = try await attacking("10,000 metadata entries") { port, pid in
            var many = Metadata()
            for index in 0..<10_000 { many.add("k\(index)", "") }
            let socket = try RawSocket(port: port)
            #expect(socket.send([Self.headers(1, Self.listProducts, metadata: many)], preface: true))
            #expect(socket.readGoAway()?.code == StatusCode.resourceExhausted.rawValue, "over 16 KiB of HEADERS")

            var sixtyFive = Metadata()
            for index in 0..<65 { sixtyFive.add("k\(index)", "v") }
            let other = try RawSocket(port: port)
            #expect(other.send([Self.headers(1, Self.listProducts, metadata: sixtyFive)], preface: true))
            let refused = try #require(other.readFrame())
            #expect(
                refused.type == .trailers
                    && (try? refused.decode(CallStatus.self))?.code == StatusCode.resourceExhausted.rawValue)
            // Same connection, a call within the limits is served.
            #expect(
                other.send([
                    Self.headers(3, Self.listProducts),
                    Frame(type: .message, flags: .endStream, callID: 3, message: StoreV1.ListProductsRequest()),
                ]))
            #expect(other.readFrame()?.type == .message)
        }
        #expect(growth < 8 * Self.mib, "peak RSS grew by \(growth / 1024) KiB")
    }

    @Test func twoMillionPingsNeverReadEndWithEnhanceYourCalm() async throws {
        let growth = try await attacking("2,000,000 PINGs") { port, pid in
            let socket = try RawSocket(port: port, timeout: 2)
            let ping = Frame(type: .ping, callID: 0, message: Ping(opaque: 0x0102_0304_0506_0708))
            var batch = ByteBuffer()
            for _ in 0..<10_000 { ping.write(to: &batch) }
            let bytes = Array(batch.readableBytesView)
            #expect(socket.send(Frame.preface))
            var sent = 0
            // Never reads. The third strike ends the connection: GOAWAY, then the server closes its side and drops
            // what still comes, for a second at most (so the GOAWAY is not lost to a reset): the sends may all pass.
            while sent < 2_000_000, socket.send(bytes) { sent += 10_000 }
            #expect(
                socket.readGoAway()?.message.hasPrefix("too_many_pings") == true,
                "ended at the third strike, the rest never answered")
            #expect(socket.readUntilClosed())
        }
        #expect(growth < 8 * Self.mib, "peak RSS grew by \(growth / 1024) KiB")
    }

    @Test func oneMiBPingAndOverflowingWindowUpdateEndTheConnection() async throws {
        let growth = try await attacking("1 MiB PING, WINDOW_UPDATE overflow") { port, pid in
            let big = try RawSocket(port: port)
            #expect(
                big.send(
                    [Frame(type: .ping, callID: 0, payload: ByteBuffer(repeating: 7, count: Self.mib))], preface: true))
            #expect(big.readGoAway()?.code == StatusCode.resourceExhausted.rawValue)

            let overflow = try RawSocket(port: port)
            let update = Frame(type: .windowUpdate, callID: 1, message: WindowUpdate(increment: UInt32.max))
            #expect(overflow.send([Self.headers(1, Self.listProducts), update], preface: true))
            let goAway = try #require(overflow.readGoAway())
            #expect(goAway.code == StatusCode.internal.rawValue && goAway.message.contains("2^31-1"))
        }
        #expect(growth < 8 * Self.mib, "peak RSS grew by \(growth / 1024) KiB")
    }

    @Test func statusesNeverEchoALargeRequestBack() async throws {
        let growth = try await attacking("10 Health checks naming a 4 MiB service") { port, _ in
            // Health needs no token and names an unknown service in its NOT_FOUND status.
            let request = HealthCheckRequest(service: String(repeating: "s", count: 4 * Self.mib - 64))
            var encoded = ByteBuffer()
            request.serialize(into: &encoded)
            let bomb = Zlib.compress(encoded, level: 9)
            let socket = try RawSocket(port: port)
            var frames: [Frame] = []
            for index in 0..<10 {
                let id = UInt32(index + 1)
                frames.append(Self.headers(id, "/kiosk.rpc.v1.Health/Check"))
                frames.append(Frame(type: .message, flags: [.endStream, .compressed], callID: id, payload: bomb))
            }
            #expect(socket.send(frames, preface: true))
            var answered = 0
            while answered < 10, let frame = socket.readFrame() {
                guard frame.type == .trailers else { continue }
                answered += 1
                #expect(frame.payload.readableBytes < 1200, "a TRAILERS of \(frame.payload.readableBytes) bytes")
            }
            #expect(answered == 10)
        }
        #expect(growth < 24 * Self.mib, "peak RSS grew by \(growth / 1024) KiB")
    }

    @Test func compressedRequestsWithoutAValidTokenAreNeverInflated() async throws {
        var cpu = 0.0
        let growth = try await attacking("200 zlib bombs without a token") { port, pid in
            // 4 KiB of zlib that inflates to 4 MiB.
            let bomb = Zlib.compress(ByteBuffer(repeating: 0, count: 4 * Self.mib - 64), level: 9)
            #expect(bomb.readableBytes < 8 * 1024)
            let socket = try RawSocket(port: port)
            var frames: [Frame] = []
            for index in 0..<200 {
                var metadata = Metadata()
                // Half carry no token, half a made-up one.
                if index % 2 == 1 { metadata.add("authorization", "Bearer not-a-token-\(index)") }
                let id = UInt32(index + 1)
                frames.append(Self.headers(id, Self.purchase, metadata: metadata))
                frames.append(Frame(type: .message, flags: [.endStream, .compressed], callID: id, payload: bomb))
            }
            let cpuBefore = Self.cpuSeconds(of: pid)
            #expect(socket.send(frames, preface: true))
            var unauthenticated = 0
            while unauthenticated < 200, let frame = socket.readFrame() {
                if frame.type == .trailers,
                    (try? frame.decode(CallStatus.self))?.code == StatusCode.unauthenticated.rawValue
                {
                    unauthenticated += 1
                }
            }
            #expect(unauthenticated == 200)
            cpu = Self.cpuSeconds(of: pid) - cpuBefore
        }
        #expect(growth < 8 * Self.mib, "peak RSS grew by \(growth / 1024) KiB")
        #expect(cpu < 1.0, "the store spent \(cpu) s of CPU on 200 unauthenticated bombs")
        print("abuse: 200 zlib bombs without a valid token: kiosk-store CPU \(cpu) s")
    }
}
