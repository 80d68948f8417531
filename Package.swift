// swift-tools-version:6.1
import PackageDescription

/// Target dependencies on the services' own packages: only with the "Services" trait (on by default).
let services: TargetDependencyCondition? = .when(traits: ["Services"])

let package = Package(
    name: "Kiosk",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "KioskWire", targets: ["KioskWire"]),
        .library(name: "KioskRPC", targets: ["KioskRPC"]),
        .library(name: "KioskAPI", targets: ["KioskAPI"]),
        .library(name: "KioskSigning", targets: ["KioskSigning"]),
        .library(name: "KioskStore", targets: ["KioskStore"]),
        .executable(name: "kiosk-store", targets: ["kiosk-store"]),
        .library(name: "KioskContent", targets: ["KioskContent"]),
        .executable(name: "kiosk-content", targets: ["kiosk-content"]),
        .library(name: "Kiosk", targets: ["Kiosk"]),
        .library(name: "KioskTesting", targets: ["KioskTesting"]),
        .executable(name: "kiosk", targets: ["kiosk"]),
        .executable(name: "kiosk-bench", targets: ["kiosk-bench"]),
        .executable(name: "kiosk-fuzz", targets: ["kiosk-fuzz"]),
    ],
    // "Services" (on by default) brings the services' own dependencies: the ledger's databases, Stripe's HTTP client,
    // process hosting, Prometheus, the command lines' parser, the load tests' histograms. A package that uses only
    // the SDK (the `Kiosk` and `KioskAPI` products) depends on Kiosk with `traits: []` and resolves none of them:
    // swift-nio, swift-nio-ssl, swift-crypto, swift-log and swift-distributed-tracing and what they use. Every
    // target dependency on those packages is guarded by the trait, which is what lets SwiftPM leave them out.
    traits: [
        .trait(
            name: "Services",
            description:
                "The store, the content service, their command lines, console, test support and load tests, with their dependencies"
        ),
        .default(enabledTraits: ["Services"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift", from: "0.2.0"),
        // Stripe's API, for StripePaymentProcessor.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        // TLS for every connection (also what async-http-client uses).
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // The PostgreSQL ledger backend (`--database postgres://…`).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Process hosting of the servers (signals, graceful shutdown); postgres-nio depends on it too.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // `swift package generate-documentation`: the DocC catalogs of Kiosk, KioskTesting and KioskRPC (a plugin only).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // Prometheus text for the services' operator endpoints (`--metrics-port`); swift-metrics and swift-atomics,
        // which it builds on, are in the graph already.
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // Spans per call (KioskRPC), already in the graph through postgres-nio and async-http-client.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        // System libraries: the project's chosen codecs.
        .systemLibrary(
            name: "CProtobufC",
            pkgConfig: "libprotobuf-c",
            providers: [.apt(["libprotobuf-c-dev"]), .brew(["protobuf-c"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // Whole-buffer inflate and CRC-32 for download chunks (same zlib format, ~2.5x zlib's speed).
        .systemLibrary(
            name: "CDeflate",
            pkgConfig: "libdeflate",
            providers: [.apt(["libdeflate-dev"]), .brew(["libdeflate"])]
        ),
        // swift-nio-ssl's BoringSSL SHA-256 block function, declared (its headers are not a module): download chunks
        // are hashed in parallel from the SHA-256 states the content service sends. Not used on Apple platforms.
        .systemLibrary(name: "CBoringSHA256"),
        // SHA-256 on 8 inputs at once (AVX2 / AVX-512VL), for downloads whose chunks announce their states;
        // tested through KioskAPITests (SHA256Hasher.update(lanes:)).
        .target(name: "CSHA256Lanes"),
        // protoc-c output, committed; regenerated by Scripts/gen-protos.sh.
        .target(
            name: "KioskProto",
            dependencies: ["CProtobufC"]
        ),
        // Framing, Swift ⇄ protobuf-c bridging, zlib.
        .target(
            name: "KioskWire",
            dependencies: [
                "KioskProto", "CProtobufC", "CZlib", "CDeflate",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // gRPC-style runtime on SwiftNIO: client, server, status.
        .target(
            name: "KioskRPC",
            dependencies: [
                "KioskWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // What the services and the SDK share: the store, content and receipt messages, SHA-256 of downloads. No
        // swift-crypto: the SDK builds one BoringSSL (swift-nio-ssl's, for TLS and SHA-256), not two.
        .target(
            name: "KioskAPI",
            dependencies: [
                "KioskWire", "KioskProto", "CBoringSHA256", "CSHA256Lanes",
                // Links the BoringSSL whose SHA-256 block function CBoringSHA256 declares.
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // Ed25519 and HMAC on the wire's messages: receipts, events, access tokens, promotional offers, webhooks —
        // signed by the store, checked by the store, the content service and apps' servers (swift-crypto).
        .target(
            name: "KioskSigning",
            dependencies: ["KioskAPI", "KioskWire", .product(name: "Crypto", package: "swift-crypto")]
        ),
        // The store's domain: money, subscription and payment lifecycles, the ports the store's
        // adapters implement. No wire messages, no SQL, no NIO (docs/architecture.md).
        .target(name: "KioskStoreCore"),
        // The store's integrations behind the core's ports: Stripe (PaymentProcessor) and webhook delivery over
        // HTTP (WebhookTransport), both on async-http-client.
        .target(
            name: "KioskStoreIntegrations",
            dependencies: [
                "KioskStoreCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: services),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The store's ledger: the core's repository ports on SQLite (GRDB) and PostgreSQL (postgres-nio), the
        // migrations of both side by side, group commit, and the instance lock.
        .target(
            name: "KioskStoreLedger",
            dependencies: [
                "KioskStoreCore", "KioskAPI", "KioskSigning", "KioskRPC", "KioskWire",
                .product(name: "GRDB", package: "GRDB.swift", condition: services),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio", condition: services),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // The store service as an embeddable library.
        .target(
            name: "KioskStore",
            dependencies: [
                "KioskStoreCore", "KioskStoreLedger", "KioskStoreIntegrations", "KioskAPI", "KioskSigning", "KioskRPC", "KioskWire",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // The services' operator endpoint: Prometheus metrics, liveness and readiness (server-side only; not a
        // dependency of the SDK or KioskTesting).
        .target(
            name: "KioskOperations",
            dependencies: [
                "KioskRPC",
                .product(name: "Prometheus", package: "swift-prometheus", condition: services),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // How the servers live in a process: a ServiceGroup, SIGTERM/SIGINT shutting it down gracefully, SIGHUP
        // reloading TLS (the command lines' hosting; not a dependency of the SDK).
        .target(
            name: "KioskHosting",
            dependencies: [
                "KioskRPC",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: services),
                .product(name: "UnixSignals", package: "swift-service-lifecycle", condition: services),
            ]
        ),
        // The `kiosk-store` command line as a library; the executable is its `main` only.
        .target(
            name: "KioskStoreCommands",
            dependencies: [
                "KioskStore", "KioskAPI", "KioskSigning", "KioskRPC", "KioskHosting", "KioskOperations", "KioskConsole",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: services),
                .product(name: "Prometheus", package: "swift-prometheus", condition: services),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(name: "kiosk-store", dependencies: ["KioskStoreCommands"]),
        // The store's admin console: server-rendered pages on the store's side HTTP server.
        .target(
            name: "KioskConsole",
            dependencies: [
                "KioskStore", "KioskAPI", "KioskSigning", "KioskRPC",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // The content service as an embeddable library.
        .target(
            name: "KioskContent",
            dependencies: [
                "KioskAPI", "KioskSigning", "KioskRPC", "KioskWire",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // The `kiosk-content` command line as a library; the executable is its `main` only.
        .target(
            name: "KioskContentCommands",
            dependencies: [
                "KioskContent", "KioskAPI", "KioskSigning", "KioskRPC", "KioskHosting", "KioskOperations",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: services),
                .product(name: "Prometheus", package: "swift-prometheus", condition: services),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(name: "kiosk-content", dependencies: ["KioskContentCommands"]),
        // The client SDK: `import Kiosk`.
        .target(
            name: "Kiosk",
            dependencies: [
                "KioskAPI", "KioskRPC", "KioskWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // An in-process store and content service for other tools' tests.
        .target(
            name: "KioskTesting",
            dependencies: [
                "Kiosk", "KioskStore", "KioskContent", "KioskAPI", "KioskSigning", "KioskRPC",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // A local double of Stripe's API, for the store's tests: test support, not a product.
        .target(
            name: "StripeDouble",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: services),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // The double in its own process (Scripts/crash-test.sh's payment processor).
        .executableTarget(
            name: "stripe-double",
            dependencies: ["StripeDouble", "KioskHosting", .product(name: "Logging", package: "swift-log")]
        ),
        // The `kiosk` command line as a library; the executable is its `main` only.
        .target(
            name: "KioskCommands",
            dependencies: [
                "Kiosk",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: services),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(name: "kiosk", dependencies: ["KioskCommands"]),
        // Load tests of verification, downloads and purchases: the command line as a library.
        .target(
            name: "KioskBenchCommands",
            dependencies: [
                "KioskStore", "KioskContent", "KioskAPI", "KioskSigning", "KioskRPC", "KioskWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: services),
                .product(name: "Histogram", package: "hdrhistogram-swift", condition: services),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ]
        ),
        .executableTarget(name: "kiosk-bench", dependencies: ["KioskBenchCommands"]),
        // libFuzzer's LLVMFuzzerRunDriver, declared for kiosk-fuzz (header only).
        .systemLibrary(name: "CLibFuzzer"),
        // What one fuzz input goes through (the wire decoders' oracles) and the corpus replay: the fuzzer's
        // entry point and its corpus test share it.
        .target(
            name: "KioskFuzzing",
            dependencies: [
                "KioskWire", "KioskAPI", "KioskSigning",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        // libFuzzer target for the frame and message decoders (Scripts/fuzz.sh);
        // a normal build is a corpus replayer.
        .executableTarget(
            name: "kiosk-fuzz",
            dependencies: ["KioskFuzzing", "CLibFuzzer"]
        ),
        // The corpus through KioskFuzzing, and the replayer binary (built, not imported) on it.
        .testTarget(
            name: "KioskOperationsTests",
            dependencies: [
                "KioskOperations", "KioskStoreCommands", "KioskContentCommands", "KioskStore", "KioskContent",
                "KioskStoreCore", "KioskRPC", "KioskTesting", "Kiosk",
            ]
        ),
        // The admin console over HTTP on 127.0.0.1, and in headless Chromium (Selenium).
        .testTarget(
            name: "KioskConsoleTests",
            dependencies: [
                "KioskConsole", "KioskStore", "KioskRPC", "KioskStoreTestSupport", "KioskTesting", "Kiosk",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: services),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .testTarget(
            name: "KioskFuzzTests",
            dependencies: ["KioskFuzzing", "kiosk-fuzz"]
        ),
        .testTarget(
            name: "KioskBenchTests",
            dependencies: ["kiosk-bench", "KioskTesting"]
        ),
        .testTarget(
            name: "KioskTests",
            dependencies: [
                "Kiosk", "KioskTesting", "KioskStore", "KioskContent", "KioskRPC", "KioskAPI", "KioskSigning", "kiosk",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "KioskTestingTests",
            dependencies: ["KioskTesting", "Kiosk"]
        ),
        .testTarget(
            name: "KioskContentTests",
            dependencies: [
                "KioskContent", "KioskStore", "KioskAPI", "KioskSigning", "KioskRPC", "KioskWire", "kiosk-content", "kiosk-store",
                "StripeDouble", "KioskStoreIntegrations",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: services),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "KioskAPITests",
            dependencies: ["KioskAPI", "KioskSigning", "KioskWire", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .testTarget(
            name: "KioskStoreCoreTests",
            dependencies: ["KioskStoreCore"]
        ),
        // What the store's two test targets share: scratch directories, the ledger backend they run on.
        .target(
            name: "KioskStoreTestSupport",
            dependencies: ["KioskStore", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")],
            path: "Tests/KioskStoreTestSupport"
        ),
        // The store's ledger adapters against their contract and schema: no sockets, no processes.
        .testTarget(
            name: "KioskStoreTests",
            dependencies: [
                "KioskStore", "KioskStoreCore", "KioskStoreTestSupport",
                .product(name: "GRDB", package: "GRDB.swift", condition: services),
            ]
        ),
        // The store end to end: real servers on 127.0.0.1, store processes, kill -9, the Stripe double.
        .testTarget(
            name: "KioskStoreIntegrationTests",
            dependencies: [
                "KioskStore", "KioskStoreIntegrations", "KioskStoreTestSupport", "KioskAPI", "KioskSigning", "KioskRPC", "KioskWire",
                "KioskTesting",
                "Kiosk", "kiosk-store",
                "stripe-double", "StripeDouble",
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: services),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "GRDB", package: "GRDB.swift", condition: services),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .testTarget(
            name: "KioskWireTests",
            dependencies: [
                "KioskWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "KioskRPCTests",
            dependencies: [
                "KioskRPC", "KioskWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
    ]
)
