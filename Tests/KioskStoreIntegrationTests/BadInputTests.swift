import Foundation
import KioskAPI
import KioskRPC
import KioskStoreTestSupport
import KioskWire
import Testing

@testable import KioskStore

@Suite(.timeLimit(.minutes(1))) struct BadInputTests {
    @Test func missingOrWrongTokenIsUnauthenticated() async throws {
        try await StoreFixture.with { store in
            for token in [nil, "", "kiosk_not_a_real_token"] as [String?] {
                let error = await #expect(throws: RPCError.self) {
                    try await store.call(
                        "GetAccount", StoreV1.GetAccountRequest(), as: StoreV1.Account.self, token: token)
                }
                #expect(error?.code == .unauthenticated)
            }
            let error = await #expect(throws: RPCError.self) { try await store.buy("credits.5", token: "nope") }
            #expect(error?.code == .unauthenticated)
            #expect(error?.message.contains("bearer token") == true)
        }
    }

    @Test func badPurchaseRequestsAreInvalidArguments() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            let cases: [(StoreV1.PurchaseRequest, String)] = [
                (
                    StoreV1.PurchaseRequest(productID: "", quantity: 1, paymentMethod: goodCard),
                    "product_id is required"
                ),
                (
                    StoreV1.PurchaseRequest(productID: "credits.5", quantity: 1, paymentMethod: ""),
                    "payment_method is required"
                ),
                (
                    StoreV1.PurchaseRequest(productID: "credits.5", quantity: 0, paymentMethod: goodCard),
                    "quantity 0 is outside 1…10"
                ),
                (
                    StoreV1.PurchaseRequest(productID: "credits.5", quantity: 11, paymentMethod: goodCard),
                    "quantity 11 is outside"
                ),
                (
                    StoreV1.PurchaseRequest(productID: "credits.5", quantity: .max, paymentMethod: goodCard),
                    "quantity 4294967295"
                ),
                (
                    StoreV1.PurchaseRequest(productID: "filter.sepia", quantity: 2, paymentMethod: goodCard),
                    "outside 1…1"
                ),
            ]
            for (request, message) in cases {
                let error = await #expect(throws: RPCError.self) {
                    try await store.call("Purchase", request, as: StoreV1.PurchaseResponse.self, token: token)
                }
                #expect(error?.code == .invalidArgument)
                #expect(error?.message.contains(message) == true, "\(error?.message ?? "") should say \(message)")
            }
            let emptyKey = await #expect(throws: RPCError.self) {
                try await store.buy("credits.5", token: token, key: "")
            }
            #expect(emptyKey?.code == .invalidArgument)
            #expect(try await store.balance(token) == 0)
        }
    }

    @Test func badSpendsAreRefused() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            for amount in [Int64(0), -1, .min] {
                let error = await #expect(throws: RPCError.self) {
                    try await store.call(
                        "SpendCredits", StoreV1.SpendCreditsRequest(amount: amount),
                        as: StoreV1.SpendCreditsResponse.self, token: token)
                }
                #expect(error?.code == .invalidArgument)
            }
            let error = await #expect(throws: RPCError.self) {
                try await store.call(
                    "SpendCredits", StoreV1.SpendCreditsRequest(amount: .max), as: StoreV1.SpendCreditsResponse.self,
                    token: token)
            }
            #expect(error?.code == .failedPrecondition)
        }
    }

    @Test func unknownFieldsAreIgnoredAsProtobufRequires() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            // A Product has the PurchaseRequest's fields 1–3 (id, type → quantity, title → payment method) and
            // more the store does not know (5–14; its field 4, the description, is left empty: a PurchaseRequest's
            // field 4 is the offer): they are skipped, the purchase goes through.
            let request = StoreV1.Product(
                id: "credits.5", type: ReceiptV1.ProductType(rawValue: 2), title: goodCard, description: "",
                price: "1", currency: "ZZZ", creditsPerUnit: 99, maxQuantity: 7, hostedContent: true,
                subscriptionPeriod: "P1D", subscriptionGroup: "g", groupLevel: 3, gracePeriod: "P1D",
                billingRetryPeriod: "P2D")
            let response = try await store.call("Purchase", request, as: StoreV1.PurchaseResponse.self, token: token)
            #expect(response.transaction?.state == .purchased)
            #expect(response.transaction?.quantity == 2)
        }
    }

    @Test func undecodableRequestIsInvalidArgumentAndStoreKeepsServing() async throws {
        try await StoreFixture.with { store in
            let token = try store.newAccount()
            // A varint where PurchaseRequest has a string: the payload is not a PurchaseRequest.
            let error = await #expect(throws: RPCError.self) {
                try await store.call(
                    "Purchase", StoreV1.FinishResponse(alreadyFinished: true), as: StoreV1.PurchaseResponse.self,
                    token: token)
            }
            #expect(error?.code == .invalidArgument)
            #expect(error?.message.contains("not a valid") == true)
            #expect(try await store.balance(token) == 0)
            #expect(try await store.buy("credits.5", token: token).transaction?.state == .purchased)
        }
    }

    @Test func ledgerIsBoundToTheEnvironmentItIsFirstServedWith() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Opening (account create, admin commands) does not bind: the README's order, accounts first, can make a production store.
        let opened = try Store(
            configuration: StoreConfiguration(dataDirectory: directory, catalog: testCatalog, environment: .sandbox)
                .onTestLedger())
        _ = try opened.createAccount()
        #expect(try opened.ledger.environment() == nil)
        let production = try Store(
            configuration: StoreConfiguration(
                dataDirectory: directory, catalog: testCatalog, environment: .production,
                paymentProcessor: LiveCardProcessor()
            ).onTestLedger())
        try production.prepareToServe()
        #expect(try production.ledger.environment() == .production)
        #expect(throws: StoreError.self) {
            try Store(
                configuration: StoreConfiguration(dataDirectory: directory, catalog: testCatalog, environment: .sandbox)
                    .onTestLedger())
        }
    }

    @Test func productionRefusesTheSimulatedProcessorAndTestCards() async throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let error = #expect(throws: StoreError.self) {
            try StoreServer(
                store: StoreConfiguration(dataDirectory: directory, catalog: testCatalog, environment: .production)
                    .onTestLedger())
        }
        #expect(error?.code == .failedPrecondition)
        #expect(
            error?.message.contains("simulated processor is for sandbox only") == true, "\(String(describing: error))")
        try await StoreFixture.with(environment: .production) { production in
            let token = try production.newAccount()
            for method in [goodCard, "test-ask", "test-cancel"] {
                let refused = try #require(
                    try await production.buy("filter.sepia", method: method, token: token).transaction)
                #expect(refused.state == .failed)
                #expect(refused.errorCode == 3)
                #expect(refused.errorReason == "test_payment_method")
            }
            #expect(
                try await production.buy("filter.sepia", method: liveCard, token: token).transaction?.state
                    == .purchased)
        }
    }
}
