import Crypto
import KioskAPI

/// The signature header of a webhook POST: `t=<ms since 1970>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`.
/// The store signs every delivery with it; an app's back end checks it with ``isValid(_:body:secret:nowMs:toleranceMs:)``
/// (`Examples/Sources/webhook-receiver` does, on Hummingbird).
public enum WebhookSignature {
    /// The header's name.
    public static let header = "Kiosk-Signature"

    /// The header's value for `body` sent at `timestampMs`.
    public static func value(body: [UInt8], secret: [UInt8], timestampMs: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("\(timestampMs).".utf8) + body, using: SymmetricKey(data: secret))
        return "t=\(timestampMs),v1=\(Array(mac).hexString)"
    }

    /// True when `headerValue` signs `body` with `secret` and its time is within `toleranceMs` of `nowMs`.
    public static func isValid(
        _ headerValue: String, body: [UInt8], secret: [UInt8], nowMs: Int64, toleranceMs: Int64 = 300_000
    ) -> Bool {
        var timestamp: Int64?
        var signatures: [String] = []
        for part in headerValue.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map(String.init)
            guard pair.count == 2 else { continue }
            if pair[0] == "t" { timestamp = Int64(pair[1]) } else if pair[0] == "v1" { signatures.append(pair[1]) }
        }
        // Compared without subtracting from `t`: a forged `t` near Int64's limits must not overflow; the window's
        // ends saturate rather than wrap, so a huge tolerance accepts any time instead of none.
        let earliest = nowMs.subtractingReportingOverflow(toleranceMs)
        let latest = nowMs.addingReportingOverflow(toleranceMs)
        guard let timestamp, timestamp >= (earliest.overflow ? .min : earliest.partialValue),
            timestamp <= (latest.overflow ? .max : latest.partialValue)
        else { return false }
        let expected =
            value(body: body, secret: secret, timestampMs: timestamp).split(separator: "=").last.map(String.init) ?? ""
        // Compared in constant time over the hex digits.
        return signatures.contains { candidate in
            candidate.utf8.count == expected.utf8.count
                && zip(candidate.utf8, expected.utf8).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }
}
