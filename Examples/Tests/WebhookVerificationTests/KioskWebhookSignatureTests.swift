import Crypto
import Testing
import WebhookVerification

/// The verifier against signatures made as the store makes them: HMAC-SHA256 over "<t>." + body, hex, sent as
/// `t=<ms>,v1=<hex>`. Times are plain milliseconds: the function is given its clock.
@Suite(.timeLimit(.minutes(1))) struct KioskWebhookSignatureTests {
    let secret = Array("a-webhook-secret-of-32-bytes....".utf8)
    let body = Array(#"{"event_id":7,"type":"TEST"}"#.utf8)
    let sentMs: Int64 = 1_000_000

    /// The header for `body` at `timestampMs`, computed here with swift-crypto rather than by the verifier's
    /// module.
    func header(body: [UInt8], secret: [UInt8], timestampMs: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("\(timestampMs).".utf8) + body, using: SymmetricKey(data: secret))
        let hex = mac.map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
        return "t=\(timestampMs),v1=\(hex)"
    }

    /// What `verify` refused with; nil when it accepted.
    func rejection(
        _ header: String?, body: [UInt8]? = nil, secret: [UInt8]? = nil, nowMs: Int64? = nil
    ) -> WebhookRejection? {
        do {
            try KioskWebhookSignature.verify(
                header: header, body: body ?? self.body, secret: secret ?? self.secret, nowMs: nowMs ?? sentMs)
            return nil
        } catch let rejection as WebhookRejection {
            return rejection
        } catch {
            Issue.record("verify threw \(error), not a WebhookRejection")
            return nil
        }
    }

    @Test func aGoodSignatureIsAccepted() throws {
        let signed = header(body: body, secret: secret, timestampMs: sentMs)
        // The same bytes as Python's hmac (Scripts/examples/webhook-receiver.py's check) gives.
        #expect(signed == "t=1000000,v1=94ca2c30bc916b2209e270b9203844675b6c60c459fda1d72712c58164d3dc71")
        #expect(KioskWebhookSignature.headerValue(body: body, secret: secret, timestampMs: sentMs) == signed)
        let timestamp = try KioskWebhookSignature.verify(
            header: signed, body: body, secret: secret, nowMs: sentMs + 2_000)
        #expect(timestamp == sentMs)
        // Upper-case hex, spaces after the comma, and another (unknown) scheme beside it are fine too.
        #expect(rejection("t=\(sentMs), v1=\(signed.split(separator: "=").last!.uppercased()), v2=abc") == nil)
    }

    @Test func oneMatchingSignatureOfSeveralIsEnough() {
        let old = header(body: body, secret: Array("the-secret-before-this-one-32-by".utf8), timestampMs: sentMs)
        let current = header(body: body, secret: secret, timestampMs: sentMs)
        let both = old + "," + (current.split(separator: ",").last.map(String.init) ?? "")
        #expect(rejection(both) == nil)
    }

    @Test func aTamperedBodyIsRefused() {
        let signed = header(body: body, secret: secret, timestampMs: sentMs)
        let tampered = Array(#"{"event_id":8,"type":"TEST"}"#.utf8)
        let refused = rejection(signed, body: tampered)
        #expect(refused?.reason == .signatureMismatch)
        #expect(refused?.httpStatus == 401)
        #expect(rejection(signed, body: body + [0x20])?.reason == .signatureMismatch, "one byte more")
    }

    @Test func anOldOrFarFutureTimestampIsRefused() {
        let tolerance = KioskWebhookSignature.defaultToleranceMs
        #expect(tolerance == 300_000)
        let signed = header(body: body, secret: secret, timestampMs: sentMs)
        #expect(rejection(signed, nowMs: sentMs + tolerance) == nil, "at the edge: still fresh")
        let replayed = rejection(signed, nowMs: sentMs + tolerance + 1)
        #expect(replayed?.reason == .staleTimestamp)
        #expect(replayed?.httpStatus == 401)
        #expect(rejection(signed, nowMs: sentMs - tolerance - 1)?.reason == .staleTimestamp, "from the future")
        // A forged `t` at Int64's limits must not overflow the comparison.
        let extreme = header(body: body, secret: secret, timestampMs: Int64.max)
        #expect(rejection(extreme)?.reason == .staleTimestamp)
        #expect(rejection(header(body: body, secret: secret, timestampMs: Int64.min))?.reason == .staleTimestamp)
    }

    @Test func anotherSecretIsRefused() {
        let signed = header(body: body, secret: Array("somebody-else's-secret-32-bytes.".utf8), timestampMs: sentMs)
        let refused = rejection(signed)
        #expect(refused?.reason == .signatureMismatch)
        #expect(refused?.httpStatus == 401)
        // The right signature checked with a secret that lost its last byte fails too.
        let right = header(body: body, secret: secret, timestampMs: sentMs)
        #expect(rejection(right, secret: Array(secret.dropLast()))?.reason == .signatureMismatch)
    }

    @Test func aMissingOrMalformedHeaderIsABadRequest() {
        let v1 = String(repeating: "ab", count: 32)
        let cases: [(header: String?, reason: WebhookRejection.Reason)] = [
            (nil, .missingSignature),
            ("", .missingSignature),
            ("v1=\(v1)", .malformedSignature),
            ("t=\(sentMs)", .malformedSignature),
            ("t=soon,v1=\(v1)", .malformedSignature),
            ("t=\(sentMs),v1=not-hex", .malformedSignature),
            ("t=\(sentMs),v1=abc", .malformedSignature),
        ]
        for (value, reason) in cases {
            let refused = rejection(value)
            #expect(refused?.reason == reason, "\(value ?? "no header")")
            #expect(refused?.httpStatus == 400, "\(value ?? "no header")")
        }
    }
}
