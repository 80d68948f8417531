import KioskAPI
import KioskSigning
import KioskWire
import NIOCore
import NIOEmbedded

/// What one fuzz input goes through, and the limits it runs under.
///
/// Thrown errors are expected for hostile bytes; a crash, a trap, a sanitizer
/// report or a failed `precondition` below is a bug. The preconditions are the
/// oracles: the three frame readers agree, re-encoding a decoded frame gives back
/// its bytes, a decoded message survives encode → decode unchanged, and zlib's
/// output limit is exact.
public enum Fuzz {
    /// The uniform payload limit of the static `readFrame` loop.
    public static let maximumPayloadSize = 64 * 1024
    /// The limit a compressed MESSAGE may inflate to.
    public static let decompressionLimit = 1024 * 1024

    /// A key the receipt verifier knows, so the "known key, bad signature" path runs too.
    static let verifier = ReceiptVerifier(
        keys: [
            ReceiptPublicKey(id: "ed25519-fuzz", rawRepresentation: Array(repeating: 0x42, count: 32), notBeforeMs: 0)
        ],
        environment: .production
    )
}

/// Runs one input through the frame decoder (as a channel handler, as the
/// `FrameReader` the connection handlers use, and as the static `readFrame`
/// loop) and every decoded frame's payload through the message decoders.
public func fuzzOne(_ bytes: UnsafeRawBufferPointer) {
    let input = ByteBuffer(bytes: bytes)
    let viaChannel = framesThroughChannel(input)
    let viaReader = framesThroughReader(input)
    precondition(
        viaReader.frames == viaChannel.frames, "FrameReader and the channel's FrameDecoder read different frames")
    precondition(
        viaReader.wireErrorCode == viaChannel.wireErrorCode,
        "FrameReader and FrameDecoder refused differently: \(String(describing: viaReader.error)) / \(String(describing: viaChannel.error))"
    )
    let viaLoop = framesThroughLoop(input)
    checkAgreement(input: input, channel: viaChannel, loop: viaLoop)
    for frame in viaLoop.frames {
        decodePayload(of: frame)
    }
}

/// `fuzzOne` on an array, for tests and the corpus replayer.
public func fuzzOne(_ bytes: [UInt8]) {
    bytes.withUnsafeBytes { fuzzOne($0) }
}

// MARK: - Frames

struct Decoded {
    var frames: [Frame] = []
    var error: (any Error)?

    var wireErrorCode: WireError.Code? { (error as? WireError)?.code }
}

/// The input as a server reads it: `ByteToMessageHandler(FrameDecoder(expectPreface: true))`
/// in an `EmbeddedChannel`, fed in three slices whose cut points come from the last byte.
func framesThroughChannel(_ input: ByteBuffer) -> Decoded {
    let channel = EmbeddedChannel()
    do {
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameDecoder(expectPreface: true)))
    } catch {
        preconditionFailure("cannot add the frame decoder to an EmbeddedChannel: \(error)")
    }
    var result = Decoded()
    func drain() {
        do {
            while let frame = try channel.readInbound(as: Frame.self) { result.frames.append(frame) }
        } catch {
            preconditionFailure("FrameDecoder emitted something that is not a Frame: \(error)")
        }
    }
    for slice in slices(of: input) {
        do {
            try channel.writeInbound(slice)
        } catch {
            result.error = error
            break
        }
        drain()
    }
    drain()
    // EOF: decodeLast must not find frames the reads missed. Leftover bytes
    // (a truncated frame) may be reported as an error; that is fine.
    do {
        if case .leftOvers(let inbound, _, _) = try channel.finish() {
            precondition(inbound.isEmpty, "decodeLast produced \(inbound.count) frames that channelRead did not")
        }
    } catch {}
    return result
}

/// The input in three slices whose cut points come from its last byte: a
/// first cut inside the preface or the first header, a second anywhere after it.
func slices(of input: ByteBuffer) -> [ByteBuffer] {
    let count = input.readableBytes
    let selector = Int(input.getInteger(at: input.readerIndex + max(count - 1, 0), as: UInt8.self) ?? 0)
    let first = min(count, selector & 0x0F)
    let second = first + (count - first) * (selector >> 4) / 16
    var slices: [ByteBuffer] = []
    for (from, to) in [(0, first), (first, second), (second, count)] where to > from {
        slices.append(input.getSlice(at: input.readerIndex + from, length: to - from)!)
    }
    return slices
}

/// The input as a connection handler reads it: `FrameReader` with a server's
/// default limits, fed the same three slices as the channel.
func framesThroughReader(_ input: ByteBuffer) -> Decoded {
    var reader = FrameReader(expectPreface: true, limits: FrameLimits())
    var result = Decoded()
    reading: for slice in slices(of: input) {
        reader.append(slice)
        do {
            while let event = try reader.next() {
                if case .frame(let frame) = event { result.frames.append(frame) }
            }
        } catch {
            result.error = error
            break reading
        }
    }
    return result
}

/// The static loop: `FrameDecoder.readFrame` until it needs more bytes or
/// throws, after the preface when the input starts with it (from byte 0 when
/// it does not, so the fuzzer need not find the preface to reach the frames).
func framesThroughLoop(_ input: ByteBuffer) -> Decoded {
    var buffer = input
    if buffer.readableBytesView.starts(with: Frame.preface) {
        buffer.moveReaderIndex(forwardBy: Frame.preface.count)
    }
    let start = buffer.readerIndex
    var result = Decoded()
    while true {
        let before = buffer.readerIndex
        let frame: Frame?
        do {
            frame = try FrameDecoder.readFrame(from: &buffer, maximumPayloadSize: Fuzz.maximumPayloadSize)
        } catch {
            precondition(buffer.readerIndex == before, "readFrame moved the reader index before throwing")
            result.error = error
            break
        }
        guard let frame else {
            precondition(buffer.readerIndex == before, "readFrame moved the reader index without a frame")
            break
        }
        precondition(
            frame.payload.readableBytes <= Fuzz.maximumPayloadSize, "readFrame returned a payload over the limit")
        precondition(
            buffer.readerIndex == before + Frame.headerSize + frame.payload.readableBytes,
            "readFrame consumed the wrong number of bytes")
        result.frames.append(frame)
    }
    // Framing round trip: the frames written back are exactly the bytes consumed.
    var rewritten = ByteBuffer()
    for frame in result.frames { frame.write(to: &rewritten) }
    let consumed = input.getSlice(at: start, length: buffer.readerIndex - start)!
    precondition(rewritten == consumed, "frames written back differ from the bytes they were read from")
    return result
}

/// The channel (server defaults: 4 MiB) and the loop (a uniform 64 KiB) read
/// the same frames, up to where one of them refuses a frame as too large.
func checkAgreement(input: ByteBuffer, channel: Decoded, loop: Decoded) {
    let preface = Frame.preface
    let head = input.readableBytesView.prefix(preface.count)
    guard head.count == preface.count, head.elementsEqual(preface) else {
        precondition(channel.frames.isEmpty, "frames decoded without the preface")
        if head.elementsEqual(preface.prefix(head.count)) {
            precondition(channel.error == nil, "a partial preface was refused: \(String(describing: channel.error))")
        } else {
            precondition(
                channel.wireErrorCode == .badPreface,
                "a wrong preface was not refused as such: \(String(describing: channel.error))")
        }
        return
    }
    let common = min(channel.frames.count, loop.frames.count)
    precondition(
        channel.frames.prefix(common) == loop.frames.prefix(common),
        "the channel and the static loop decoded different frames")
    if channel.frames.count < loop.frames.count {
        precondition(
            channel.wireErrorCode == .frameTooLarge,
            "the channel stopped early without refusing a frame: \(String(describing: channel.error))")
    } else if channel.frames.count > loop.frames.count {
        precondition(
            loop.wireErrorCode == .frameTooLarge,
            "the loop stopped early without refusing a frame: \(String(describing: loop.error))")
    } else {
        precondition(
            (channel.wireErrorCode == .frameTooShort) == (loop.wireErrorCode == .frameTooShort),
            "one reader refused a short LENGTH, the other did not: \(String(describing: channel.error)) / \(String(describing: loop.error))"
        )
        if let code = channel.wireErrorCode {
            precondition(code == .frameTooShort || code == .frameTooLarge, "unexpected channel error \(code)")
        } else if let error = channel.error {
            preconditionFailure("the channel threw something other than a WireError: \(error)")
        }
    }
}

// MARK: - Messages

/// Decodes a frame's payload as the message its TYPE says.
func decodePayload(of frame: Frame) {
    switch frame.type {
    case .headers:
        if let headers = roundTrip(CallHeaders.self, frame.payload) {
            // What a server reads from headers before dispatching.
            _ = headers.metadata.bearerToken
            _ = headers.metadata["idempotency-key"]
            _ = headers.metadata.values(for: "authorization")
            for entry in headers.metadata { _ = roundTrip(MetadataEntry.self, entry) }
        }
    case .message:
        var body = frame.payload
        if frame.flags.contains(.compressed) {
            guard let inflated = inflate(frame.payload) else { return }
            body = inflated
        }
        decodeMessageBody(body)
    case .trailers:
        _ = roundTrip(CallStatus.self, frame.payload)
    case .ping, .pong:
        _ = roundTrip(Ping.self, frame.payload)
    case .goAway:
        _ = roundTrip(GoAway.self, frame.payload)
    case .windowUpdate:
        _ = roundTrip(WindowUpdate.self, frame.payload)
    default:
        break
    }
}

/// Inflates a COMPRESSED payload; checks that the output limit is exact and
/// that compressing the output again round-trips.
func inflate(_ payload: ByteBuffer) -> ByteBuffer? {
    let inflated: ByteBuffer
    do {
        inflated = try Zlib.decompress(payload, limit: Fuzz.decompressionLimit)
    } catch {
        precondition(
            error.code == .decompressionFailed || error.code == .decompressedTooLarge, "unexpected zlib error \(error)")
        return nil
    }
    let size = inflated.readableBytes
    precondition(size <= Fuzz.decompressionLimit, "Zlib.decompress returned \(size) bytes past its limit")
    do {
        let exact = try Zlib.decompress(payload, limit: size)
        precondition(exact == inflated, "inflating with limit = its size gave different bytes")
    } catch {
        preconditionFailure("a stream of \(size) bytes was refused with limit \(size): \(error)")
    }
    if size > 0 {
        do {
            _ = try Zlib.decompress(payload, limit: size - 1)
            preconditionFailure("a stream of \(size) bytes inflated under limit \(size - 1)")
        } catch {
            precondition(error.code == .decompressedTooLarge, "limit \(size - 1) on \(size) bytes gave \(error)")
        }
    }
    let again = Zlib.compress(inflated)
    do {
        let back = try Zlib.decompress(again, limit: size)
        precondition(back == inflated, "compress → decompress changed the bytes")
    } catch {
        preconditionFailure("Zlib.compress output does not inflate: \(error)")
    }
    return inflated
}

/// Decodes a MESSAGE body as every request and response type the services
/// exchange, and follows the receipts a request carries as the services do.
func decodeMessageBody(_ body: ByteBuffer) {
    // Health.
    _ = roundTrip(HealthCheckRequest.self, body)
    _ = roundTrip(HealthCheckResponse.self, body)
    // Store.
    _ = roundTrip(StoreV1.ListProductsRequest.self, body)
    _ = roundTrip(StoreV1.ListProductsResponse.self, body)
    _ = roundTrip(StoreV1.GetAccountRequest.self, body)
    _ = roundTrip(StoreV1.Account.self, body)
    _ = roundTrip(StoreV1.PurchaseRequest.self, body)
    _ = roundTrip(StoreV1.PurchaseResponse.self, body)
    _ = roundTrip(StoreV1.UnfinishedRequest.self, body)
    _ = roundTrip(StoreV1.UnfinishedResponse.self, body)
    _ = roundTrip(StoreV1.FinishRequest.self, body)
    _ = roundTrip(StoreV1.FinishResponse.self, body)
    _ = roundTrip(StoreV1.RestoreRequest.self, body)
    _ = roundTrip(StoreV1.SpendCreditsRequest.self, body)
    _ = roundTrip(StoreV1.SpendCreditsResponse.self, body)
    if let request = roundTrip(StoreV1.VerifyReceiptRequest.self, body) {
        verifyReceipt(request.signedReceipt)
    }
    _ = roundTrip(StoreV1.VerifyReceiptResponse.self, body)
    _ = roundTrip(StoreV1.PublicKeysRequest.self, body)
    _ = roundTrip(StoreV1.PublicKeysResponse.self, body)
    _ = roundTrip(StoreV1.WatchRevocationsRequest.self, body)
    _ = roundTrip(StoreV1.Revocation.self, body)
    _ = roundTrip(StoreV1.WatchEventsRequest.self, body)
    _ = roundTrip(StoreV1.WatchEventsResponse.self, body)
    _ = roundTrip(StoreV1.ListEventsRequest.self, body)
    _ = roundTrip(StoreV1.ListEventsResponse.self, body)
    if let signed = roundTrip(StoreV1.SignedEvent.self, body) {
        _ = roundTrip(StoreV1.Event.self, ByteBuffer(bytes: signed.event))
    }
    _ = roundTrip(StoreV1.Event.self, body)
    _ = roundTrip(StoreV1.GetTransactionRequest.self, body)
    _ = roundTrip(StoreV1.ListTransactionsRequest.self, body)
    _ = roundTrip(StoreV1.ListTransactionsResponse.self, body)
    _ = roundTrip(StoreV1.RequestRefundRequest.self, body)
    _ = roundTrip(StoreV1.RefundRequestStatus.self, body)
    _ = roundTrip(StoreV1.ListRefundRequestsRequest.self, body)
    _ = roundTrip(StoreV1.ListRefundRequestsResponse.self, body)
    _ = roundTrip(StoreV1.DenyRefundRequest.self, body)
    // Content.
    _ = roundTrip(ContentV1.ListContentRequest.self, body)
    _ = roundTrip(ContentV1.ListContentResponse.self, body)
    if let request = roundTrip(ContentV1.AuthorizeRequest.self, body) {
        verifyReceipt(request.signedReceipt)
    }
    _ = roundTrip(ContentV1.AuthorizeResponse.self, body)
    if let request = roundTrip(ContentV1.DownloadRequest.self, body) {
        verifyReceipt(request.signedReceipt)
    }
    _ = roundTrip(ContentV1.DownloadPart.self, body)
    _ = roundTrip(ContentV1.StatsRequest.self, body)
    _ = roundTrip(ContentV1.StatsResponse.self, body)
    // Receipts.
    if let signed = roundTrip(ReceiptV1.SignedReceipt.self, body) {
        _ = roundTrip(ReceiptV1.ReceiptPayload.self, ByteBuffer(bytes: signed.payload))
    }
    _ = roundTrip(ReceiptV1.ReceiptPayload.self, body)
}

/// What the store's VerifyReceipt and the content service do with a receipt's bytes.
func verifyReceipt(_ bytes: [UInt8]) {
    let check = Fuzz.verifier.verify(bytes, nowMs: 1_700_000_000_000)
    // Nobody can forge a signature by the fuzz key, so nothing is ever valid.
    precondition(check.status != .valid, "a receipt verified without a valid signature")
}

/// Decodes `payload` as `M`; when it decodes, checks that every encoder agrees
/// on its bytes and that those bytes decode to the same value.
func roundTrip<M: WireMessage & Equatable>(_ type: M.Type, _ payload: ByteBuffer) -> M? {
    let message: M
    do {
        message = try M(serializedBytes: payload)
    } catch {
        precondition(error.code == .malformedMessage, "decoding \(M.self) threw \(error)")
        // The other entry points must refuse it too.
        precondition(
            (try? M(serializedBytes: Array(payload.readableBytesView))) == nil,
            "\(M.self): [UInt8] decoded what ByteBuffer did not")
        return nil
    }
    do {
        let fromArray = try M(serializedBytes: Array(payload.readableBytesView))
        precondition(fromArray == message, "\(M.self): [UInt8] and ByteBuffer decodings differ")
    } catch {
        preconditionFailure("\(M.self): [UInt8] refused what ByteBuffer decoded: \(error)")
    }
    return roundTrip(M.self, message)
}

@discardableResult
func roundTrip<M: WireMessage & Equatable>(_ type: M.Type, _ message: M) -> M {
    let bytes = message.serializedBytes()
    precondition(bytes.count == message.serializedSize, "\(M.self): serializedSize disagrees with serializedBytes")
    var buffer = ByteBuffer()
    let written = message.serialize(into: &buffer)
    precondition(
        written == bytes.count && buffer.readableBytesView.elementsEqual(bytes),
        "\(M.self): serialize(into:) disagrees with serializedBytes")
    let frame = Frame(type: .message, callID: 1, message: message)
    precondition(
        frame.payload.readableBytesView.elementsEqual(bytes),
        "\(M.self): Frame(message:) disagrees with serializedBytes")
    do {
        let again = try M(serializedBytes: bytes)
        precondition(again == message, "\(M.self): encode → decode changed the value: \(message) → \(again)")
    } catch {
        preconditionFailure("\(M.self): its own encoding does not decode: \(error)")
    }
    return message
}
