import Foundation
import KioskConsole
import KioskStore
import KioskStoreTestSupport
import Testing

/// The console in a real browser: headless Chromium driven by Selenium (`Scripts/console-browser.py`) signs in,
/// reads the charts, grants a refund request, finds the account, redrives a failed webhook delivery, rotates a key,
/// creates and revokes a credential, is refused a forged form, reads the activity, and signs out. Screenshots go to
/// a scratch directory, or to `KIOSK_CONSOLE_SCREENSHOTS` (docs/console/ to refresh the documentation's).
@Suite(.timeLimit(.minutes(5))) struct ConsoleBrowserTests {
    static let scripts = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Scripts")

    @Test func anOperatorWorksTheConsoleInHeadlessChromium() async throws {
        try await ConsoleFixture.with { fixture in
            let store = fixture.store
            _ = try await store.addWebhook(url: "http://127.0.0.1:1/kiosk", secret: Array(repeating: 7, count: 32))
            // Two weeks of sales in two currencies, a few refunds, a subscriber, and a refund request left pending.
            var sold: [String] = []
            for day in 0..<14 {
                for _ in 0...(day % 3) { sold.append(try await fixture.purchase("credits.5").transactionID) }
                if day % 3 == 0 { sold.append(try await fixture.purchase("filter.sepia").transactionID) }
                if day % 4 == 1 { _ = try await fixture.purchase("pro.monthly") }
                if day % 5 == 2 { _ = try await store.refund(transactionID: sold[sold.count - 1], reason: "support") }
                fixture.clock.advance(byMs: 86_400_000)
            }
            let (buyer, asked) = try await fixture.purchase("filter.sepia")
            _ = try await store.requestRefund(accountID: buyer.id, transactionID: asked, reason: "it does not work")
            // The webhook's receiver never answers: its deliveries fail, then give up when the retry period ends.
            _ = try await store.deliverWebhooks()
            fixture.clock.advance(byMs: 4 * 86_400_000)
            _ = try await store.deliverWebhooks()
            #expect(try store.webhookDeliveries(state: .failed, limit: 1).count == 1)

            let environment = ProcessInfo.processInfo.environment
            let shots = environment["KIOSK_CONSOLE_SCREENSHOTS"] ?? temporaryDirectory()
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
            process.arguments = [
                "240", "/bin/bash", Self.scripts.appendingPathComponent("console-browser.sh").path, fixture.base,
                fixture.admin.secret, shots,
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
            // What the browser did reached the ledger, by the operator.
            #expect(try store.ledger.transaction(id: asked)?.revokedMs != 0)
            let refund = try await store.ledger.events(after: 0, accountID: buyer.id, types: [.refunded])
            #expect(refund.map(\.actor) == ["console \(fixture.admin.id) (alice)"])
        }
    }
}
