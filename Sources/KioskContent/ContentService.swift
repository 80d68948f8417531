import KioskAPI
import KioskRPC
import KioskWire
import NIOConcurrencyHelpers

/// The content service's RPC service, `kiosk.content.v1.Content`.
public struct ContentService: RPCService {
    /// The service name.
    public static let name = "kiosk.content.v1.Content"
    public var serviceName: String { Self.name }

    let library: ContentLibrary
    let gate: ReceiptGate
    let limiter: DownloadLimiter
    /// The credential `Stats` callers must show: the service's own at the store (role `content`).
    let operatorCredential: String

    static func method(_ name: String) -> String { "/\(Self.name)/\(name)" }

    public func register(in router: inout RPCRouter) {
        let library = self.library
        let gate = self.gate
        let limiter = self.limiter
        let caller = CallerAuthenticator(gate: gate)
        // Every granted Authorize answers the same bytes: encoded once.
        let granted = EncodedMessage(
            ContentV1.AuthorizeResponse(
                status: ReceiptStatus.valid.rawValue, allowed: true, refusal: "",
                reason: AccessDecision.granted(account: "").reason))
        router.registerUnary(
            Self.method("ListContent"), request: ContentV1.ListContentRequest.self,
            response: ContentV1.ListContentResponse.self
        ) { _, _ in
            ContentV1.ListContentResponse(
                items: library.items.map { item in
                    ContentV1.ContentItem(
                        productID: item.entry.productID, contentVersion: item.entry.version,
                        originalSize: item.originalSize,
                        compressedSize: item.compressedSize, sha256: item.sha256, title: item.entry.title,
                        chunkSize: item.chunkSize, entitlementID: item.entry.entitlement)
                })
        }
        // Inline: decided on the event loop that read the request (a signature check, no I/O), unless
        // the receipt names a key not fetched yet.
        router.registerInlineUnary(
            Self.method("Authorize"), request: ContentV1.AuthorizeRequest.self,
            response: ContentV1.AuthorizeResponse.self, authenticator: caller
        ) { request, context in
            let entitlement = try library.item(request.productID).entry.entitlement
            let caller = context.principal as? ReceiptGate.Caller
            @Sendable func answer(_ decision: AccessDecision) -> ContentV1.AuthorizeResponse {
                ContentV1.AuthorizeResponse(
                    status: decision.status.rawValue, allowed: decision.allowed, refusal: decision.refusal,
                    reason: decision.reason)
            }
            // The authenticator has checked the token already: it is only read again without it.
            switch try gate.authorizeNow(
                receipt: request.signedReceipt, productID: request.productID, entitlement: entitlement,
                token: caller == nil ? context.metadata.bearerToken : nil, caller: caller?.lookup)
            {
            case .decided(let decision) where decision.allowed:
                gate.counters.count(decision)
                return .encoded(granted)
            case .decided(let decision):
                gate.counters.count(decision)
                return .response(answer(decision))
            case .unknownKey:
                return .suspend {
                    answer(
                        try await gate.authorizeAfterFetchingKeys(
                            receipt: request.signedReceipt, productID: request.productID, entitlement: entitlement,
                            token: context.metadata.bearerToken, caller: caller))
                }
            }
        }
        router.registerServerStreaming(
            Self.method("Download"), request: ContentV1.DownloadRequest.self, response: ContentV1.DownloadPart.self,
            authenticator: caller
        ) { request, writer, context in
            let item = try library.item(request.productID)
            guard request.resumeOffset <= item.originalSize else {
                throw RPCError(
                    .outOfRange,
                    "resume_offset \(request.resumeOffset) is past the end of \(request.productID) (\(item.originalSize) bytes)"
                )
            }
            let decision = try await gate.authorize(
                receipt: request.signedReceipt, productID: request.productID, entitlement: item.entry.entitlement,
                token: context.metadata.bearerToken, caller: context.principal as? ReceiptGate.Caller)
            guard decision.allowed else {
                var metadata = Metadata()
                metadata.add("kiosk-receipt-status", String(decision.status.rawValue))
                metadata.add("kiosk-refusal", decision.refusal)
                throw RPCError(
                    decision.callCode,
                    "download refused (\(decision.status.rawValue) \(decision.refusal)): \(decision.reason)",
                    metadata: metadata)
            }
            let account = decision.accountID ?? ""
            if let refusal = limiter.acquire(account: account) {
                throw RPCError(.resourceExhausted, refusal)
            }
            // The slot is held until the last bytes have been written, not only queued.
            writer.whenFinished { limiter.release(account: account) }
            // From the chunk holding resume_offset; at exactly the file's size no chunk holds it: the header alone.
            let start =
                request.resumeOffset >= item.originalSize || item.chunks.isEmpty
                ? item.chunks.count : min(Int(request.resumeOffset / UInt64(item.chunkSize)), item.chunks.count)
            try await writer.send(
                ContentV1.DownloadPart(
                    header: ContentV1.DownloadHeader(
                        contentVersion: item.entry.version, totalSize: item.originalSize, chunkSize: item.chunkSize,
                        sha256: item.sha256,
                        chunkCount: UInt32(item.chunks.count),
                        startOffset: start == item.chunks.count
                            ? item.originalSize : UInt64(start) * UInt64(item.chunkSize))))
            for index in start..<item.chunks.count {
                let chunk = item.chunks[index]
                try await writer.send(
                    ContentV1.DownloadPart(
                        chunk: ContentV1.DownloadChunk(
                            index: UInt32(index), offset: UInt64(index) * UInt64(item.chunkSize),
                            originalLength: chunk.originalLength,
                            compressed: chunk.compressed, crc32: chunk.crc32, data: try item.storedBytes(of: index),
                            sha256State: item.chunkStates[index])))
            }
        }
        // The service's counters are for whoever runs it: the caller shows the content service's own credential.
        router.registerUnary(
            Self.method("Stats"), request: ContentV1.StatsRequest.self, response: ContentV1.StatsResponse.self,
            authenticator: OperatorAuthenticator(credential: operatorCredential)
        ) { _, _ in
            let stats = gate.stats
            return ContentV1.StatsResponse(
                cacheHits: stats.cacheHits, cacheMisses: stats.cacheMisses, cacheEntries: UInt64(stats.cacheEntries),
                cacheCapacity: UInt64(stats.cacheCapacity), activeDownloads: UInt32(limiter.active),
                revocationsKnown: UInt64(stats.revocationsKnown), keysKnown: UInt32(stats.keysKnown),
                storeSilenceMs: stats.storeSilenceMs, revocationCursor: stats.revocationCursor)
        }
    }
}

/// The prepared hosted products, filled once preparation is done.
final class ContentLibrary: Sendable {
    private let state = NIOLockedValueBox<(items: [PreparedContent], byID: [String: PreparedContent])>(([], [:]))

    var items: [PreparedContent] { state.withLockedValue { $0.items } }

    func install(_ items: [PreparedContent]) {
        let byID = Dictionary(items.map { ($0.entry.productID, $0) }, uniquingKeysWith: { first, _ in first })
        state.withLockedValue { $0 = (items, byID) }
    }

    /// The hosted product `id`; NOT_FOUND for anything not in the manifest.
    func item(_ id: String) throws -> PreparedContent {
        guard let item = state.withLockedValue({ $0.byID[id] }) else {
            throw RPCError(.notFound, "product \(id.debugDescription) is not hosted here")
        }
        return item
    }
}

/// Admits callers that show `credential` (the content service's own service credential, role `content`): the
/// operator's tools. Compared in constant time; anyone else gets UNAUTHENTICATED before the request is read.
struct OperatorAuthenticator: RPCAuthenticator {
    let credential: String

    func authenticate(_ context: ServerContext) async throws -> (any Sendable)? {
        guard let token = context.metadata.bearerToken, !credential.isEmpty,
            Self.same(Array(token.utf8), Array(credential.utf8))
        else {
            throw RPCError(
                .unauthenticated,
                "Stats is for the service's operator: authorization: Bearer <the content service's store credential>")
        }
        return nil
    }

    private static func same(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}

/// Checks the buyer's access token of Authorize and Download from HEADERS,
/// offline, before the request (a receipt) is decoded.
struct CallerAuthenticator: RPCAuthenticator {
    let gate: ReceiptGate

    func authenticate(_ context: ServerContext) async throws -> (any Sendable)? {
        try gate.checkCaller(token: context.metadata.bearerToken)
    }

    func authenticateInline(_ context: ServerContext) throws -> InlineAuthentication {
        .principal(try gate.checkCaller(token: context.metadata.bearerToken))
    }

    /// A connection's next call with the same HEADERS (the same token) keeps the account its token
    /// gave while the token has not expired and no key has been retired since.
    func stillHolds(_ principal: (any Sendable)?) -> Bool {
        guard let caller = principal as? ReceiptGate.Caller else { return false }
        return gate.stillHolds(caller)
    }
}
