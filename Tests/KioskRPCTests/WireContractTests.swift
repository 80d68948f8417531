import Foundation
import KioskRPC
import KioskWire
import NIOCore
import Testing

/// The protocol as bytes on the wire, written and read without the client, so
/// the contract of DESIGN.md cannot drift.
@Suite(.timeLimit(.minutes(1))) struct WireContractTests {
    @Test func healthCheckExactBytes() async throws {
        try await withServer { server, _ in
            let port = try #require(server.port)
            try await RawPeer.with(port: port) { peer in
                let method = Array("/kiosk.rpc.v1.Health/Check".utf8)  // 26 bytes
                var request: [UInt8] = Array("KIOSK/1\n".utf8)
                // HEADERS, call 1: CallHeaders{method = 1: "/kiosk.rpc.v1.Health/Check"}
                request += [0x00, 0x00, 0x00, 0x22, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x0A, 0x1A] + method
                // MESSAGE, END_STREAM, call 1: empty HealthCheckRequest
                request += [0x00, 0x00, 0x00, 0x06, 0x02, 0x01, 0x00, 0x00, 0x00, 0x01]
                try await peer.send(request)
                let expected: [UInt8] = [
                    // MESSAGE, call 1: HealthCheckResponse{status = SERVING}
                    0x00, 0x00, 0x00, 0x08, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x01,
                    // TRAILERS, call 1: CallStatus{code = OK}, all fields default
                    0x00, 0x00, 0x00, 0x06, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01,
                ]
                #expect(try await peer.readBytes(expected.count) == expected)
            }
        }
    }

    @Test func pingIsAnsweredWithPong() async throws {
        try await withServer { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                try await peer.send(Frame(type: .ping, callID: 0, message: Ping(opaque: 0xFEED)))
                let pong = try #require(try await peer.readFrame())
                #expect(pong.type == .pong)
                #expect(try pong.decode(Ping.self) == Ping(opaque: 0xFEED))
            }
        }
    }

    @Test func twoGiBFrameIsRefusedAndServerKeepsServing() async throws {
        try await withServer { server, client in
            let port = try #require(server.port)
            let before = residentBytes()
            try #require(before > 0, "resident size readable from /proc/self/statm")
            try await RawPeer.with(port: port) { peer in
                try await peer.send(Frame.preface + [0x80, 0x00, 0x00, 0x00, 0x02, 0x01, 0x00, 0x00, 0x00, 0x01])
                let goAway = try #require(try await peer.readFrame())
                #expect(goAway.type == .goAway && goAway.callID == 0)
                #expect(try goAway.decode(GoAway.self).code == StatusCode.resourceExhausted.rawValue)
                try await peer.readUntilClosed()
            }
            // No 2 GiB buffer was allocated on the way.
            #expect(residentBytes() - before < 256 << 20)
            let health = try await client.unary(
                healthCheck, request: HealthCheckRequest(), response: HealthCheckResponse.self)
            #expect(health.status == .serving)
        }
    }

    @Test func wrongPrefaceIsClosedAndServerKeepsServing() async throws {
        try await withServer { server, client in
            let port = try #require(server.port)
            try await RawPeer.with(port: port) { peer in
                try await peer.send(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
                try await peer.readUntilClosed()
            }
            let health = try await client.unary(
                healthCheck, request: HealthCheckRequest(), response: HealthCheckResponse.self)
            #expect(health.status == .serving)
        }
    }

    @Test func undecodablePayloadFailsTheCallNotTheConnection() async throws {
        try await withServer { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                // Field 1, length 5, but one byte follows: not a HealthCheckRequest.
                try await peer.send(
                    .headers(1, healthCheck),
                    Frame(type: .message, flags: .endStream, callID: 1, payload: ByteBuffer(bytes: [0x0A, 0x05, 0x61])))
                let failed = try #require(try await peer.readFrame())
                #expect(failed.type == .trailers && failed.callID == 1)
                #expect(try failed.decode(CallStatus.self).code == StatusCode.invalidArgument.rawValue)
                // Same connection, next call: served.
                try await peer.send(.headers(3, healthCheck), .request(3, HealthCheckRequest()))
                let message = try #require(try await peer.readFrame())
                #expect(message.type == .message && message.callID == 3)
                #expect(try message.decode(HealthCheckResponse.self).status == .serving)
                let trailers = try #require(try await peer.readFrame())
                #expect(trailers.type == .trailers && trailers.callID == 3)
                #expect(try trailers.decode(CallStatus.self).code == 0)
            }
        }
    }

    @Test func compressedRequestIsInflated() async throws {
        try await withServer { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                var request = ByteBuffer()
                HealthCheckRequest(service: "").serialize(into: &request)
                try await peer.send(
                    .headers(1, healthCheck),
                    Frame(type: .message, flags: [.endStream, .compressed], callID: 1, payload: Zlib.compress(request)))
                let message = try #require(try await peer.readFrame())
                #expect(message.type == .message)
                let payload =
                    message.flags.contains(.compressed)
                    ? try Zlib.decompress(message.payload, limit: 1024) : message.payload
                #expect(try HealthCheckResponse(serializedBytes: payload).status == .serving)
            }
        }
    }

    @Test func unknownMethodIsUnimplemented() async throws {
        try await withServer { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                try await peer.send(.headers(1, "/no.Such/Method"), .request(1, Ping(opaque: 1)))
                let trailers = try #require(try await peer.readFrame())
                #expect(trailers.type == .trailers)
                let status = try trailers.decode(CallStatus.self)
                #expect(status.code == StatusCode.unimplemented.rawValue)
                #expect(status.message.contains("/no.Such/Method"))
            }
        }
    }

    @Test func serverEnforcesTimeoutAndCancelsTheHandler() async throws {
        let probe = Probe()
        try await withServer(probe: probe) { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                try await peer.send(
                    .headers(1, TestService.prefix + "Hold", timeoutMs: 50), .request(1, Ping(opaque: 1)))
                let trailers = try #require(try await peer.readFrame())
                #expect(trailers.type == .trailers && trailers.callID == 1)
                #expect(try trailers.decode(CallStatus.self).code == StatusCode.deadlineExceeded.rawValue)
                await probe.wait(for: .cancelled(1))
            }
        }
    }

    @Test func cancelFrameStopsTheHandlerAndNothingMoreIsSent() async throws {
        let probe = Probe()
        try await withServer(probe: probe) { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                try await peer.send(.headers(1, TestService.prefix + "Hold"), .request(1, Ping(opaque: 7)))
                await probe.wait(for: .started(7))
                try await peer.send(Frame(type: .cancel, callID: 1))
                await probe.wait(for: .cancelled(7))
                // The next frame on the connection belongs to call 3: call 1 got nothing after CANCEL.
                try await peer.send(.headers(3, TestService.prefix + "Echo"), .request(3, Ping(opaque: 3)))
                let next = try #require(try await peer.readFrame())
                #expect(next.callID == 3)
            }
        }
    }

    @Test(arguments: [
        (
            "HEADERS reusing a call id",
            [Frame.headers(5, healthCheck), .request(5, HealthCheckRequest()), .headers(5, healthCheck)]
        ),
        ("MESSAGE for a call never opened", [Frame.request(9, HealthCheckRequest())]),
        ("undecodable HEADERS", [Frame(type: .headers, callID: 1, payload: ByteBuffer(bytes: [0xFF]))]),
    ])
    func breachesAreConnectionErrors(_ breach: String, frames: [Frame]) async throws {
        try await withServer { server, client in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                var opening = ByteBuffer(bytes: Frame.preface)
                for frame in frames { frame.write(to: &opening) }
                try await peer.send(Array(opening.readableBytesView))
                var goAway: Frame?
                while let frame = try await peer.readFrame() {
                    if frame.type == .goAway { goAway = frame }
                }
                let frame = try #require(goAway, "\(breach): expected GOAWAY before the close")
                #expect(try frame.decode(GoAway.self).code == StatusCode.internal.rawValue, "\(breach)")
            }
            let health = try await client.unary(
                healthCheck, request: HealthCheckRequest(), response: HealthCheckResponse.self)
            #expect(health.status == .serving)
        }
    }

    @Test func unknownFrameTypesAreIgnored() async throws {
        try await withServer { server, _ in
            try await RawPeer.with(port: try #require(server.port)) { peer in
                try await peer.send(Frame.preface)
                try await peer.send(
                    Frame(type: FrameType(rawValue: 99), callID: 0, payload: ByteBuffer(bytes: [1, 2, 3])))
                try await peer.send(.headers(1, TestService.prefix + "Echo"), .request(1, Ping(opaque: 11)))
                let message = try #require(try await peer.readFrame())
                #expect(try message.decode(Ping.self) == Ping(opaque: 11))
            }
        }
    }
}

/// The resident set size of this process, from /proc.
func residentBytes() -> Int {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = statm.split(separator: " ")
    return fields.count > 1 ? (Int(fields[1]) ?? 0) * 4096 : 0
}
