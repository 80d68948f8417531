import Crypto

/// The `Kiosk-Signature` header of Kiosk's webhook POSTs, made and checked as docs/events-and-webhooks.md says:
/// `t=<ms since 1970>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`, the secret being the bytes given to
/// `kiosk-store webhook add --secret-file` (without a trailing newline).
///
/// ```swift
/// do {
///     try KioskWebhookSignature.verify(header: signature, body: body, secret: secret, nowMs: nowMs)
/// } catch let rejection as WebhookRejection {
///     // answer rejection.httpStatus with rejection.description; the store sends it again later
/// }
/// ```
public enum KioskWebhookSignature {
    /// The header's name.
    public static let headerName = "Kiosk-Signature"
    /// How far a request's `t` may be from the receiver's clock: an older request is a replay, refused.
    public static let defaultToleranceMs: Int64 = 5 * 60 * 1000

    /// The header's value for `body` sent at `timestampMs`, as the store makes it (for tests and tools).
    public static func headerValue(body: [UInt8], secret: [UInt8], timestampMs: Int64) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("\(timestampMs).".utf8) + body, using: SymmetricKey(data: secret))
        var hex = ""
        for byte in mac {
            hex += byte < 16 ? "0" + String(byte, radix: 16) : String(byte, radix: 16)
        }
        return "t=\(timestampMs),v1=\(hex)"
    }

    /// Checks a webhook request: `header` (the `Kiosk-Signature` value; nil when absent) must sign exactly
    /// `body` with `secret`, and its time must be within `toleranceMs` of `nowMs` (either way).
    ///
    /// Pure: the same arguments always give the same answer. Each `v1` is compared in constant time; one
    /// match is enough (a receiver may be sent several while a secret changes).
    /// - Returns: The request's timestamp, in milliseconds since 1970.
    /// - Throws: ``WebhookRejection``: the header missing or malformed (400), or its time or signature
    ///   wrong (401).
    @discardableResult
    public static func verify(
        header: String?, body: [UInt8], secret: [UInt8], nowMs: Int64, toleranceMs: Int64 = defaultToleranceMs
    ) throws -> Int64 {
        guard let header, !header.isEmpty else {
            throw WebhookRejection(.missingSignature, "no \(headerName) header")
        }
        var timestamp: Int64?
        var signatures: [[UInt8]] = []
        for part in header.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { continue }
            let name = trimmed(pair[0])
            let value = trimmed(pair[1])
            if name == "t" {
                guard let parsed = Int64(value) else {
                    throw WebhookRejection(.malformedSignature, "t=\(value) is not a number of milliseconds")
                }
                timestamp = parsed
            } else if name == "v1" {
                guard let signature = bytes(hex: value) else {
                    throw WebhookRejection(.malformedSignature, "v1 is not hexadecimal")
                }
                signatures.append(signature)
            }
            // Other keys (a newer scheme) are not ours to check.
        }
        guard let timestamp else {
            throw WebhookRejection(.malformedSignature, "\(headerName) has no t=")
        }
        guard !signatures.isEmpty else {
            throw WebhookRejection(.malformedSignature, "\(headerName) has no v1=")
        }
        // Compared without overflowing: a forged `t` near Int64's limits must not wrap around.
        let earliest = nowMs.subtractingReportingOverflow(toleranceMs)
        let latest = nowMs.addingReportingOverflow(toleranceMs)
        guard timestamp >= (earliest.overflow ? Int64.min : earliest.partialValue),
            timestamp <= (latest.overflow ? Int64.max : latest.partialValue)
        else {
            throw WebhookRejection(
                .staleTimestamp, "t=\(timestamp) is more than \(toleranceMs) ms away from this clock's \(nowMs)")
        }
        let key = SymmetricKey(data: secret)
        let signed = Array("\(timestamp).".utf8) + body
        // swift-crypto compares in constant time (and a code of another length never matches).
        let matches = signatures.contains { signature in
            HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signed, using: key)
        }
        guard matches else {
            throw WebhookRejection(.signatureMismatch, "no v1 signs this body with this secret")
        }
        return timestamp
    }

    private static func trimmed(_ text: Substring) -> Substring {
        var text = text
        while text.first == " " { text.removeFirst() }
        while text.last == " " { text.removeLast() }
        return text
    }

    /// The bytes of `hex` (two digits a byte, either case); nil for anything else.
    private static func bytes(hex: Substring) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard !digits.isEmpty, digits.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            out.append(high << 4 | low)
        }
        return out
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// Why a webhook request was refused, and the HTTP status to answer it with.
public struct WebhookRejection: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong with the request.
    public enum Reason: String, Hashable, Sendable {
        /// No `Kiosk-Signature` header (or an empty one).
        case missingSignature = "missing signature"
        /// A header without `t=` or `v1=`, or with a `t` that is no number or a `v1` that is no hex.
        case malformedSignature = "malformed signature"
        /// `t` too far from the receiver's clock: a replayed request, or a clock that is off.
        case staleTimestamp = "timestamp out of tolerance"
        /// No `v1` is the HMAC of this body with this secret: a changed body, or another secret.
        case signatureMismatch = "signature mismatch"
    }

    /// What is wrong.
    public var reason: Reason
    /// The particulars, for the log and the answer's body.
    public var detail: String

    /// Creates a rejection.
    public init(_ reason: Reason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    /// 400 for a request that is not a signed webhook at all, 401 for one whose signature does not hold.
    public var httpStatus: Int {
        switch reason {
        case .missingSignature, .malformedSignature: return 400
        case .staleTimestamp, .signatureMismatch: return 401
        }
    }

    /// The reason and its particulars, e.g. `signature mismatch: no v1 signs this body with this secret`.
    public var description: String { "\(reason.rawValue): \(detail)" }
}
