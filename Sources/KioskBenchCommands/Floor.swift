import ArgumentParser
import Foundation
import Histogram

#if canImport(Glibc)
import Glibc
#endif

/// The machine's own round-trip floor: two threads echoing a message over
/// loopback TCP, each sleeping in poll(2) until readable, no Kiosk, NIO or Swift concurrency in the
/// path. A serial `verify` round trip can never be cheaper than this plus one
/// signature check; run it with and without `taskset -c 0` to see what
/// waking a thread on the other core costs on this machine.
struct Floor: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The machine's round-trip floor: a bare loopback TCP ping-pong between two threads.")

    @Option(help: "Seconds measured.") var duration = 5.0
    @Option(help: "Bytes sent each way per round trip.") var size = 256
    @OptionGroup var output: OutputOptions

    struct SystemError: Error, CustomStringConvertible {
        let call: String, code: Int32
        var description: String { "floor: \(call) failed" + (code == 0 ? "" : ": \(String(cString: strerror(code)))") }
    }

    func validate() throws {
        guard size > 0, size <= 65_536 else { throw ValidationError("--size must be 1…65536 bytes") }
        guard duration > 0 else { throw ValidationError("--duration must be positive") }
    }

    func run() throws {
        let started = ProcessStats.current()
        let (listener, port) = try Self.listen()
        defer { close(listener) }
        let size = self.size
        let echo = Thread {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            defer { close(connection) }
            Self.noDelay(connection)
            var buffer = [UInt8](repeating: 0, count: size)
            while true {
                guard Self.waitReadable(connection) else { return }
                let count = read(connection, &buffer, size)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { return }
                guard Self.writeAll(connection, buffer, count) else { return }
            }
        }
        echo.start()

        let connection = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard connection >= 0 else { throw SystemError(call: "socket", code: errno) }
        defer { close(connection) }
        var address = Self.loopback(port: port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(connection, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw SystemError(call: "connect", code: errno) }
        Self.noDelay(connection)

        var histogram = Histogram<UInt64>(
            highestTrackableValue: 120_000_000_000, numberOfSignificantValueDigits: .three)
        let message = [UInt8](repeating: 0x6B, count: size)
        var buffer = [UInt8](repeating: 0, count: size)
        var calls = 0
        var failure: SystemError?  // with errno as the failing call left it
        func roundTrip() -> Bool {
            guard Self.writeAll(connection, message, size) else {
                failure = SystemError(call: "write", code: errno)
                return false
            }
            var received = 0
            while received < size {
                guard Self.waitReadable(connection) else {
                    failure = SystemError(call: "poll", code: errno)
                    return false
                }
                let count = buffer.withUnsafeMutableBytes {
                    read(connection, $0.baseAddress! + received, size - received)
                }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else {
                    failure = SystemError(
                        call: count == 0 ? "read (the echo thread closed)" : "read", code: count == 0 ? 0 : errno)
                    return false
                }
                received += count
            }
            return true
        }
        // A short warm-up, then round trips until the duration is spent.
        for _ in 0..<1_000 where failure == nil { _ = roundTrip() }
        let start = ContinuousClock.now
        let end = start + .milliseconds(Int64(duration * 1000))
        while failure == nil {
            let sent = ContinuousClock.now
            guard sent < end else { break }
            guard roundTrip() else { break }
            _ = histogram.record(sent.duration(to: .now).nanoseconds)
            calls += 1
        }
        let elapsed = start.duration(to: .now)
        shutdown(connection, Int32(SHUT_RDWR))
        if let failure { throw failure }

        var report = Report(title: "floor (loopback TCP ping-pong between two threads, no Kiosk code)")
        report.result = LoadResult(calls: calls, errors: [:], histogram: histogram, elapsed: elapsed)
        report.fields = [("bytes_each_way", size)]
        try output.finish(report, started: started, serverBefore: nil)
    }

    static func loopback(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    static func listen() throws -> (Int32, UInt16) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw SystemError(call: "socket", code: errno) }
        var address = loopback(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listener, pointer, length) == 0 && Glibc.listen(listener, 1) == 0
                    && getsockname(listener, pointer, &length) == 0
            }
        }
        guard bound else {
            let code = errno
            close(listener)
            throw SystemError(call: "bind/listen", code: code)
        }
        return (listener, UInt16(bigEndian: address.sin_port))
    }

    static func noDelay(_ descriptor: Int32) {
        var one: Int32 = 1
        setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Sleeps in the kernel until the socket is readable, as an event loop does.
    static func waitReadable(_ descriptor: Int32) -> Bool {
        var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        while true {
            if poll(&entry, 1, -1) >= 0 { return true }
            if errno != EINTR { return false }
        }
    }

    static func writeAll(_ descriptor: Int32, _ bytes: [UInt8], _ count: Int) -> Bool {
        var sent = 0
        while sent < count {
            let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + sent, count - sent) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { return false }
            sent += written
        }
        return true
    }
}
