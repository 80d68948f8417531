import KioskRPC
import KioskWire
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// Calls through the client against a real server on 127.0.0.1.
@Suite(.timeLimit(.minutes(1))) struct CallTests {
    let echo = TestService.prefix + "Echo"

    @Test func unaryCall() async throws {
        try await withServer { _, client in
            let reply = try await client.unary(echo, request: Ping(opaque: 42), response: Ping.self)
            #expect(reply == Ping(opaque: 42))
        }
    }

    /// The completion-handler unary: the first call connects (the awaited path), later ones run on the
    /// client's event loop with no task; calls made from a completion go out with the flush at the end of
    /// the read that completed it (a chain of 200, then 20 chains at once, all answered); a server's
    /// error arrives as the same ``RPCError`` the awaited call throws.
    @Test func completionHandlerCallsChainOnTheEventLoop() async throws {
        try await withServer { _, client in
            let echo = self.echo
            let loop = client.eventLoop
            @Sendable func chain(_ first: UInt64, count: UInt64, into done: EventLoopPromise<[UInt64]>) {
                let got = NIOLockedValueBox<[UInt64]>([])
                @Sendable func next(_ i: UInt64) {
                    guard i < first + count else { return done.succeed(got.withLockedValue { $0 }) }
                    client.unary(
                        echo, request: Ping(opaque: i), response: Ping.self, options: CallOptions(timeout: .seconds(10))
                    ) { result in
                        guard loop.inEventLoop else { return done.fail(TestFailure()) }
                        switch result {
                        case .success(let reply):
                            got.withLockedValue { $0.append(reply.opaque) }
                            next(i + 1)
                        case .failure(let error):
                            done.fail(error)
                        }
                    }
                }
                next(first)
            }
            let one = loop.makePromise(of: [UInt64].self)
            chain(0, count: 200, into: one)
            #expect(try await one.futureResult.get() == Array(0..<200))
            let many = (0..<20).map { _ in loop.makePromise(of: [UInt64].self) }
            loop.execute {
                for (index, done) in many.enumerated() { chain(UInt64(index) * 1000, count: 20, into: done) }
            }
            for (index, done) in many.enumerated() {
                #expect(try await done.futureResult.get() == Array(UInt64(index) * 1000..<UInt64(index) * 1000 + 20))
            }
            let failed = loop.makePromise(of: RPCError.self)
            client.unary(TestService.prefix + "Fail", request: Ping(opaque: 0), response: Ping.self) { result in
                if case .failure(let error) = result { failed.succeed(error) } else { failed.fail(TestFailure()) }
            }
            let error = try await failed.futureResult.get()
            #expect(
                error.code == .permissionDenied && error.source == .remote && error.metadata["reason"] == "restricted")
        }
    }

    /// A request encoded once is sent as is, again and again, awaited and with a completion handler, and
    /// answered as its typed form would be.
    @Test func encodedRequestsAreSentAsTheyAre() async throws {
        try await withServer { _, client in
            let echo = self.echo
            let encoded = EncodedMessage(Ping(opaque: 7))
            for _ in 0..<3 {
                let reply = try await client.unary(echo, encoded: encoded, response: Ping.self)
                #expect(reply == Ping(opaque: 7))
            }
            let answered = client.eventLoop.makePromise(of: Ping.self)
            client.unary(echo, encoded: encoded, response: Ping.self) { result in
                switch result {
                case .success(let reply): answered.succeed(reply)
                case .failure(let error): answered.fail(error)
                }
            }
            let chained = try await answered.futureResult.get()
            #expect(chained == Ping(opaque: 7))
            do {
                _ = try await client.unary(
                    TestService.prefix + "Fail", encoded: EncodedMessage(Ping(opaque: 0)), response: Ping.self)
                Issue.record("a failing method answered")
            } catch let error as RPCError {
                #expect(error.code == .permissionDenied && error.metadata["reason"] == "restricted")
            }
        }
    }

    /// A response taken still encoded comes as the server sent it and is decoded when asked;
    /// a failed call fails as with a typed response.
    @Test func responsesCanBeLeftEncoded() async throws {
        try await withServer { _, client in
            let request = EncodedMessage(Ping(opaque: 9))
            @Sendable func call<R: WireMessage>(
                _ method: String, as type: R.Type, request: EncodedMessage<Ping> = request
            ) async throws
                -> Result<EncodedMessage<R>, RPCError>
            {
                let answered = client.eventLoop.makePromise(of: Result<EncodedMessage<R>, RPCError>.self)
                client.unary(method, encoded: request, response: EncodedMessage<R>.self) { answered.succeed($0) }
                return try await answered.futureResult.get()
            }
            let reply = try await call(echo, as: Ping.self).get()
            #expect(try reply.decoded() == Ping(opaque: 9))
            // Ping's bytes (a varint in field 1) are not a HealthCheckRequest (a string in field 1): refused when decoded.
            let other = try await call(echo, as: HealthCheckRequest.self).get()
            #expect(throws: WireError.self) { try other.decoded() }
            switch try await call(TestService.prefix + "Fail", as: Ping.self, request: EncodedMessage(Ping(opaque: 0)))
            {
            case .success: Issue.record("a failing method answered")
            case .failure(let error):
                #expect(error.code == .permissionDenied && error.metadata["reason"] == "restricted")
            }
        }
    }

    /// Inline handlers answer at once, or suspend and answer from a task;
    /// behind an authenticator that cannot check inline, they run as a task.
    @Test func inlineUnaryCalls() async throws {
        try await withServer { _, client in
            try await withThrowingTaskGroup(of: (UInt64, UInt64).self) { group in
                for i in UInt64(0)..<90 {  // under the default cap of 100 calls open a connection
                    group.addTask {
                        (
                            i,
                            try await client.unary(
                                TestService.prefix + "InlineEcho", request: Ping(opaque: i), response: Ping.self
                            ).opaque
                        )
                    }
                }
                for try await (sent, got) in group { #expect(got == (sent % 2 == 1 ? sent * 10 : sent)) }
            }
            let ok = CallOptions(metadata: ["authorization": "Bearer ok"])
            #expect(
                try await client.unary(
                    TestService.prefix + "InlineBehindAsync", request: Ping(opaque: 1), response: Ping.self, options: ok
                ).opaque == 101)
            let refused = await #expect(throws: RPCError.self) {
                try await client.unary(
                    TestService.prefix + "InlineBehindAsync", request: Ping(opaque: 1), response: Ping.self,
                    options: CallOptions(metadata: ["authorization": "Bearer no"]))
            }
            #expect(refused?.code == .unauthenticated)
        }
    }

    @Test func serverStreamingCall() async throws {
        try await withServer { _, client in
            var received: [UInt64] = []
            for try await ping in client.serverStreaming(
                TestService.prefix + "Count", request: Ping(opaque: 500), response: Ping.self)
            {
                received.append(ping.opaque)
            }
            #expect(received == Array(0..<500))
            // An empty stream ends at once.
            var none = 0
            for try await _ in client.serverStreaming(
                TestService.prefix + "Count", request: Ping(opaque: 0), response: Ping.self)
            { none += 1 }
            #expect(none == 0)
        }
    }

    @Test func thousandCallsInFlightOnOneConnection() async throws {
        let calls = 1_000
        let probe = Probe(gatherTarget: calls)
        // The default cap is 100 calls a connection; this server allows all 1,000 at once.
        let configuration = ServerConfiguration(
            shutdownGracePeriod: .seconds(5), limits: ServerLimits(maximumConcurrentCalls: calls))
        try await withServer(probe: probe, configuration: configuration) { _, client in
            // Gather answers only once all 1,000 calls are in the server at the same time.
            try await withThrowingTaskGroup(of: (UInt64, UInt64).self) { group in
                for i in 0..<UInt64(calls) {
                    group.addTask {
                        let reply = try await client.unary(
                            TestService.prefix + "Gather", request: Ping(opaque: i), response: Ping.self)
                        return (i, reply.opaque)
                    }
                }
                var answered = 0
                for try await (sent, got) in group {
                    #expect(sent == got)
                    answered += 1
                }
                #expect(answered == calls)
            }
        }
    }

    @Test func deadlineExceeded() async throws {
        let probe = Probe()
        // Set after the options were made: the call takes the timeout as set last.
        var options = CallOptions(timeout: .seconds(3600))
        options.timeout = .milliseconds(100)
        try await withServer(probe: probe) { _, client in
            let error = await #expect(throws: RPCError.self) {
                try await client.unary(
                    TestService.prefix + "Hold", request: Ping(opaque: 1), response: Ping.self, options: options)
            }
            #expect(error?.code == .deadlineExceeded)
            // The handler was cancelled on the server, not left running.
            await probe.wait(for: .cancelled(1))
        }
    }

    /// A suspended inline call is a task like any other: its deadline cancels it on the server.
    @Test func deadlineEndsASuspendedInlineCall() async throws {
        let probe = Probe()
        try await withServer(probe: probe) { _, client in
            let error = await #expect(throws: RPCError.self) {
                try await client.unary(
                    TestService.prefix + "InlineHold", request: Ping(opaque: 3), response: Ping.self,
                    options: CallOptions(timeout: .milliseconds(100)))
            }
            #expect(error?.code == .deadlineExceeded)
            await probe.wait(for: .cancelled(3))
        }
    }

    @Test func cancelledTaskSendsCancelToTheHandler() async throws {
        let probe = Probe()
        try await withServer(probe: probe) { _, client in
            let task = Task {
                try await client.unary(TestService.prefix + "Hold", request: Ping(opaque: 2), response: Ping.self)
            }
            await probe.wait(for: .started(2))
            task.cancel()
            await probe.wait(for: .cancelled(2))
            let error = await #expect(throws: RPCError.self) { try await task.value }
            #expect(error?.code == .cancelled)
            #expect(error?.source == .local)
        }
    }

    @Test func unknownMethod() async throws {
        try await withServer { _, client in
            let error = await #expect(throws: RPCError.self) {
                try await client.unary("/kiosk.test.v1.Test/Nope", request: Ping(opaque: 1), response: Ping.self)
            }
            #expect(error?.code == .unimplemented)
            #expect(error?.source == .remote)
        }
    }

    @Test func handlerErrorsMapToStatusCodes() async throws {
        try await withServer { _, client in
            let denied = await #expect(throws: RPCError.self) {
                try await client.unary(TestService.prefix + "Fail", request: Ping(opaque: 0), response: Ping.self)
            }
            #expect(denied?.code == .permissionDenied)
            #expect(denied?.message == "payments are not allowed")
            #expect(denied?.metadata["reason"] == "restricted")
            let unknown = await #expect(throws: RPCError.self) {
                try await client.unary(TestService.prefix + "Fail", request: Ping(opaque: 1), response: Ping.self)
            }
            #expect(unknown?.code == .unknown)
            #expect(unknown?.message.contains("failed on purpose") == true)
        }
    }

    @Test func metadataAndDeadlineReachTheHandler() async throws {
        try await withServer { _, client in
            var metadata = Metadata()
            metadata.add("authorization", "Bearer s3cr3t")
            metadata.add("idempotency-key", "k-1")
            let seen = try await client.unary(
                TestService.prefix + "Whoami", request: Ping(opaque: 0), response: CallHeaders.self,
                options: CallOptions(timeout: .seconds(30), metadata: metadata))
            #expect(seen.method == TestService.prefix + "Whoami")
            #expect(seen.metadata.bearerToken == "s3cr3t")
            #expect(seen.metadata["idempotency-key"] == "k-1")
            #expect((29_000...30_001).contains(seen.timeoutMs), "the handler saw the 30 s deadline, less the trip")
            // No timeout: no deadline.
            let none = try await client.unary(
                TestService.prefix + "Whoami", request: Ping(opaque: 0), response: CallHeaders.self)
            #expect(none.timeoutMs == 0)
        }
    }

    /// Timeouts past what the header can carry are clamped (no overflow trap), and one already past
    /// fails the call at once instead of meaning "no deadline".
    @Test func extremeTimeoutsAreClamped() async throws {
        try await withServer { _, client in
            let far = try await client.unary(
                TestService.prefix + "Whoami", request: Ping(opaque: 0), response: CallHeaders.self,
                options: CallOptions(timeout: .seconds(Int64.max / 2)))
            #expect(far.timeoutMs > 4_000_000_000, "about UInt32.max ms, the most the header holds")
            let error = await #expect(throws: RPCError.self) {
                try await client.unary(
                    TestService.prefix + "Hold", request: Ping(opaque: 1), response: Ping.self,
                    options: CallOptions(timeout: .seconds(-1)))
            }
            #expect(error?.code == .deadlineExceeded)
        }
    }

    @Test func compressedCallsRoundTrip() async throws {
        try await withServer { _, client in
            let reply = try await client.unary(
                TestService.prefix + "Blob", request: MetadataEntry(key: "b", value: "100000"),
                response: MetadataEntry.self, options: CallOptions(compress: true))
            #expect(reply.value.utf8.count == 600_000)
        }
    }

    @Test func oversizedResponseFailsTheCallOnly() async throws {
        // 6 MB of response is above the 4 MiB limit unless compressed below it.
        try await withServer { _, client in
            let error = await #expect(throws: RPCError.self) {
                try await client.unary(
                    TestService.prefix + "Blob", request: MetadataEntry(key: "b", value: "1000000"),
                    response: MetadataEntry.self)
            }
            #expect(error?.code == .resourceExhausted)
            #expect(error?.source == .remote)
            #expect(error?.message.contains("exceeds the message size limit") == true)
            // The client refuses to send what the server would refuse, before sending.
            let tooBig = MetadataEntry(key: "b", binaryValue: Array(repeating: 1, count: 5 << 20))
            let refused = await #expect(throws: RPCError.self) {
                try await client.unary(TestService.prefix + "Blob", request: tooBig, response: MetadataEntry.self)
            }
            #expect(refused?.code == .resourceExhausted)
            #expect(refused?.source == .local)
            let reply = try await client.unary(echo, request: Ping(opaque: 5), response: Ping.self)
            #expect(reply.opaque == 5)
        }
    }

    @Test func slowReaderKeepsServerBufferBoundedAndOtherCallsFlow() async throws {
        let probe = Probe()
        try await withServer(probe: probe) { _, client in
            var flood = client.serverStreaming(
                TestService.prefix + "Flood", request: Ping(opaque: 200), response: MetadataEntry.self
            )
            .makeAsyncIterator()
            // Read one message, then stop reading.
            _ = try await flood.next()
            // The handler gets 16 messages of 64 KiB (+ 9 bytes of framing) out before the
            // 1 MiB window is spent; then its send waits.
            let windowMessages = (OutboundFlowWindow.initialSize + 65_545 - 1) / 65_545
            #expect(windowMessages == 16)
            // A unary call on the same connection still completes.
            let reply = try await client.unary(echo, request: Ping(opaque: 9), response: Ping.self)
            #expect(reply.opaque == 9)
            // Wait (bounded by the suite's time limit) until the window is spent; never beyond it.
            while probe.sent.withLockedValue({ $0 }) < windowMessages { await Task.yield() }
            let again = try await client.unary(echo, request: Ping(opaque: 10), response: Ping.self)
            #expect(again.opaque == 10)
            #expect(probe.sent.withLockedValue { $0 } == windowMessages, "server sent past the window")
            // Reading on reopens the window: everything arrives.
            var received = 1
            while try await flood.next() != nil { received += 1 }
            #expect(received == 200)
        }
    }

    @Test func droppedStreamCancelsTheHandler() async throws {
        let probe = Probe()
        try await withServer(probe: probe) { _, client in
            do {
                var flood = client.serverStreaming(
                    TestService.prefix + "Flood", request: Ping(opaque: 1_000), response: MetadataEntry.self
                )
                .makeAsyncIterator()
                _ = try await flood.next()
            }
            // The iterator is gone: CANCEL reached the handler, whose send failed.
            await probe.wait(for: .cancelled(1_000))
        }
    }

    @Test func gracefulShutdownLetsInFlightCallsFinish() async throws {
        let probe = Probe()
        let server = RPCServer(
            configuration: ServerConfiguration(shutdownGracePeriod: .seconds(30)), services: [TestService(probe: probe)]
        )
        try await server.start()
        let port = try #require(server.port)
        let client = RPCClient(host: "127.0.0.1", port: port)
        let held = Task {
            try await client.unary(TestService.prefix + "Hold", request: Ping(opaque: 3), response: Ping.self)
        }
        await probe.wait(for: .started(3))

        server.beginShutdown()
        // A new call is refused with UNAVAILABLE while the old one drains.
        let late = RPCClient(
            host: "127.0.0.1", port: port,
            configuration: ClientConfiguration(
                backoff: .init(
                    initial: .milliseconds(10), maximum: .milliseconds(10), multiplier: 1, jitter: 0, maximumAttempts: 1
                )))
        let refused = await #expect(throws: RPCError.self) {
            try await late.unary(TestService.prefix + "Echo", request: Ping(opaque: 4), response: Ping.self)
        }
        #expect(refused?.code == .unavailable)

        let shutdown = Task { await server.shutdown() }
        probe.release()
        #expect(try await held.value == Ping(opaque: 3))
        await shutdown.value
        // The listener is closed now.
        let gone = await #expect(throws: RPCError.self) {
            try await late.unary(TestService.prefix + "Echo", request: Ping(opaque: 5), response: Ping.self)
        }
        #expect(gone?.isConnectFailure == true)
        await client.close()
        await late.close()
    }

    @Test func shutdownPastGraceEndsCallsWithUnavailable() async throws {
        let probe = Probe()
        let server = RPCServer(services: [TestService(probe: probe)])
        try await server.start()
        let client = RPCClient(host: "127.0.0.1", port: try #require(server.port))
        let held = Task {
            try await client.unary(TestService.prefix + "Hold", request: Ping(opaque: 6), response: Ping.self)
        }
        await probe.wait(for: .started(6))
        await server.shutdown(gracePeriod: .milliseconds(50))
        let error = await #expect(throws: RPCError.self) { try await held.value }
        #expect(error?.code == .unavailable)
        await probe.wait(for: .cancelled(6))
        await client.close()
    }

    @Test func healthService() async throws {
        try await withServer { _, client in
            for service in ["", "kiosk.rpc.v1.Health", "kiosk.test.v1.Test"] {
                let reply = try await client.unary(
                    healthCheck, request: HealthCheckRequest(service: service), response: HealthCheckResponse.self)
                #expect(reply.status == .serving)
            }
            let error = await #expect(throws: RPCError.self) {
                try await client.unary(
                    healthCheck, request: HealthCheckRequest(service: "no.Such"), response: HealthCheckResponse.self)
            }
            #expect(error?.code == .notFound)
        }
    }
}
