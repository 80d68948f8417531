import Foundation
import Kiosk
import KioskConsole
import KioskStore
import KioskStoreTestSupport
import KioskTesting
import Testing

/// The console in a real browser: headless Chromium driven by Selenium (`Scripts/console-browser.py`) signs in,
/// reads the charts, grants a refund request, finds the account, redrives a failed webhook delivery, rotates a key,
/// creates and revokes a credential, is refused a forged form, reads the activity, and signs out. The store has a
/// content service (a `KioskTestSession`): the book whose refund the browser grants is then refused for download.
/// Screenshots go to a scratch directory, or to `KIOSK_CONSOLE_SCREENSHOTS` (docs/console/ to refresh the
/// documentation's).
@Suite(.timeLimit(.minutes(5))) struct ConsoleBrowserTests {
    static let scripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Scripts")
    static let card = "test-card:4242424242424242"

    @Test func anOperatorWorksTheConsoleInHeadlessChromium() async throws {
        let session = try await KioskTestSession.start(tls: false)
        let store = try session.store
        let console = AdminConsole(store: store, configuration: .fast)
        try await console.start()
        let admin = try store.createServiceCredential(role: .admin, name: "alice")
        _ = try await store.addWebhook(url: "http://127.0.0.1:1/kiosk", secret: Array(repeating: 7, count: 32))

        // Two weeks of sales, a few refunds, subscribers, ending four days ago (the store's clock is moved back, then
        // forward day by day: the content service checks access tokens against real time, so the book below is bought
        // and downloaded with the clock back on time).
        try await session.advance(by: .seconds(-18 * 86_400))
        func buy(_ product: String) async throws -> String {
            let account = try #require(try store.ledger.account(id: try session.makeAccount().id))
            let outcome = try await store.purchase(
                account: account, productID: product, quantity: 1, paymentMethod: Self.card,
                idempotencyKey: UUID().uuidString)
            return try #require(outcome.record?.id)
        }
        for day in 0..<14 {
            for _ in 0...(day % 3) { _ = try await buy("credits.5") }
            if day % 3 == 0 { _ = try await buy("filter.sepia") }
            if day % 4 == 1 { _ = try await buy("pro.monthly") }
            if day % 5 == 2 { try await session.refund(transactionID: try await buy("credits.10"), reason: "support") }
            try await session.advance(by: .seconds(86_400))
        }
        // The webhook's receiver never answers: its deliveries fail, then give up when the retry period ends.
        _ = try await store.deliverWebhooks()
        try await session.advance(by: .seconds(4 * 86_400))
        #expect(abs(session.nowMs - Int64(Date().timeIntervalSince1970 * 1000)) < 60_000, "the clock is back on time")
        _ = try await store.deliverWebhooks()
        #expect(try store.webhookDeliveries(state: .failed, limit: 1).count == 1)

        // A reader buys the hosted book, downloads it, and asks for a refund.
        let reader = try session.makeClient(account: try session.makeAccount())
        guard case .success(let book) = try await reader.purchase(productID: "book.swift", paymentMethod: Self.card)
        else {
            Issue.record("the book was not bought")
            return
        }
        let downloads = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: downloads) }
        func download() async throws -> URL {
            let directory = URL(fileURLWithPath: downloads).appendingPathComponent(UUID().uuidString)
            return try await reader.download(productID: "book.swift", transaction: book, to: directory).result()
        }
        _ = try await download()
        _ = try await reader.requestRefund(transactionID: book.id, reason: "I meant the other book")

        let environment = ProcessInfo.processInfo.environment
        let shots = environment["KIOSK_CONSOLE_SCREENSHOTS"] ?? temporaryDirectory()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
        process.arguments = [
            "240", "/bin/bash", Self.scripts.appendingPathComponent("console-browser.sh").path,
            "http://127.0.0.1:\(console.port)", admin.secret, shots,
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = try await Task.detached { output.fileHandleForReading.readDataToEndOfFile() }.value
        process.waitUntilExit()
        let printed = String(decoding: text, as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(printed)")
        #expect(printed.contains("console-browser: all checks passed"), "\(printed)")

        // What the browser did reached the ledger, by the operator, and the content service: the book is refused.
        #expect(try store.ledger.transaction(id: book.id)?.revokedMs != 0)
        let refund = try await store.ledger.events(after: 0, types: [.refunded]).filter { $0.transactionID == book.id }
        #expect(refund.map(\.actor) == ["console \(admin.id) (alice)"])
        var refused: (any Error)?
        for _ in 0..<200 {
            do {
                _ = try await download()
                try await Task.sleep(for: .milliseconds(10))
            } catch {
                refused = error
                break
            }
        }
        #expect(
            (refused as? KioskError)?.code == .downloadRefused,
            "the content service refuses the refunded book: \(String(describing: refused))")
        await console.shutdown()
        await session.shutdown()
    }
}
