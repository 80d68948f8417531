import Foundation
import KioskRPC
import KioskStore

extension AdminConsole {
    /// A POST from a signed-in session whose CSRF token was checked: does the action as the session's operator,
    /// leaves what happened (or why not) for the next page, and redirects there (a reload does not act again).
    func act(_ path: String, _ form: FormData, session: Session, cookie: String, secure: Bool) async -> Response {
        let store = self.store
        let actor = Store.actorName(via: "console", credentialID: session.credentialID, name: session.credentialName)
        var back = "/"
        if path == "/signout" {
            sessions.end(cookie)
            return redirect(
                "/signin", cookies: [self.cookie(Self.sessionCookieName(secure: secure), "", secure: secure, maxAge: 0)]
            )
        }
        do {
            switch path {
            case "/refunds/grant", "/accounts/refund":
                back = path == "/refunds/grant" ? "/refunds" : "/accounts?q=" + Self.queryEscape(form["account"] ?? "")
                let (id, reason) = try Self.transactionAndReason(form)
                let revocation = try await store.acting(as: actor) {
                    try await store.refund(transactionID: id, reason: reason)
                }
                sessions.flash(cookie, "Refunded \(revocation.transactionID).")
            case "/refunds/deny":
                back = "/refunds"
                let (id, reason) = try Self.transactionAndReason(form)
                _ = try await store.acting(as: actor) { try await store.denyRefund(transactionID: id, reason: reason) }
                sessions.flash(cookie, "Denied the refund of \(id).")
            case "/webhooks/redrive":
                back = "/webhooks?state=failed"
                let webhookID = try form["webhook_id"].map {
                    try Self.bounded($0, "webhook_id", FieldLimits.offerField)
                }
                var eventID: UInt64?
                if let text = form["event_id"] {
                    guard let number = UInt64(text) else {
                        throw StoreError.invalid("event_id \(text) is not a number")
                    }
                    eventID = number
                }
                let count = try await store.acting(as: actor) {
                    try await store.redriveWebhookDeliveries(webhookID: webhookID, eventID: eventID)
                }
                sessions.flash(cookie, "Queued \(count) failed deliver\(count == 1 ? "y" : "ies") again.")
            case "/keys/rotate":
                back = "/keys"
                let key = try await store.acting(as: actor) {
                    try await store.ledger.offload { try store.rotateKeys() }
                }
                sessions.flash(cookie, "Rotated: \(key.id) signs from now on.")
            case "/keys/retire":
                back = "/keys"
                guard let id = form["key_id"] else { throw StoreError.invalid("key_id is required") }
                let keyID = try Self.bounded(id, "key_id", FieldLimits.offerField)
                let key = try await store.acting(as: actor) {
                    try await store.ledger.offload { try store.retireKey(id: keyID) }
                }
                sessions.flash(cookie, "Retired \(key.id): what it signed from now on does not verify.")
            case "/credentials/revoke":
                back = "/keys"
                guard let id = form["credential_id"] else { throw StoreError.invalid("credential_id is required") }
                let credentialID = try Self.bounded(id, "credential_id", FieldLimits.offerField)
                try await store.acting(as: actor) {
                    try await store.ledger.offload { try store.revokeServiceCredential(id: credentialID) }
                }
                sessions.flash(cookie, "Revoked \(credentialID): its calls are refused from now on.")
            case "/credentials/create":
                back = "/keys"
                // Content credentials only: an admin credential is made on the store's host (`kiosk-store service
                // create --role admin`), so a session taken over cannot leave itself a credential that outlives it.
                guard form["role"] == "content" else {
                    throw StoreError.invalid(
                        "the console creates content credentials; make an admin credential with kiosk-store service create --role admin"
                    )
                }
                guard let name = form["name"] else { throw StoreError.invalid("a name is required") }
                let bounded = try Self.bounded(name, "name", 100)
                let created = try await store.acting(as: actor) {
                    try await store.ledger.offload { try store.createServiceCredential(role: .content, name: bounded) }
                }
                // Shown once, on the page this redirects to (a reload does not create another); the ledger keeps
                // only the secret's hash.
                sessions.keepSecret(cookie, created)
                sessions.flash(cookie, "Created \(created.id).")
            case "/codes/revoke":
                back = "/codes"
                guard let id = form["batch_id"] else { throw StoreError.invalid("batch_id is required") }
                let batchID = try Self.bounded(id, "batch_id", FieldLimits.offerField)
                try await store.acting(as: actor) { try await store.revokeOfferCodes(batchID: batchID) }
                sessions.flash(cookie, "Revoked \(batchID): its codes are refused from now on.")
            case "/accounts/redeem":
                // For a buyer who writes in with a code: redeemed for their account, as the app would.
                let accountID = try Self.bounded(form["account"] ?? "", "account", FieldLimits.transactionID)
                back = "/accounts?q=" + Self.queryEscape(accountID)
                let code = try Self.bounded(form["code"] ?? "", "code", FieldLimits.offerField)
                let method = try Self.bounded(form["payment_method"] ?? "", "payment_method", FieldLimits.paymentMethod)
                let ledger = store.ledger
                guard let account = try await ledger.offload({ try ledger.account(id: accountID) }) else {
                    throw StoreError.notFound("no account \(accountID)")
                }
                let outcome = try await store.acting(as: actor) {
                    try await store.redeemOfferCode(
                        account: account, code: code, paymentMethod: method, idempotencyKey: UUID().uuidString,
                        source: "console:" + session.credentialID)
                }
                switch outcome.result {
                case .purchased(let record):
                    sessions.flash(
                        cookie,
                        outcome.alreadyOwned
                            ? "The account owns \(record.productID) already: the code was not used."
                            : "Redeemed: \(record.productID) ×\(record.quantity), transaction \(record.id).")
                case .deferred(let record):
                    sessions.flash(cookie, "Waiting for approval: transaction \(record.id).")
                case .failed(let failed):
                    sessions.flash(cookie, "Not redeemed: \(failed.reason): \(failed.message)", isError: true)
                }
            default:
                return page("Not found", status: 404, session: session, cookie: cookie) { html in
                    html.element("p", "There is no action \(path).")
                }
            }
        } catch {
            sessions.flash(cookie, "Not done: \(error)", isError: true)
        }
        return redirect(back)
    }

    /// The form's `transaction_id` and `reason`, both required, within the Admin RPCs' limits.
    static func transactionAndReason(_ form: FormData) throws -> (String, String) {
        guard let id = form["transaction_id"], let reason = form["reason"] else {
            throw StoreError.invalid("a transaction and a reason are required")
        }
        return (
            try bounded(id, "transaction_id", FieldLimits.transactionID),
            try bounded(reason, "reason", FieldLimits.reason)
        )
    }

    /// `value` when it has at most `max` bytes and no control character; else refused as the RPCs refuse it.
    static func bounded(_ value: String, _ field: String, _ max: Int) throws -> String {
        guard value.utf8.count <= max else {
            throw StoreError.invalid("\(field) is over \(max) bytes")
        }
        guard !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw StoreError.invalid("\(field) has a control character")
        }
        return value
    }

    static func queryEscape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-_."))) ?? ""
    }
}
