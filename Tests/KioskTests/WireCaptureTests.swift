import Foundation
import Kiosk
import KioskTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// Relays TCP from 127.0.0.1:`port` to a target port and keeps every byte that
/// crosses, both ways: what a capture of the loopback traffic would see.
final class RecordingRelay: Sendable {
    let recorded = NIOLockedValueBox<[UInt8]>([])
    private let listener: NIOLockedValueBox<Channel?> = NIOLockedValueBox(nil)
    private let connections = NIOLockedValueBox<[Channel]>([])
    /// Bytes relayed from the target so far, and the count at which the relay dies (nil: never).
    private let fromTarget = NIOLockedValueBox(0)
    let cutAfter: Int?

    var port: Int { listener.withLockedValue { $0?.localAddress?.port } ?? 0 }

    init(cutAfter: Int? = nil) { self.cutAfter = cutAfter }

    /// - Parameter cutAfter: once this many bytes came back from the target, the relay dies as a killed
    ///   process would: it stops listening (a reconnect is refused) and drops every connection.
    static func start(to targetPort: Int, cutAfter: Int? = nil) async throws -> RecordingRelay {
        let relay = RecordingRelay(cutAfter: cutAfter)
        let group = MultiThreadedEventLoopGroup.singleton
        let channel = try await ServerBootstrap(group: group)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                relay.connections.withLockedValue { $0.append(inbound) }
                let inboundHandler = RelayHandler(relay: relay)
                return inbound.pipeline.addHandler(inboundHandler).flatMap {
                    ClientBootstrap(group: inbound.eventLoop)
                        .channelInitializer { outbound in
                            let outboundHandler = RelayHandler(relay: relay, fromTarget: true)
                            outboundHandler.partner = inbound
                            return outbound.pipeline.addHandler(outboundHandler)
                        }
                        .connect(host: "127.0.0.1", port: targetPort)
                        .flatMap { outbound in
                            inboundHandler.partner = outbound
                            return inbound.setOption(ChannelOptions.autoRead, value: true)
                        }
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        relay.listener.withLockedValue { $0 = channel }
        return relay
    }

    func close() async {
        try? await listener.withLockedValue { $0 }?.close()
    }

    /// Dies now: the listener first (so no reconnect lands here), then every connection.
    func kill() async {
        await close()
        for connection in connections.withLockedValue({ $0 }) { try? await connection.close() }
    }

    /// Counts bytes from the target; true once the relay should die.
    fileprivate func relayedFromTarget(_ count: Int) -> Bool {
        guard let cutAfter else { return false }
        return fromTarget.withLockedValue { total in
            total += count
            return total >= cutAfter
        }
    }

    /// True when `needle` appears anywhere in what crossed.
    func saw(_ needle: [UInt8]) -> Bool {
        let haystack = recorded.withLockedValue { $0 }
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        let first = needle[0]
        for start in 0...(haystack.count - needle.count) where haystack[start] == first {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}

/// Copies what one side sends to the other, recording it.
private final class RelayHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let relay: RecordingRelay
    let fromTarget: Bool
    var partner: Channel?

    init(relay: RecordingRelay, fromTarget: Bool = false) {
        self.relay = relay
        self.fromTarget = fromTarget
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        relay.recorded.withLockedValue { $0 += Array(buffer.readableBytesView) }
        if fromTarget, relay.relayedFromTarget(buffer.readableBytes) {
            let relay = self.relay
            Task { await relay.kill() }
            return
        }
        partner?.writeAndFlush(buffer, promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        partner?.close(promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}

/// What crosses the network: with TLS, no token, receipt, product or protocol byte in the clear.
@Suite(.timeLimit(.minutes(2))) struct WireCaptureTests {
    @Test func aPurchaseAndDownloadShowNothingInTheClear() async throws {
        try await withSession { session in
            let storeRelay = try await RecordingRelay.start(to: session.storePort)
            let contentRelay = try await RecordingRelay.start(to: session.contentPort)
            let account = try session.makeAccount()
            var configuration = session.configuration(
                account: account, stateDirectory: NSTemporaryDirectory() + "kiosk-capture-" + UUID().uuidString)
            configuration.storePort = storeRelay.port
            configuration.contentPort = contentRelay.port
            let kiosk = try KioskClient(configuration: configuration)
            guard
                case .success(let transaction) = try await kiosk.purchase(productID: "book.swift", paymentMethod: card)
            else {
                Issue.record("the purchase did not succeed")
                return
            }
            let directory = URL(fileURLWithPath: NSTemporaryDirectory() + "kiosk-capture-books-" + UUID().uuidString)
            var finished = false
            for await event in kiosk.download(productID: "book.swift", transaction: transaction, to: directory).events {
                if case .finished = event.state { finished = true }
            }
            #expect(finished)
            #expect(try await kiosk.verify(receipt: transaction.signedReceipt).status == 0)
            try await kiosk.finish(transaction)
            await kiosk.close()
            await storeRelay.close()
            await contentRelay.close()

            let book = KioskTestSession.sampleContent["book.swift"] ?? []
            for relay in [storeRelay, contentRelay] {
                let bytes = relay.recorded.withLockedValue { $0 }
                #expect(bytes.count > 1000, "the relay saw the traffic")
                #expect(bytes.first == 0x16, "the first byte is a TLS handshake record")
                #expect(!relay.saw(Array(account.token.utf8)), "the account token")
                #expect(!relay.saw(Array("kat1.".utf8)), "an access token")
                #expect(!relay.saw(Array(transaction.signedReceipt.prefix(48))), "the receipt")
                #expect(!relay.saw(Array(transaction.id.utf8)), "the transaction id")
                #expect(!relay.saw(Array("book.swift".utf8)), "the product id")
                #expect(!relay.saw(Array("KIOSK/1".utf8)), "the protocol preface")
                #expect(!relay.saw(Array(book[1000..<1064])), "the book's text")
            }
            try? FileManager.default.removeItem(at: directory)
        }
    }
}
