import Foundation
import HTTPTypes
import Hummingbird
import KioskAPI
import KioskSigning
import NIOCore

/// An app's back end that takes Kiosk's webhooks: each POST's `Kiosk-Signature` is checked (else 400 or 401 with
/// the reason, and the store sends it again later), its event decoded, handled once by event id, and answered 204.
///
///     KIOSK_WEBHOOK_SECRET="$(cat hook.secret)" webhook-receiver [--host 127.0.0.1] [--port 8088]
///         [--path /kiosk/webhooks]
///     kiosk-store webhook add http://127.0.0.1:8088/kiosk/webhooks --secret-file hook.secret --data-dir …
@main
struct WebhookReceiver {
    static let usage = """
        usage: webhook-receiver [--host HOST] [--port PORT] [--path PATH]
        Takes Kiosk's signed webhooks at http://HOST:PORT/PATH (default 127.0.0.1, 8088, /kiosk/webhooks; \
        also KIOSK_WEBHOOK_HOST, KIOSK_WEBHOOK_PORT; port 0 picks a free one) and prints what it would grant \
        or revoke. The secret, as given to `kiosk-store webhook add --secret-file`, is read from \
        KIOSK_WEBHOOK_SECRET.
        """
    /// A webhook body is one event: far smaller than this.
    static let maximumBodyBytes = 1 << 20

    static func main() async throws {
        let options: Options
        do {
            options = try Options(
                arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
        } catch let error as UsageError {
            if error.status == 0 {
                print(usage)
            } else {
                FileHandle.standardError.write(Data("webhook-receiver: \(error.message)\n\(usage)\n".utf8))
            }
            exit(error.status)
        }
        let seen = SeenEvents()
        let router = Router()
        router.post(RouterPath(options.path)) { request, _ -> Response in
            try await Self.receive(request, secret: options.secret, seen: seen)
        }
        let app = Application(
            router: router,
            configuration: ApplicationConfiguration(
                address: .hostname(options.host, port: options.port), serverName: "kiosk-webhook-receiver"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? options.port
                report("webhook-receiver listening on http://\(options.host):\(port)\(options.path)")
            })
        try await app.runService()
    }

    /// One webhook POST: verified, decoded, handled unless its event was handled before, answered 204.
    static func receive(_ request: Request, secret: [UInt8], seen: SeenEvents) async throws -> Response {
        // A longer body throws NIOTooManyBytesError, which Hummingbird answers 413.
        let buffer = try await request.body.collect(upTo: maximumBodyBytes)
        let body = Array(buffer.readableBytesView)
        // The check is the one the store signs with (KioskAPI's WebhookSignature): the signature over "<t>." + body
        // with the secret, and `t` within five minutes of this clock (an older request is a replay).
        guard let signature = request.headers[signatureField], !signature.isEmpty else {
            report("refused a request: no \(WebhookSignature.header) header")
            throw HTTPError(.badRequest, message: "no \(WebhookSignature.header) header")
        }
        guard WebhookSignature.isValid(signature, body: body, secret: secret, nowMs: currentTimeMs()) else {
            report("refused a request: its signature does not match the body, or its time is not within 5 minutes")
            throw HTTPError(.unauthorized, message: "the signature does not match, or it is too old or too new")
        }
        let event: KioskEvent
        do {
            event = try JSONDecoder().decode(KioskEvent.self, from: Data(body))
        } catch {
            // Signed by the store, yet not an event: 400, so the store sends it again (`webhook deliveries`).
            report("refused a signed request whose body is not an event: \(error)")
            throw HTTPError(.badRequest, message: "the body is not a Kiosk event")
        }
        if await seen.insert(event.eventID) {
            handle(event)
        } else {
            // Delivery is at least once: an answer lost on the way brings the event again.
            report("event \(event.eventID) \(event.type): delivered again, already handled")
        }
        return Response(status: .noContent)
    }

    /// What the app would do: grant on a purchase, renewal or approval; revoke on a refund or an expiry.
    /// A real back end does it in its database, with the event id recorded in the same transaction.
    static func handle(_ event: KioskEvent) {
        let product = event.productID ?? "?"
        let account = event.accountID ?? "?"
        let transaction = event.transactionID.map { ", transaction \($0)" } ?? ""
        let why = (event.reason ?? event.expirationReason).map { " (\($0))" } ?? ""
        let prefix = "event \(event.eventID) \(event.type)"
        switch event.type {
        case "PURCHASED", "RENEWED", "APPROVED":
            report("\(prefix): grant \(product) to account \(account)\(transaction)")
        case "REFUNDED", "EXPIRED":
            report("\(prefix): revoke \(product) from account \(account)\(transaction)\(why)")
        default:
            // DEFERRED, DECLINED, AUTO_RENEW_CHANGED, PRICE_CHANGED, REFUND_REQUESTED, REFUND_DENIED, TEST, and
            // types a newer store records: nothing to grant or take back.
            report("\(prefix): nothing to grant or revoke\(why)")
        }
    }
}

/// The fields of a webhook's JSON body this back end acts on (docs/events-and-webhooks.md); the others
/// (`created_ms`, `environment`, `signed_event`, …) are left undecoded.
struct KioskEvent: Codable, Sendable {
    var eventID: UInt64
    /// `PURCHASED`, `REFUNDED`, … (a type a newer store records comes as `EventType(N)`).
    var type: String
    var accountID: String?
    var transactionID: String?
    var productID: String?
    var reason: String?
    var expirationReason: String?

    enum CodingKeys: String, CodingKey {
        case eventID = "event_id", type, accountID = "account_id", transactionID = "transaction_id"
        case productID = "product_id", reason, expirationReason = "expiration_reason"
    }
}

/// The event ids handled so far, in memory: a restarted receiver takes a repeat as new (keep them with the
/// grants in a real back end).
actor SeenEvents {
    private var ids: Set<UInt64> = []

    /// True the first time `id` is given.
    func insert(_ id: UInt64) -> Bool {
        ids.insert(id).inserted
    }
}

/// The command line: flags win over the environment.
struct Options {
    var host = "127.0.0.1"
    var port = 8088
    var path = "/kiosk/webhooks"
    var secret: [UInt8] = []

    init(arguments: [String], environment: [String: String]) throws {
        if let host = environment["KIOSK_WEBHOOK_HOST"], !host.isEmpty { self.host = host }
        if let port = environment["KIOSK_WEBHOOK_PORT"], !port.isEmpty { self.port = try Self.parsePort(port) }
        var remaining = arguments[...]
        while let flag = remaining.popFirst() {
            if flag == "-h" || flag == "--help" { throw UsageError(message: "", status: 0) }
            guard ["--host", "--port", "--path"].contains(flag) else {
                throw UsageError(message: "unknown argument \(flag)", status: 64)
            }
            guard let value = remaining.popFirst() else {
                throw UsageError(message: "\(flag) needs a value", status: 64)
            }
            switch flag {
            case "--host": host = value
            case "--port": port = try Self.parsePort(value)
            default: path = value.hasPrefix("/") ? value : "/" + value
            }
        }
        // As `kiosk-store webhook add` reads its secret file: a trailing newline is not part of it.
        var secret = Array((environment["KIOSK_WEBHOOK_SECRET"] ?? "").utf8)
        while let last = secret.last, last == 10 || last == 13 { secret.removeLast() }
        guard !secret.isEmpty else {
            throw UsageError(message: "KIOSK_WEBHOOK_SECRET is not set (the webhook's shared secret)", status: 64)
        }
        self.secret = secret
    }

    private static func parsePort(_ text: String) throws -> Int {
        guard let port = Int(text), (0...65535).contains(port) else {
            throw UsageError(message: "\(text) is not a port number", status: 64)
        }
        return port
    }
}

/// A command line that cannot run: what to say, and the exit status (0 for --help).
struct UsageError: Error {
    var message: String
    var status: Int32
}

/// The header the store signs with.
let signatureField = HTTPField.Name(WebhookSignature.header)!

/// Milliseconds since 1970 by this machine's clock: what a webhook's `t` is compared with.
func currentTimeMs() -> Int64 {
    Int64((Date().timeIntervalSince1970 * 1000).rounded())
}

/// One line on standard output, unbuffered (it may be a pipe).
func report(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
