// swift-tools-version:6.0
import PackageDescription

// Programs to copy, on the repository's own package (`..`): see README.md.
let package = Package(
    name: "KioskExamples",
    platforms: [.macOS(.v14)],
    dependencies: [
        // Named, so the products below are found whatever the clone's directory is called.
        .package(name: "Kiosk", path: ".."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        // Hummingbird's own, imported by webhook-receiver for the body's collect(upTo:) and HTTPField.Name.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
    ],
    targets: [
        // A command line that buys a product and downloads its hosted file with the SDK.
        .executableTarget(
            name: "buy-and-download",
            dependencies: [.product(name: "Kiosk", package: "Kiosk")]
        ),
        // An app's back end on Hummingbird that takes Kiosk's webhooks.
        .executableTarget(
            name: "webhook-receiver",
            dependencies: [
                .product(name: "KioskAPI", package: "Kiosk"),
                .product(name: "KioskSigning", package: "Kiosk"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        // An app's own purchase logic on the SDK: credits and a "pro" subscription.
        .target(
            name: "AppPurchases",
            dependencies: [.product(name: "Kiosk", package: "Kiosk")]
        ),
        // That logic end to end against an in-process store (KioskTestSession).
        .testTarget(
            name: "AppPurchasesTests",
            dependencies: [
                "AppPurchases",
                .product(name: "Kiosk", package: "Kiosk"),
                .product(name: "KioskTesting", package: "Kiosk"),
            ]
        ),
    ]
)
