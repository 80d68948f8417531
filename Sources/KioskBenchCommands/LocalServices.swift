import ArgumentParser
import Foundation
import KioskAPI
import KioskContent
import KioskRPC
import KioskSigning
import KioskStore

/// A store and a content service started by the bench itself, on 127.0.0.1,
/// in a temporary directory (removed by `stop()`).
struct LocalServices {
    let store: StoreServer
    let content: ContentServer
    let root: String
    let buyer: (id: String, token: String)
    /// The CA the services' TLS certificates chain to; nil when they serve plaintext.
    let trustRootsPath: String?

    static let product = "bench.file"

    static let catalog = Catalog(
        bundleID: "com.example.bench",
        products: [
            CatalogProduct(
                id: product, type: .nonConsumable, title: "Bench file", price: "1.00", currency: "USD",
                hostedContent: true),
            CatalogProduct(
                id: "credits.5", type: .consumable, title: "5 credits", price: "0.99", currency: "USD", credits: 5,
                maxQuantity: 10),
        ])

    /// Starts both services; the hosted file holds `fileBytes`. With `tls`
    /// both serve TLS with a development CA (clients: ``clientConfiguration(_:)``).
    static func start(
        fileBytes: [UInt8] = Array(repeating: 0x4B, count: 1024), cacheSize: Int, tls: Bool = false
    ) async throws -> LocalServices {
        let root = NSTemporaryDirectory() + "kiosk-bench-" + UUID().uuidString
        let certificates = tls ? try DevelopmentCertificates.create(in: root + "/tls") : nil
        let identity = try certificates.map {
            try ServerTLSIdentity(certificateChainPath: $0.serverCertificatePath, privateKeyPath: $0.serverKeyPath)
        }
        try FileManager.default.createDirectory(atPath: root + "/content", withIntermediateDirectories: true)
        try Data(fileBytes).write(to: URL(fileURLWithPath: root + "/content/file.bin"))
        try Data(#"{"products": [{"product_id": "\#(product)", "file": "file.bin", "version": "1"}]}"#.utf8)
            .write(to: URL(fileURLWithPath: root + "/content/manifest.json"))
        let store = try StoreServer(
            store: StoreConfiguration(dataDirectory: root + "/store", catalog: catalog),
            server: ServerConfiguration(tls: identity))
        var content: ContentServer?
        do {
            try await store.start()
            let credential = try store.store.createServiceCredential(role: .content, name: "bench-content").secret
            let buyer = try store.store.createAccount()
            let server = try ContentServer(
                configuration: ContentConfiguration(
                    contentDirectory: root + "/content", storePort: store.port ?? 0, storeCredential: credential,
                    storeTLS: try certificates.map { try ClientTLS(trustRootsPath: $0.caCertificatePath) },
                    cacheSize: cacheSize,
                    maximumDownloadsPerAccount: 1024, maximumDownloads: 1024),
                server: ServerConfiguration(tls: identity))
            content = server
            try await server.start()
            guard await server.waitUntilReady() else {
                throw ValidationError("the bench's content service never reached its store")
            }
            return LocalServices(
                store: store, content: server, root: root, buyer: (buyer.id, buyer.token),
                trustRootsPath: certificates?.caCertificatePath)
        } catch {
            await content?.shutdown()
            await store.shutdown()
            try? FileManager.default.removeItem(atPath: root)
            throw error
        }
    }

    /// RPC client settings that reach these services.
    func clientConfiguration(_ base: ClientConfiguration = ClientConfiguration()) throws -> ClientConfiguration {
        var configuration = base
        configuration.tls = try trustRootsPath.map { try ClientTLS(trustRootsPath: $0) }
        return configuration
    }

    /// An access token for the content service, for the buyer.
    func buyerAccessToken() async throws -> String {
        let account = try await store.store.authenticate(token: buyer.token)
        return try store.store.issueAccessToken(account: account, audience: AccessToken.contentAudience).token
    }

    func stop() async {
        await content.shutdown()
        await store.shutdown()
        try? FileManager.default.removeItem(atPath: root)
    }
}
