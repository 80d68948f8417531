import Foundation
import Glibc
import KioskRPC
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// A client that is a bare TCP socket: blocking, with a receive timeout, so a server that never answers or never
/// closes shows as a failed expectation rather than a test that hangs. Its reads run on a Dispatch thread, never
/// on the cooperative pool that the server's handlers run on.
private final class PlainSocket: @unchecked Sendable {
    private let fd: Int32

    init(port: Int, timeoutSeconds: Int = 5) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var limit = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(fd)
            throw SideHTTPServerError("connect failed: errno \(errno)")
        }
    }

    deinit { close(fd) }

    @discardableResult
    func send(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count
    }

    /// What arrives until the server closes the connection; nil when it neither closed nor sent within the timeout.
    func readToClose() async -> String? { await offPool { self.blockingReadToClose() } }

    /// The first response's status line; nil when none came within the timeout.
    func readStatusLine() async -> String? { await offPool { self.blockingReadStatusLine() } }

    private func offPool(_ read: @escaping @Sendable () -> String?) async -> String? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: read()) }
        }
    }

    private func blockingReadToClose() -> String? {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                received += chunk[0..<count]
            } else if count == 0 || errno == ECONNRESET {
                return String(decoding: received, as: UTF8.self)
            } else {
                return nil
            }
        }
    }

    /// Reads until the blank line after the headers (and nothing of the body).
    private func blockingReadStatusLine() -> String? {
        var received: [UInt8] = []
        var byte: UInt8 = 0
        while !received.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            guard recv(fd, &byte, 1, 0) == 1 else { return nil }
            received.append(byte)
        }
        return String(decoding: received, as: UTF8.self).components(separatedBy: "\r\n").first
    }
}

/// The side server's documented limits, tried with bare sockets: the connection cap, the idle close (never under
/// a request being answered), the whole-request deadline, the body cap (before the body when it is announced), the
/// answer timeout, `Connection: close`, and plaintext only on loopback.
@Suite(.timeLimit(.minutes(1))) struct SideHTTPServerTests {
    static func withServer(
        _ limits: SideHTTPServer.Limits, answerAfter delay: Duration = .zero,
        _ body: (SideHTTPServer) async throws -> Void
    ) async throws {
        let server = SideHTTPServer(limits: limits) { request in
            if delay > .zero { try? await Task.sleep(for: delay) }
            return .text(200, "\(request.head.method) \(request.path) \(request.body.count)")
        }
        try await server.start()
        do {
            try await body(server)
        } catch {
            await server.shutdown()
            throw error
        }
        await server.shutdown()
    }

    /// Waits until `condition` holds, at most 5 s.
    static func eventually(_ condition: () -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    @Test func connectionsOverTheCapAreClosedOnAccept() async throws {
        try await Self.withServer(.init(maxConnections: 2, maxBody: 0)) { server in
            let first = try PlainSocket(port: server.port)
            var second: PlainSocket? = try PlainSocket(port: server.port)
            #expect(try await Self.eventually { server.openConnections == 2 })
            let third = try PlainSocket(port: server.port)
            #expect(await third.readToClose() == "", "a third connection was kept")
            // The two held are served, and one closed makes room again.
            #expect(first.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(await first.readStatusLine() == "HTTP/1.1 200 OK")
            #expect(second != nil)
            second = nil
            #expect(try await Self.eventually { server.openConnections == 1 })
            let fourth = try PlainSocket(port: server.port)
            #expect(fourth.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(await fourth.readStatusLine() == "HTTP/1.1 200 OK")
            withExtendedLifetime(first) {}
        }
    }

    @Test func anIdleConnectionIsClosedButNotWhileItIsAnswered() async throws {
        let limits = SideHTTPServer.Limits(
            maxConnections: 4, maxBody: 0, idleTimeout: .milliseconds(200), requestDeadline: .seconds(30))
        try await Self.withServer(limits, answerAfter: .milliseconds(800)) { server in
            let idle = try PlainSocket(port: server.port)
            let start = ContinuousClock.now
            #expect(await idle.readToClose() == "", "an idle connection was not closed")
            #expect(ContinuousClock.now - start < .seconds(4))

            // The answer takes four idle periods: the connection stays open for it.
            let waiting = try PlainSocket(port: server.port)
            #expect(waiting.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(
                await waiting.readStatusLine() == "HTTP/1.1 200 OK", "the idle timer closed a connection being answered"
            )
        }
    }

    @Test func aRequestTrickledPastTheDeadlineIsCutOff() async throws {
        let limits = SideHTTPServer.Limits(
            maxConnections: 4, maxBody: 1024, idleTimeout: .seconds(10), requestDeadline: .milliseconds(300))
        try await Self.withServer(limits) { server in
            let slow = try PlainSocket(port: server.port)
            let start = ContinuousClock.now
            var sent = 0
            // One header byte every 20 ms (each read restarts the idle timer), for at most 5 s.
            for byte in "GET /x HTTP/1.1\r\nX-Long: " + String(repeating: "a", count: 250) {
                guard slow.send(String(byte)) else { break }
                sent += 1
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(await slow.readToClose() == "", "a trickled request was answered")
            #expect(sent < 100, "the connection stayed open for \(sent) trickled bytes")
            #expect(ContinuousClock.now - start < .seconds(4))
        }
    }

    @Test func aBodyOverTheCapIsRefusedWith413() async throws {
        try await Self.withServer(.init(maxConnections: 4, maxBody: 16)) { server in
            let client = try PlainSocket(port: server.port)
            let body = String(repeating: "b", count: 17)
            #expect(client.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n\(body)"))
            #expect(await client.readStatusLine() == "HTTP/1.1 413 Payload Too Large")
            let fits = try PlainSocket(port: server.port)
            #expect(fits.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n\(body.dropLast())"))
            #expect(await fits.readStatusLine() == "HTTP/1.1 200 OK")
        }
    }

    @Test func aBodyAnnouncedOverTheCapIsRefusedBeforeItIsSent() async throws {
        try await Self.withServer(.init(maxConnections: 4, maxBody: 16)) { server in
            let client = try PlainSocket(port: server.port)
            // The head only: the 10 MB body is never sent, and the answer comes anyway, then the close.
            #expect(client.send("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"))
            let answer = try #require(await client.readToClose(), "no answer or no close")
            #expect(answer.hasPrefix("HTTP/1.1 413 Payload Too Large"), "\(answer)")
            #expect(answer.lowercased().contains("connection: close"))
        }
    }

    @Test func aHandlerThatDoesNotAnswerIsAnswered503AndCancelled() async throws {
        let limits = SideHTTPServer.Limits(maxConnections: 4, maxBody: 0, answerTimeout: .milliseconds(200))
        let cancelled = NIOLockedValueBox(false)
        let server = SideHTTPServer(limits: limits) { _ in
            do { try await Task.sleep(for: .seconds(30)) } catch { cancelled.withLockedValue { $0 = true } }
            return .text(200, "late")
        }
        try await server.start()
        let client = try PlainSocket(port: server.port)
        let start = ContinuousClock.now
        #expect(client.send("GET /hung HTTP/1.1\r\nHost: x\r\n\r\n"))
        let answer = await client.readToClose()
        #expect(answer?.hasPrefix("HTTP/1.1 503 Service Unavailable") == true, "\(answer ?? "no answer or no close")")
        #expect(ContinuousClock.now - start < .seconds(2), "the 503 waited for the handler")
        // The handler's task is cancelled, not left running past its connection.
        #expect(try await Self.eventually { cancelled.withLockedValue { $0 } }, "the hung handler kept running")
        await server.shutdown()
    }

    @Test func aRequestPipelinedAfterAClosingAnswerIsNotRun() async throws {
        let paths = NIOLockedValueBox<[String]>([])
        let server = SideHTTPServer(limits: .init(maxConnections: 4, maxBody: 0)) { request in
            paths.withLockedValue { $0.append(request.path) }
            return .text(200, "ok")
        }
        try await server.start()
        let client = try PlainSocket(port: server.port)
        #expect(
            client.send(
                "GET /first HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n"))
        let answer = await client.readToClose()
        #expect(answer?.components(separatedBy: "HTTP/1.1 200 OK").count == 2, "\(answer ?? "no close")")
        await server.shutdown()
        #expect(paths.withLockedValue { $0 } == ["/first"])
    }

    @Test func connectionCloseAndHTTP10AreHonoured() async throws {
        try await Self.withServer(.init(maxConnections: 4, maxBody: 0)) { server in
            let closing = try PlainSocket(port: server.port)
            #expect(closing.send("GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
            let answer = try #require(await closing.readToClose(), "the connection was kept open")
            #expect(answer.hasPrefix("HTTP/1.1 200 OK") && answer.lowercased().contains("connection: close"))
            let old = try PlainSocket(port: server.port)
            #expect(old.send("GET /b HTTP/1.0\r\n\r\n"))
            let oldAnswer = try #require(await old.readToClose(), "an HTTP/1.0 connection was kept open")
            #expect(oldAnswer.hasPrefix("HTTP/1.0 200 OK"), "\(oldAnswer)")
            // Keep-alive stays the default for HTTP/1.1: two requests on one connection.
            let kept = try PlainSocket(port: server.port)
            #expect(kept.send("GET /c HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(await kept.readStatusLine() == "HTTP/1.1 200 OK")
        }
    }

    @Test func plaintextOffLoopbackIsRefused() async throws {
        let server = SideHTTPServer(limits: .init(maxConnections: 1, maxBody: 0)) { _ in .text(200, "") }
        await #expect(throws: SideHTTPServerError.self) { try await server.start(host: "0.0.0.0") }
    }
}
