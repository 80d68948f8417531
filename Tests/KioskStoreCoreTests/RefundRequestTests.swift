import KioskStoreCore
import Testing

/// Every state × event of ``RefundRequest``.
@Suite("Refund request lifecycle")
struct RefundRequestLifecycleTests {
    static func pending() throws -> RefundRequest {
        try RefundRequest.asked(
            transactionID: "t", accountID: "a", productID: "p", purchased: true, refunded: false, reason: "broken",
            atMs: 10)
    }

    @Test("asking: only a purchased transaction not yet refunded")
    func asking() throws {
        let request = try Self.pending()
        #expect(
            request.state == .pending && request.requestedMs == 10 && request.decidedMs == 0
                && request.reason == "broken")
        #expect(throws: RefundRequest.Refusal.notPurchased) {
            try RefundRequest.asked(
                transactionID: "t", accountID: "a", productID: "p", purchased: false, refunded: false, reason: "",
                atMs: 1)
        }
        #expect(throws: RefundRequest.Refusal.alreadyRefunded) {
            try RefundRequest.asked(
                transactionID: "t", accountID: "a", productID: "p", purchased: true, refunded: true, reason: "", atMs: 1
            )
        }
    }

    @Test(
        "granted from pending and from denied; once only", arguments: [RefundRequest.State.pending, .denied, .granted])
    func granting(_ state: RefundRequest.State) throws {
        var request = try Self.pending()
        request.state = state
        let changed = request.granted(reason: "refunded", atMs: 20)
        #expect(changed == (state != .granted))
        #expect(request.state == .granted)
        if changed { #expect(request.decidedMs == 20 && request.decisionReason == "refunded") }
    }

    @Test("denied from pending only", arguments: [RefundRequest.State.pending, .denied, .granted])
    func denying(_ state: RefundRequest.State) throws {
        var request = try Self.pending()
        request.state = state
        if state == .pending {
            try request.denied(reason: "used", atMs: 30)
            #expect(request.state == .denied && request.decidedMs == 30 && request.decisionReason == "used")
        } else {
            #expect(throws: RefundRequest.Refusal.decided(state)) { try request.denied(reason: "again", atMs: 30) }
            #expect(request.state == state)
        }
    }
}
