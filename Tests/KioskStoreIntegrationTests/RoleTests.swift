import Foundation
import KioskAPI
import KioskRPC
import KioskWire
import Testing

@testable import KioskStore

/// Who may call what: accounts, content services, admins; the revocation feed's one reader.
@Suite(.timeLimit(.minutes(1))) struct RoleTests {
    func options(_ token: String?) -> CallOptions {
        var metadata = Metadata()
        if let token { metadata.add("authorization", "Bearer \(token)") }
        return CallOptions(timeout: .seconds(10), metadata: metadata)
    }

    func code<Request: WireMessage, Response: WireMessage>(
        _ fixture: StoreFixture, _ method: String, _ request: Request, _ response: Response.Type, token: String?
    ) async -> StatusCode? {
        do {
            _ = try await fixture.client.unary(method, request: request, response: response, options: options(token))
            return .ok
        } catch let error as RPCError {
            return error.code
        } catch {
            return nil
        }
    }

    /// The first message of a WatchRevocations stream, or its error's code.
    func watch(_ fixture: StoreFixture, token: String?) async -> StatusCode? {
        var feed = fixture.client.serverStreaming(
            "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(),
            response: StoreV1.Revocation.self,
            options: options(token)
        ).makeAsyncIterator()
        do {
            return try await feed.next() != nil ? .ok : nil
        } catch let error as RPCError {
            return error.code
        } catch {
            return nil
        }
    }

    @Test func eachMethodServesItsRolesOnly() async throws {
        try await StoreFixture.with { fixture in
            let account = try fixture.newAccount()
            let content = try fixture.store.createServiceCredential(role: .content, name: "content-1").secret
            let admin = try fixture.store.createServiceCredential(role: .admin, name: "ops").secret
            #expect(content.hasPrefix("ksvc_") && admin.hasPrefix("ksvc_"))

            // The revocation feed: content services only.
            #expect(await watch(fixture, token: account) == .permissionDenied)
            #expect(await watch(fixture, token: admin) == .permissionDenied)
            #expect(await watch(fixture, token: "kiosk_unknown") == .unauthenticated)
            #expect(await watch(fixture, token: "ksvc_unknown") == .unauthenticated)
            #expect(await watch(fixture, token: content) == .ok)

            // Admin calls: admins only.
            let refund = StoreV1.RefundRequest(transactionID: "tx_none", reason: "test")
            #expect(
                await code(fixture, "/kiosk.store.v1.Admin/Refund", refund, StoreV1.Revocation.self, token: account)
                    == .permissionDenied)
            #expect(
                await code(fixture, "/kiosk.store.v1.Admin/Refund", refund, StoreV1.Revocation.self, token: content)
                    == .permissionDenied)
            #expect(
                await code(fixture, "/kiosk.store.v1.Admin/Refund", refund, StoreV1.Revocation.self, token: admin)
                    == .notFound)

            // Buying: accounts only.
            let purchase = StoreV1.PurchaseRequest(productID: "credits.5", quantity: 1, paymentMethod: goodCard)
            #expect(
                await code(
                    fixture, "/kiosk.store.v1.Store/Purchase", purchase, StoreV1.PurchaseResponse.self, token: content)
                    == .permissionDenied)
            #expect(
                await code(
                    fixture, "/kiosk.store.v1.Store/Purchase", purchase, StoreV1.PurchaseResponse.self, token: admin)
                    == .permissionDenied)
            #expect(
                await code(
                    fixture, "/kiosk.store.v1.Store/GetAccount", StoreV1.GetAccountRequest(), StoreV1.Account.self,
                    token: content) == .permissionDenied)
            #expect(
                await code(
                    fixture, "/kiosk.store.v1.Store/AccessToken", StoreV1.AccessTokenRequest(),
                    StoreV1.AccessTokenResponse.self, token: content) == .permissionDenied)

            // Public keys and health: anyone, no token at all.
            let keys = try await fixture.client.unary(
                "/kiosk.store.v1.Store/PublicKeys", request: StoreV1.PublicKeysRequest(),
                response: StoreV1.PublicKeysResponse.self)
            #expect(keys.keys.count == 1)

            // A revoked credential is refused as unknown, and the feed it holds open ends with 16.
            var open = fixture.client.serverStreaming(
                "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(),
                response: StoreV1.Revocation.self,
                options: CallOptions(metadata: options(content).metadata)
            ).makeAsyncIterator()
            #expect(try await open.next() != nil)
            let credentials = try fixture.store.ledger.serviceCredentials()
            #expect(Set(credentials.map(\.role)) == [.content, .admin])
            try fixture.store.revokeServiceCredential(id: try #require(credentials.first { $0.role == .content }).id)
            #expect(await watch(fixture, token: content) == .unauthenticated)
            var ended: StatusCode?
            do {
                while try await open.next() != nil {}
            } catch let error as RPCError {
                ended = error.code
            }
            #expect(ended == .unauthenticated, "the open feed of a revoked credential ends")
        }
    }

    /// PERMISSION_DENIED comes from HEADERS: a request that would not even decode gets 7, not 3.
    @Test func theRoleIsCheckedBeforeTheRequestIsDecoded() async throws {
        try await StoreFixture.with { fixture in
            let account = try fixture.newAccount()
            let admin = try fixture.store.createServiceCredential(role: .admin, name: "ops").secret
            // An Account (field 2 a varint) where a RefundRequest (field 2 a string) is expected does not decode.
            let garbage = StoreV1.Account(accountID: "x", paymentsAllowed: true, creditBalance: 7)
            #expect(
                await code(fixture, "/kiosk.store.v1.Admin/Refund", garbage, StoreV1.Revocation.self, token: admin)
                    == .invalidArgument)
            #expect(
                await code(fixture, "/kiosk.store.v1.Admin/Refund", garbage, StoreV1.Revocation.self, token: account)
                    == .permissionDenied)
        }
    }

    @Test func adminCallsRefundCreateAccountsAndManageKeys() async throws {
        try await StoreFixture.with { fixture in
            let admin = try fixture.store.createServiceCredential(role: .admin, name: "ops").secret
            let created = try await fixture.client.unary(
                "/kiosk.store.v1.Admin/CreateAccount", request: StoreV1.CreateAccountRequest(),
                response: StoreV1.CreateAccountResponse.self,
                options: options(admin))
            let bought = try await fixture.buy("filter.sepia", token: created.token)
            let transaction = try #require(bought.transaction)
            let revocation = try await fixture.client.unary(
                "/kiosk.store.v1.Admin/Refund",
                request: StoreV1.RefundRequest(transactionID: transaction.transactionID, reason: "admin call"),
                response: StoreV1.Revocation.self, options: options(admin))
            #expect(revocation.transactionID == transaction.transactionID && revocation.accountID == created.accountID)
            let verdict = try await fixture.verify(transaction.signedReceipt, token: created.token)
            #expect(verdict.revocationReason == "admin call")

            let old = try fixture.store.publicKeys()[0]
            let rotated = try await fixture.client.unary(
                "/kiosk.store.v1.Admin/RotateKey", request: StoreV1.RotateKeyRequest(),
                response: StoreV1.PublicKey.self, options: options(admin))
            #expect(rotated.keyID != old.id)
            let retired = try await fixture.client.unary(
                "/kiosk.store.v1.Admin/RetireKey", request: StoreV1.RetireKeyRequest(keyID: old.id),
                response: StoreV1.PublicKey.self,
                options: options(admin))
            #expect(retired.keyID == old.id && retired.notAfterMs > 0)
        }
    }

    /// Many streams, one reader: the ledger is read by the feed's poller at its interval, however many
    /// streams are open; a refund reaches every stream; a key change is announced on each.
    @Test func everyStreamFollowsOneReader() async throws {
        try await StoreFixture.with { fixture in
            let credential = try fixture.store.createServiceCredential(role: .content, name: "content").secret
            let streams = 40
            var feeds = (0..<streams).map { _ in
                fixture.client.serverStreaming(
                    "/kiosk.store.v1.Store/WatchRevocations", request: StoreV1.WatchRevocationsRequest(),
                    response: StoreV1.Revocation.self,
                    options: CallOptions(metadata: options(credential).metadata)
                ).makeAsyncIterator()
            }
            for index in feeds.indices {
                #expect(try await feeds[index].next()?.transactionID == "", "first a heartbeat")
            }
            let looksBefore = fixture.store.feed.looks
            let started = ContinuousClock.now

            let token = try fixture.newAccount()
            let transaction = try #require(try await fixture.buy("filter.sepia", token: token).transaction)
            _ = try await fixture.store.refund(transactionID: transaction.transactionID, reason: "to every stream")
            for index in feeds.indices {
                let revocation = try await nextRevocation(&feeds[index])
                #expect(revocation?.transactionID == transaction.transactionID)
            }
            _ = try fixture.store.rotateKeys()
            for index in feeds.indices {
                var announced = false
                while let message = try await feeds[index].next() {
                    if message.keysChanged {
                        announced = true
                        break
                    }
                }
                #expect(announced)
            }
            let elapsed = started.duration(to: .now)
            let looks = fixture.store.feed.looks - looksBefore
            // One reader: about one look per poll interval (50 ms) plus one per write, not one per stream.
            let bound = UInt64(elapsed / .milliseconds(50)) + 10
            #expect(looks <= bound, "\(looks) looks in \(elapsed) with \(streams) streams")
        }
    }
}
