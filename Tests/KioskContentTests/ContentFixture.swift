import Crypto
import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStore
import KioskWire
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import KioskContent

let hostedCatalog = Catalog(
    bundleID: "com.example.books",
    products: [
        CatalogProduct(
            id: "book.swift", type: .nonConsumable, title: "The Swift Book", description: "", price: "9.99",
            currency: "USD",
            credits: 0, maxQuantity: 1, hostedContent: true, subscriptionPeriod: nil),
        CatalogProduct(
            id: "file.empty", type: .nonConsumable, title: "Empty", description: "", price: "0.99", currency: "USD",
            credits: 0, maxQuantity: 1, hostedContent: true, subscriptionPeriod: nil),
        CatalogProduct(
            id: "file.one", type: .nonConsumable, title: "One byte", description: "", price: "0.99", currency: "USD",
            credits: 0, maxQuantity: 1, hostedContent: true, subscriptionPeriod: nil),
        CatalogProduct(
            id: "big.random", type: .nonConsumable, title: "Noise", description: "", price: "0.99", currency: "USD",
            credits: 0, maxQuantity: 1, hostedContent: true, subscriptionPeriod: nil),
        CatalogProduct(
            id: "big.text", type: .nonConsumable, title: "Prose", description: "", price: "0.99", currency: "USD",
            credits: 0, maxQuantity: 1, hostedContent: true, subscriptionPeriod: nil),
    ])

let card = "test-card:4242424242424242"

func temporaryDirectory(_ name: String) -> String {
    let path = NSTemporaryDirectory() + "kiosk-content-test-\(name)-" + UUID().uuidString
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Random bytes from the kernel, fast even in a debug build.
func randomBytes(_ count: Int) -> [UInt8] {
    guard count > 0, let handle = FileHandle(forReadingAtPath: "/dev/urandom") else { return [] }
    defer { try? handle.close() }
    return [UInt8](handle.readData(ofLength: count))
}

/// Text that compresses well.
func proseBytes(_ count: Int) -> [UInt8] {
    let line = Array("In-app purchases, restored and verified: chunk after chunk of the same old story.\n".utf8)
    var out = [UInt8]()
    out.reserveCapacity(count + line.count)
    while out.count < count { out += line }
    return Array(out.prefix(count))
}

/// Writes a content directory: the files and a manifest naming them.
func makeContentDirectory(files: [String: [UInt8]], extraManifest: String = "") throws -> String {
    let directory = temporaryDirectory("content")
    var entries: [String] = []
    for (product, bytes) in files.sorted(by: { $0.key < $1.key }) {
        let file = "files/\(product).bin"
        try FileManager.default.createDirectory(atPath: directory + "/files", withIntermediateDirectories: true)
        try Data(bytes).write(to: URL(fileURLWithPath: directory + "/" + file))
        entries.append(#"{"product_id": "\#(product)", "file": "\#(file)", "version": "1.0", "title": "\#(product)"}"#)
    }
    let manifest = #"{"products": [\#(entries.joined(separator: ", "))\#(extraManifest)]}"#
    try Data(manifest.utf8).write(to: URL(fileURLWithPath: directory + "/manifest.json"))
    return directory
}

/// What a finished (or interrupted) download produced.
struct Downloaded {
    var header: ContentV1.DownloadHeader?
    var bytes: [UInt8] = []
    var chunkIndexes: [UInt32] = []
    /// Each chunk's announced SHA-256 state (`DownloadChunk.sha256_state`).
    var states: [[UInt8]] = []
    var sha256: [UInt8] { Array(SHA256.hash(data: bytes)) }
}

/// One development CA and server certificate for the whole test process (openssl runs once).
let fixtureCertificates: DevelopmentCertificates = {
    do {
        return try DevelopmentCertificates.create(in: temporaryDirectory("tls"))
    } catch {
        fatalError("cannot make development certificates: \(error)")
    }
}()

/// Client settings that trust the fixture's CA.
func fixtureClientConfiguration() throws -> ClientConfiguration {
    ClientConfiguration(tls: try ClientTLS(trustRootsPath: fixtureCertificates.caCertificatePath))
}

/// A store and a content service on 127.0.0.1, in-process, for one test, both over TLS.
struct ContentFixture {
    let store: StoreServer
    let content: ContentServer
    let storeClient: RPCClient
    let contentClient: RPCClient
    let contentDirectory: String
    let storeDirectory: String
    let clock: NIOLockedValueBox<Int64>
    /// The content service's credential at the store (what its operator's tools show for Stats).
    let serviceCredential: String
    /// The access token issued for each account token, reused as the SDK does.
    let accessTokens = NIOLockedValueBox<[String: String]>([:])

    static func with<R>(
        files: [String: [UInt8]], environment: ReceiptV1.Environment = .sandbox, acceptSandbox: Bool = false,
        maximumStaleness: Duration = .seconds(300), cacheSize: Int = 100, perAccount: Int = 4,
        chunkSize: UInt32 = 256 * 1024,
        configureStore: (inout StoreConfiguration) -> Void = { _ in },
        _ body: (ContentFixture) async throws -> R
    ) async throws -> R {
        let storeDirectory = temporaryDirectory("store")
        let contentDirectory = try makeContentDirectory(files: files)
        defer {
            try? FileManager.default.removeItem(atPath: storeDirectory)
            try? FileManager.default.removeItem(atPath: contentDirectory)
        }
        let clock = NIOLockedValueBox(ContentConfiguration.systemClock())
        let identity = try ServerTLSIdentity(
            certificateChainPath: fixtureCertificates.serverCertificatePath,
            privateKeyPath: fixtureCertificates.serverKeyPath)
        var storeConfiguration = StoreConfiguration(
            dataDirectory: storeDirectory, catalog: hostedCatalog, environment: .sandbox,
            revocationPollInterval: .milliseconds(50), revocationHeartbeat: .milliseconds(100))
        configureStore(&storeConfiguration)
        let store = try StoreServer(store: storeConfiguration, server: ServerConfiguration(tls: identity))
        try await store.start()
        let credential = try store.store.createServiceCredential(role: .content, name: "fixture").secret
        let storePort = try #require(store.port)
        let content = try ContentServer(
            configuration: ContentConfiguration(
                contentDirectory: contentDirectory, storePort: storePort, storeCredential: credential,
                storeTLS: try ClientTLS(trustRootsPath: fixtureCertificates.caCertificatePath),
                environment: environment, acceptSandbox: acceptSandbox, cacheSize: cacheSize,
                maximumStaleness: maximumStaleness,
                chunkSize: chunkSize, maximumDownloadsPerAccount: perAccount, clock: { clock.withLockedValue { $0 } }),
            server: ServerConfiguration(tls: identity))
        try await content.start()
        let contentPort = try #require(content.port)
        let fixture = ContentFixture(
            store: store, content: content,
            storeClient: RPCClient(host: "127.0.0.1", port: storePort, configuration: try fixtureClientConfiguration()),
            contentClient: RPCClient(
                host: "127.0.0.1", port: contentPort, configuration: try fixtureClientConfiguration()),
            contentDirectory: contentDirectory, storeDirectory: storeDirectory, clock: clock,
            serviceCredential: credential)
        func stop() async {
            await fixture.storeClient.close()
            await fixture.contentClient.close()
            await content.shutdown()
            await store.shutdown()
        }
        do {
            #expect(await content.waitUntilReady(), "the content service reached the store")
            let result = try await body(fixture)
            await stop()
            return result
        } catch {
            await stop()
            throw error
        }
    }

    /// Moves the content service's clock.
    func advanceClock(by duration: Duration) {
        let (seconds, attoseconds) = duration.components
        clock.withLockedValue { $0 += seconds * 1000 + attoseconds / 1_000_000_000_000_000 }
    }

    func metadata(_ token: String?) -> Metadata {
        var metadata = Metadata()
        if let token { metadata.add("authorization", "Bearer \(token)") }
        return metadata
    }

    func newAccount() throws -> String { try store.store.createAccount().token }

    /// What goes to the content service for a caller: the access token the
    /// store issues for an account token it knows; anything else as it is.
    func contentToken(_ token: String?) async -> String? {
        if let token, let issued = accessTokens.withLockedValue({ $0[token] }) { return issued }
        guard let token, !AccessToken.looksLikeAccessToken(token),
            let account = try? await store.store.authenticate(token: token),
            let issued = try? store.store.issueAccessToken(account: account, audience: AccessToken.contentAudience)
        else { return token }
        accessTokens.withLockedValue { $0[token] = issued.token }
        return issued.token
    }

    func buy(_ product: String, token: String, paymentMethod: String = card) async throws -> StoreV1.Transaction {
        var metadata = metadata(token)
        metadata.add("idempotency-key", UUID().uuidString)
        let response = try await storeClient.unary(
            "/kiosk.store.v1.Store/Purchase",
            request: StoreV1.PurchaseRequest(productID: product, quantity: 1, paymentMethod: paymentMethod),
            response: StoreV1.PurchaseResponse.self, options: CallOptions(timeout: .seconds(10), metadata: metadata))
        return try #require(response.transaction)
    }

    func authorize(_ receipt: [UInt8], product: String, token: String?) async throws -> ContentV1.AuthorizeResponse {
        try await contentClient.unary(
            "/kiosk.content.v1.Content/Authorize",
            request: ContentV1.AuthorizeRequest(signedReceipt: receipt, productID: product),
            response: ContentV1.AuthorizeResponse.self,
            options: CallOptions(timeout: .seconds(10), metadata: metadata(await contentToken(token))))
    }

    /// Downloads through `client` (default: the fixture's), checking every
    /// chunk's CRC; stops after `stopAfter` chunks when given.
    func download(
        _ product: String, receipt: [UInt8], token: String?, resumeOffset: UInt64 = 0, stopAfter: Int? = nil,
        client: RPCClient? = nil
    ) async throws -> Downloaded {
        var result = Downloaded()
        let token = await contentToken(token)
        let stream = (client ?? contentClient).serverStreaming(
            "/kiosk.content.v1.Content/Download",
            request: ContentV1.DownloadRequest(signedReceipt: receipt, productID: product, resumeOffset: resumeOffset),
            response: ContentV1.DownloadPart.self,
            options: CallOptions(timeout: .seconds(60), metadata: metadata(token)))
        for try await part in stream {
            if let header = part.header {
                #expect(result.header == nil, "one header, first")
                result.header = header
            }
            if let chunk = part.chunk {
                let original =
                    chunk.compressed
                    ? Array(
                        try Zlib.decompress(ByteBuffer(bytes: chunk.data), limit: Int(chunk.originalLength))
                            .readableBytesView)
                    : chunk.data
                #expect(original.count == Int(chunk.originalLength))
                #expect(Zlib.crc32(original) == chunk.crc32, "chunk \(chunk.index) CRC")
                result.bytes += original
                result.chunkIndexes.append(chunk.index)
                result.states.append(chunk.sha256State)
                if let stopAfter, result.chunkIndexes.count >= stopAfter { break }
            }
        }
        return result
    }
}
