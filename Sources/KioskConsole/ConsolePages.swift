import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStore

extension AdminConsole {
    typealias Session = ConsoleSessions.Session
    typealias Response = SideHTTPServer.Response

    /// An amount of minor units of `currency` as a decimal with its code.
    static func money(_ minorUnits: Int64, _ currency: String) -> String {
        Money(minorUnits: minorUnits, currency: currency).description
    }

    // MARK: Overview

    func overview(session: Session, cookie: String) async -> Response {
        let ledger = store.ledger
        let metrics: LedgerMetrics
        let activity: DailyActivity
        do {
            metrics = try await ledger.metrics()
            activity = try await ledger.dailyActivity(days: 30, nowMs: nowMs)
        } catch {
            return failure(error, session: session, cookie: cookie)
        }
        let labels = (0..<activity.days).map { formatDay(activity.firstDay + Int64($0)) }
        return page("Overview", session: session, cookie: cookie) { html in
            html.raw("<div class=\"cards\">")
            let purchased = metrics.transactions.filter { $0.state == .purchased }.reduce(0) { $0 + $1.count }
            let refunded = metrics.transactions.filter { $0.revoked }.reduce(0) { $0 + $1.count }
            let active = metrics.subscriptions.filter { $0.key != .expired && $0.key != .revoked }.values.reduce(0, +)
            for (label, value) in [
                ("Purchases", String(purchased)), ("Refunded", String(refunded)),
                ("Live subscriptions", String(active)),
                ("Payments pending", String(metrics.pendingIntents)),
                ("Webhook deliveries failed", String(metrics.webhookDeliveries["failed"] ?? 0)),
                ("Event log head", String(metrics.eventLogHead)),
            ] {
                html.raw("<div class=\"card\">")
                html.element("b", value)
                html.text(label)
                html.raw("</div>")
            }
            html.raw("</div>")
            html.element("h2", "Revenue per day (UTC), last 30 days")
            if activity.revenue.isEmpty {
                html.element("p", "No revenue in these days.", attributes: "class=\"empty\"")
            }
            for currency in activity.revenue.keys.sorted() {
                let values = activity.revenue[currency] ?? []
                html.element("h3", "\(currency): \(Self.money(values.reduce(0, &+), currency)) in 30 days")
                html.raw(
                    SVGChart.bars(
                        title: "Revenue per day in \(currency)", labels: labels,
                        series: [.init(name: currency, color: "#2b6cb0", values: values)],
                        format: { Self.money($0, currency) }))
            }
            html.element("h2", "Purchases and refunds per day (UTC)")
            html.raw(
                SVGChart.bars(
                    title: "Purchases and refunds per day", labels: labels,
                    series: [
                        .init(name: "purchases", color: "#2f855a", values: activity.purchases),
                        .init(name: "refunds", color: "#c53030", values: activity.refunds),
                    ]))
            html.element("h2", "Subscriptions by state")
            let states: [Subscription.State] = [.active, .inGracePeriod, .inBillingRetry, .expired, .revoked]
            html.raw(
                SVGChart.horizontal(
                    title: "Subscriptions by state",
                    items: states.map { ("\($0)", metrics.subscriptions[$0] ?? 0) }, color: "#6b46c1"))
            html.element("h2", "Revenue, all time")
            html.table(
                ["currency", "charged and kept", "refunded"],
                Set(metrics.revenueMinorUnits.keys).union(metrics.refundedMinorUnits.keys).sorted().map {
                    [
                        $0, Self.money(metrics.revenueMinorUnits[$0] ?? 0, $0),
                        Self.money(metrics.refundedMinorUnits[$0] ?? 0, $0),
                    ]
                })
        }
    }

    // MARK: Products

    func products(session: Session, cookie: String) -> Response {
        let catalog = store.configuration.catalog
        return page("Products", session: session, cookie: cookie) { html in
            html.element("p", "The catalog of \(catalog.bundleID): \(catalog.products.count) products.")
            html.table(
                ["id", "type", "title", "price", "period", "group", "offers"],
                catalog.products.map { product in
                    var offers = product.promotionalOffers.map(\.id)
                    if let intro = product.introductoryOffer { offers.insert("intro: \(intro.id)", at: 0) }
                    return [
                        product.id, "\(product.type)", product.title, "\(product.price) \(product.currency)",
                        product.subscriptionPeriod.map { "\($0)" } ?? "",
                        product.subscriptionPeriod == nil
                            ? "" : product.subscriptionGroup,
                        offers.joined(separator: ", "),
                    ]
                })
        }
    }

    // MARK: Accounts

    func accounts(_ query: String?, session: Session, cookie: String) async -> Response {
        let ledger = store.ledger
        var found: (account: AccountRecord, transactions: [TransactionRecord], subscriptions: [SubscriptionRecord])?
        var notFound = false
        if let query {
            do {
                found = try await ledger.offload { () -> (AccountRecord, [TransactionRecord], [SubscriptionRecord])? in
                    let accountID = try ledger.transaction(id: query)?.accountID ?? query
                    guard let account = try ledger.account(id: accountID) else { return nil }
                    return (
                        account, try ledger.transactions(accountID: accountID),
                        try ledger.subscriptions(accountID: accountID)
                    )
                }
                notFound = found == nil
            } catch {
                return failure(error, session: session, cookie: cookie)
            }
        }
        return page("Accounts", status: notFound ? 404 : 200, session: session, cookie: cookie) { html in
            html.raw("<form method=\"get\" action=\"/accounts\" class=\"inline\">")
            html.raw(
                "<input type=\"text\" name=\"q\" placeholder=\"account or transaction id\" value=\"\(HTML.escape(query ?? ""))\" maxlength=\"200\" required>"
            )
            html.raw("<button type=\"submit\">Find</button></form>")
            if notFound {
                html.element("p", "No account or transaction \(query ?? "").", attributes: "class=\"flash error\"")
            }
            guard let found else { return }
            let account = found.account
            html.element("h2", "Account \(account.id)")
            html.element(
                "p",
                "Payments \(account.paymentsAllowed ? "allowed" : "disabled") · credit balance \(account.creditBalance)"
                    + " · storefront \(account.storefront.isEmpty ? "default" : account.storefront)"
            )
            html.element("h2", "Transactions")
            html.raw("<table><thead><tr>")
            for header in ["id", "product", "state", "purchased", "price", "revoked", ""] { html.element("th", header) }
            html.raw("</tr></thead><tbody>")
            for record in found.transactions {
                html.raw("<tr>")
                for cell in [
                    record.id, record.productID, "\(record.state)", formatTime(record.purchaseMs),
                    record.price.isEmpty
                        ? ""
                        : "\(record.price) \(record.currency)"
                            + (record.storefront.isEmpty ? "" : " (\(record.storefront))"),
                    record.revokedMs == 0 ? "" : "\(formatTime(record.revokedMs)): \(record.revocationReason)",
                ] {
                    html.element("td", cell)
                }
                html.raw("<td>")
                if record.state == .purchased && record.revokedMs == 0 {
                    html.postButton(
                        "Refund", action: "/accounts/refund", csrf: session.csrf,
                        fields: [("transaction_id", record.id), ("account", account.id)],
                        visible: [FormField(name: "reason", placeholder: "reason")], danger: true)
                }
                html.raw("</td></tr>")
            }
            html.raw("</tbody></table>")
            html.raw("<form method=\"post\" action=\"/accounts/redeem\" class=\"inline\">")
            html.raw("<input type=\"hidden\" name=\"csrf\" value=\"\(HTML.escape(session.csrf))\">")
            html.raw("<input type=\"hidden\" name=\"account\" value=\"\(HTML.escape(account.id))\">")
            html.raw("<input type=\"text\" name=\"code\" placeholder=\"offer code\" maxlength=\"64\" required>")
            html.raw(
                "<input type=\"text\" name=\"payment_method\" placeholder=\"payment method (a subscription's code)\" maxlength=\"256\">"
            )
            html.raw("<button type=\"submit\">Redeem for this account</button></form>")
            html.element("h2", "Subscriptions")
            html.table(
                ["original transaction", "product", "state", "auto-renew", "expires", "periods paid"],
                found.subscriptions.map {
                    [
                        $0.originalID, $0.productID, "\($0.state)", $0.willAutoRenew ? "on" : "off",
                        formatTime($0.expiresMs),
                        String($0.periodsPaid),
                    ]
                })
        }
    }

    // MARK: Refund requests

    func refunds(_ stateName: String, session: Session, cookie: String) async -> Response {
        let ledger = store.ledger
        let state =
            [RefundRequest.State.pending, .granted, .denied].first { "\($0)".lowercased() == stateName.lowercased() }
            ?? .pending
        let page: RefundRequestPage
        do {
            page = try await ledger.offload { try ledger.refundRequests(state: state, limit: 200) }
        } catch {
            return failure(error, session: session, cookie: cookie)
        }
        return self.page("Refund requests", session: session, cookie: cookie) { html in
            html.raw("<p>")
            for one in [RefundRequest.State.pending, .granted, .denied] {
                html.raw(
                    "<a href=\"/refunds?state=\("\(one)".lowercased())\">\(HTML.escape("\(one)".lowercased()))</a> ")
            }
            html.raw("</p>")
            html.element("h2", "\("\(state)".lowercased()) (\(page.requests.count)\(page.hasMore ? "+" : ""))")
            guard !page.requests.isEmpty else {
                html.element("p", "none", attributes: "class=\"empty\"")
                return
            }
            html.raw("<table><thead><tr>")
            for header in ["transaction", "account", "product", "asked", "buyer's reason", "decision"] {
                html.element("th", header)
            }
            html.raw("</tr></thead><tbody>")
            for request in page.requests {
                html.raw("<tr>")
                html.raw("<td><a href=\"/accounts?q=\(HTML.escape(request.transactionID))\">")
                html.text(request.transactionID)
                html.raw("</a></td>")
                for cell in [request.accountID, request.productID, formatTime(request.requestedMs), request.reason] {
                    html.element("td", cell)
                }
                html.raw("<td>")
                if request.state == .pending {
                    html.postButton(
                        "Grant (refund)", action: "/refunds/grant", csrf: session.csrf,
                        fields: [("transaction_id", request.transactionID)],
                        visible: [FormField(name: "reason", placeholder: "reason")], danger: true)
                    html.postButton(
                        "Deny", action: "/refunds/deny", csrf: session.csrf,
                        fields: [("transaction_id", request.transactionID)],
                        visible: [FormField(name: "reason", placeholder: "reason")])
                } else {
                    html.text("\(formatTime(request.decidedMs)): \(request.decisionReason)")
                }
                html.raw("</td></tr>")
            }
            html.raw("</tbody></table>")
        }
    }

    // MARK: Webhooks

    func webhooks(_ stateName: String?, session: Session, cookie: String) async -> Response {
        let store = self.store
        let state = stateName.flatMap(WebhookDelivery.State.init(rawValue:))
        let found: ([WebhookRecord], [WebhookDelivery])
        do {
            found = try await store.ledger.offload {
                (try store.webhooks(), try store.webhookDeliveries(state: state, limit: 200))
            }
        } catch {
            return failure(error, session: session, cookie: cookie)
        }
        return page("Webhooks", session: session, cookie: cookie) { html in
            html.raw("<table><thead><tr>")
            for header in ["id", "URL", "added", "queued through event", ""] { html.element("th", header) }
            html.raw("</tr></thead><tbody>")
            for webhook in found.0 {
                html.raw("<tr>")
                for cell in [webhook.id, webhook.url, formatTime(webhook.createdMs), String(webhook.enqueuedThrough)] {
                    html.element("td", cell)
                }
                html.raw("<td>")
                html.postButton(
                    "Redrive failed deliveries", action: "/webhooks/redrive", csrf: session.csrf,
                    fields: [("webhook_id", webhook.id)])
                html.raw("</td></tr>")
            }
            html.raw("</tbody></table>")
            if found.0.isEmpty {
                html.element("p", "No webhooks (kiosk-store webhook add).", attributes: "class=\"empty\"")
            }
            html.element("h2", "Deliveries\(state.map { " (\($0.rawValue))" } ?? ""), newest first")
            html.raw("<p><a href=\"/webhooks\">all</a> ")
            for one in WebhookDelivery.State.allCases {
                html.raw("<a href=\"/webhooks?state=\(one.rawValue)\">\(one.rawValue)</a> ")
            }
            html.raw("</p>")
            html.raw("<table><thead><tr>")
            for header in ["webhook", "event", "account", "state", "attempts", "first tried", "last error", ""] {
                html.element("th", header)
            }
            html.raw("</tr></thead><tbody>")
            for delivery in found.1 {
                html.raw("<tr>")
                for cell in [
                    delivery.webhookID, String(delivery.eventID), delivery.accountID, delivery.state.rawValue,
                    String(delivery.attempts), formatTime(delivery.firstAttemptMs), delivery.lastError,
                ] {
                    html.element("td", cell)
                }
                html.raw("<td>")
                if delivery.state == .failed {
                    html.postButton(
                        "Redrive", action: "/webhooks/redrive", csrf: session.csrf,
                        fields: [("webhook_id", delivery.webhookID), ("event_id", String(delivery.eventID))])
                }
                html.raw("</td></tr>")
            }
            html.raw("</tbody></table>")
        }
    }

    // MARK: Keys and credentials

    func keys(session: Session, cookie: String) async -> Response {
        let store = self.store
        let found: ([ReceiptPublicKey], [ServiceCredentialRecord])
        do {
            found = try await store.ledger.offload { (try store.publicKeys(), try store.ledger.serviceCredentials()) }
        } catch {
            return failure(error, session: session, cookie: cookie)
        }
        let secret = sessions.takeSecret(cookie)
        return page("Keys and credentials", session: session, cookie: cookie) { html in
            if let secret {
                html.element("p", "Credential \(secret.id) created. Its secret is shown only now:")
                html.element("p", secret.secret, attributes: "class=\"secret\" id=\"secret\"")
            }
            html.element("h2", "Signing keys (newest signs)")
            html.raw("<table><thead><tr>")
            for header in ["id", "signs from", "retired at", ""] { html.element("th", header) }
            html.raw("</tr></thead><tbody>")
            for (index, key) in found.0.enumerated() {
                html.raw("<tr>")
                html.element("td", key.id)
                html.element("td", formatTime(key.notBeforeMs))
                html.element(
                    "td", key.isRetired ? formatTime(key.notAfterMs) : (index == found.0.count - 1 ? "active" : ""))
                html.raw("<td>")
                if index < found.0.count - 1 && !key.isRetired {
                    html.postButton(
                        "Retire now", action: "/keys/retire", csrf: session.csrf, fields: [("key_id", key.id)],
                        danger: true)
                }
                html.raw("</td></tr>")
            }
            html.raw("</tbody></table>")
            html.postButton("Rotate: a new key signs from now on", action: "/keys/rotate", csrf: session.csrf)
            html.element("h2", "Service credentials")
            html.raw("<table><thead><tr>")
            for header in ["id", "role", "name", "created", "revoked", ""] { html.element("th", header) }
            html.raw("</tr></thead><tbody>")
            for credential in found.1 {
                html.raw("<tr>")
                for cell in [
                    credential.id, credential.role.rawValue, credential.name, formatTime(credential.createdMs),
                    formatTime(credential.revokedMs),
                ] {
                    html.element("td", cell)
                }
                html.raw("<td>")
                if credential.revokedMs == 0 {
                    html.postButton(
                        "Revoke", action: "/credentials/revoke", csrf: session.csrf,
                        fields: [("credential_id", credential.id)], danger: true)
                }
                html.raw("</td></tr>")
            }
            html.raw("</tbody></table>")
            html.raw("<form method=\"post\" action=\"/credentials/create\" class=\"inline\">")
            html.raw("<input type=\"hidden\" name=\"csrf\" value=\"\(HTML.escape(session.csrf))\">")
            html.raw("<input type=\"hidden\" name=\"role\" value=\"content\">")
            html.raw("<input type=\"text\" name=\"name\" placeholder=\"name\" maxlength=\"100\" required>")
            html.raw("<button type=\"submit\">Create a content credential</button></form>")
            html.element(
                "p", "Admin credentials are made on the store's host: kiosk-store service create --role admin.",
                attributes: "class=\"hint\"")
        }
    }

    // MARK: Offer codes

    func codes(session: Session, cookie: String) async -> Response {
        let batches: [OfferCodeBatch]
        do {
            batches = try await store.ledger.offerCodeBatches()
        } catch {
            return failure(error, session: session, cookie: cookie)
        }
        return page("Offer codes", session: session, cookie: cookie) { html in
            html.raw("<table><thead><tr>")
            for header in ["batch", "kind", "product", "price", "terms", "redeemed", "expires", "revoked", ""] {
                html.element("th", header)
            }
            html.raw("</tr></thead><tbody>")
            for batch in batches {
                html.raw("<tr>")
                for cell in [
                    batch.id, batch.kind.rawValue, batch.productID, batch.price,
                    batch.period.isEmpty ? (batch.quantity > 1 ? "×\(batch.quantity)" : "") : "first \(batch.period)",
                    "\(batch.redeemed) of \(batch.redemptionLimit)", formatTime(batch.expiresMs),
                    formatTime(batch.revokedMs),
                ] {
                    html.element("td", cell)
                }
                html.raw("<td>")
                if batch.revokedMs == 0 {
                    html.postButton(
                        "Revoke", action: "/codes/revoke", csrf: session.csrf, fields: [("batch_id", batch.id)],
                        danger: true)
                }
                html.raw("</td></tr>")
            }
            html.raw("</tbody></table>")
            html.element(
                "p",
                "Batches are made on the store's host: kiosk-store codes create (and exported with kiosk-store codes export). Redeem a code for a buyer from their account's page.",
                attributes: "class=\"hint\"")
        }
    }

    // MARK: Activity

    func activity(session: Session, cookie: String) async -> Response {
        let events: [EventRecord]
        do {
            events = try await store.ledger.operatorEvents(limit: 200)
        } catch {
            return failure(error, session: session, cookie: cookie)
        }
        return page("Activity", session: session, cookie: cookie) { html in
            html.element("p", "What operators did, newest first: the Admin RPCs, kiosk-store and this console.")
            html.table(
                ["event", "when", "who", "type", "account", "transaction", "what"],
                events.map {
                    [
                        String($0.id), formatTime($0.createdMs), $0.actor, $0.type.shortName, $0.accountID,
                        $0.transactionID,
                        $0.reason,
                    ]
                })
        }
    }
}
