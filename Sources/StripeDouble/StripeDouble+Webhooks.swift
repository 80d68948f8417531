import AsyncHTTPClient
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore

// Webhooks, as Stripe sends them: an Event object (`evt_…`, `type`, `data.object`) POSTed as JSON to the endpoint
// with `Stripe-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed with the endpoint's secret>`.
//
// The double sends `charge.refunded` (a refund made through its API: its "dashboard"), `payment_intent.succeeded`
// and `payment_intent.payment_failed`, and `charge.dispute.created` / `charge.dispute.closed`
// (``StripeDouble/openDispute(paymentIntent:reason:)``, ``StripeDouble/closeDispute(_:won:)``), in the order they
// happen, one delivery each (Stripe retries failed deliveries for days; a test sends one again itself).
// A Charge carries no metadata here (Stripe's may not either): a receiver asks for its PaymentIntent.
extension StripeDoubleAPI {
    struct OutgoingEvent: Sendable {
        var id: String
        var type: String
        var body: String
    }

    struct Dispute {
        var id: String
        var intent: String
        var charge: String
        var amount: Int64
        var currency: String
        var reason: String
        var status: String
        var created: Int64
    }

    /// Queues an event made by the request being handled.
    func emit(_ type: String, _ object: DoubleJSON, _ state: inout State) {
        let id = Self.newID("evt")
        let event = DoubleJSON.object([
            ("id", .string(id)), ("object", .string("event")), ("api_version", .string(Self.defaultAPIVersion)),
            ("created", .int(Self.now())), ("livemode", .bool(false)), ("type", .string(type)),
            ("data", .object([("object", object)])),
        ])
        state.outbox.append(OutgoingEvent(id: id, type: type, body: event.serialized()))
    }

    /// Hands the queued events to the sender, in order.
    func sendOutbox() {
        let events = state.withLockedValue { state -> [OutgoingEvent] in
            defer { state.outbox = [] }
            return state.outbox
        }
        guard !events.isEmpty, let sender = webhookSender.withLockedValue({ $0 }) else { return }
        sender.enqueue(events)
    }

    static func renderCharge(_ intent: Intent, charge: String) -> DoubleJSON {
        .object([
            ("id", .string(charge)), ("object", .string("charge")), ("amount", .int(intent.amountReceived)),
            ("amount_refunded", .int(intent.amountRefunded)), ("currency", .string(intent.currency)),
            ("customer", intent.customer.map(DoubleJSON.string) ?? .null), ("metadata", .object([])),
            ("payment_intent", .string(intent.id)), ("refunded", .bool(intent.amountRefunded >= intent.amountReceived)),
            ("status", .string("succeeded")),
        ])
    }

    static func render(_ dispute: Dispute) -> DoubleJSON {
        .object([
            ("id", .string(dispute.id)), ("object", .string("dispute")), ("amount", .int(dispute.amount)),
            ("charge", .string(dispute.charge)), ("created", .int(dispute.created)),
            ("currency", .string(dispute.currency)), ("metadata", .object([])),
            ("payment_intent", .string(dispute.intent)), ("reason", .string(dispute.reason)),
            ("status", .string(dispute.status)),
        ])
    }
}

/// Sends the double's events to one endpoint, one at a time, in order.
final class StripeWebhookSender: Sendable {
    let url: String
    let secret: String
    private let queue = NIOLockedValueBox<(pending: [StripeDoubleAPI.OutgoingEvent], running: Bool)>(([], false))
    private let sent = NIOLockedValueBox<[StripeDouble.WebhookDelivery]>([])

    init(url: String, secret: String) {
        self.url = url
        self.secret = secret
    }

    func enqueue(_ events: [StripeDoubleAPI.OutgoingEvent]) {
        let start = queue.withLockedValue { queue -> Bool in
            queue.pending += events
            defer { queue.running = true }
            return !queue.running
        }
        guard start else { return }
        Task { await self.drain() }
    }

    var deliveries: [StripeDouble.WebhookDelivery] { sent.withLockedValue { $0 } }

    private func drain() async {
        while let event = queue.withLockedValue({ queue -> StripeDoubleAPI.OutgoingEvent? in
            guard !queue.pending.isEmpty else {
                queue.running = false
                return nil
            }
            return queue.pending.removeFirst()
        }) {
            let body = Array(event.body.utf8)
            let signature = Self.signature(body, secret: secret, at: Int64(Date().timeIntervalSince1970))
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
            request.headers.add(name: "Stripe-Signature", value: signature)
            request.body = .bytes(ByteBuffer(bytes: body))
            var status = 0
            if let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(10)) {
                status = Int(response.status.code)
                _ = try? await response.body.collect(upTo: 1 << 16)
            }
            sent.withLockedValue {
                $0.append(.init(eventID: event.id, type: event.type, body: body, signature: signature, status: status))
            }
        }
    }

    /// `t=<time>,v1=<hex HMAC-SHA256 of "<time>.<body>">`, as Stripe signs.
    static func signature(_ body: [UInt8], secret: String, at time: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("\(time).".utf8) + body, using: SymmetricKey(data: Array(secret.utf8)))
        return "t=\(time),v1=" + mac.map { String(format: "%02x", $0) }.joined()
    }
}

extension StripeDouble {
    /// One webhook delivery the double made.
    public struct WebhookDelivery: Hashable, Sendable {
        /// `evt_…`.
        public var eventID: String
        /// `charge.refunded`, ….
        public var type: String
        /// The body sent.
        public var body: [UInt8]
        /// The `Stripe-Signature` header sent.
        public var signature: String
        /// The endpoint's answer; 0 when none came.
        public var status: Int
    }

    /// Sends every event from now on to `url` (an endpoint's URL), signed with `secret` (`whsec_…`).
    public func sendWebhooks(to url: String, secret: String) {
        api.webhookSender.withLockedValue { $0 = StripeWebhookSender(url: url, secret: secret) }
    }

    /// The deliveries made so far, oldest first.
    public var webhookDeliveries: [WebhookDelivery] { api.webhookSender.withLockedValue { $0 }?.deliveries ?? [] }

    /// The buyer's bank disputes the charge of a succeeded PaymentIntent (`charge.dispute.created`); answers the
    /// dispute's id (`du_…`), or nil when there is no such charge.
    @discardableResult
    public func openDispute(paymentIntent id: String, reason: String = "fraudulent") -> String? {
        defer { api.sendOutbox() }
        return api.withState { state -> String? in
            guard let intent = state.intents[id], intent.status == "succeeded", let charge = intent.latestCharge
            else { return nil }
            let dispute = StripeDoubleAPI.Dispute(
                id: StripeDoubleAPI.newID("du"), intent: id, charge: charge, amount: intent.amountReceived,
                currency: intent.currency, reason: reason, status: "needs_response",
                created: Int64(Date().timeIntervalSince1970))
            state.disputes[dispute.id] = dispute
            api.emit("charge.dispute.created", StripeDoubleAPI.render(dispute), &state)
            return dispute.id
        }
    }

    /// The dispute is decided (`charge.dispute.closed`, status `won` or `lost`); false for an unknown one.
    @discardableResult
    public func closeDispute(_ id: String, won: Bool) -> Bool {
        defer { api.sendOutbox() }
        return api.withState { state -> Bool in
            guard var dispute = state.disputes[id] else { return false }
            dispute.status = won ? "won" : "lost"
            state.disputes[id] = dispute
            api.emit("charge.dispute.closed", StripeDoubleAPI.render(dispute), &state)
            return true
        }
    }
}
