import Crypto
import Foundation

/// Stripe's webhook signatures (`Stripe-Signature`), verified as Stripe documents them: the header carries a
/// timestamp `t` and one or more `v1` signatures, each an HMAC-SHA256, keyed with an endpoint's signing secret
/// (`whsec_…`), of `"<t>.<raw body>"`, in hex. A body is taken when one `v1` matches one of the secrets (several
/// during a rotation) and `t` is within ``tolerance`` of now; `v0` and unknown schemes are ignored, as Stripe's
/// libraries ignore them.
public struct StripeWebhookVerifier: Sendable {
    /// Why a delivery was refused.
    public enum Refusal: Error, Hashable, Sendable, CustomStringConvertible {
        /// No `Stripe-Signature` header.
        case missingHeader
        /// The header has no timestamp, or one that is not a number.
        case malformedHeader
        /// The header has no `v1` signature.
        case noSignature
        /// The timestamp is further from now than the tolerance (a replay of an old delivery, or a wrong clock).
        case outsideTolerance(ageSeconds: Int64)
        /// No `v1` signature matches any secret: not from Stripe, or the body was changed.
        case noMatchingSignature

        public var description: String {
            switch self {
            case .missingHeader: "no Stripe-Signature header"
            case .malformedHeader: "the Stripe-Signature header has no valid timestamp"
            case .noSignature: "the Stripe-Signature header has no v1 signature"
            case .outsideTolerance(let age): "the signature's timestamp is \(age) s from now, outside the tolerance"
            case .noMatchingSignature: "no v1 signature matches the endpoint's signing secrets"
            }
        }
    }

    /// The shortest secret taken: `whsec_` and at least 16 more characters (Stripe's are 32 bytes, base64).
    public static let minimumSecretLength = 22

    /// The endpoint's signing secrets (each the `whsec_…` string, as bytes); more than one during a rotation.
    public var secrets: [[UInt8]]
    /// How far the signature's timestamp may be from now (Stripe's default: 5 minutes).
    public var tolerance: Duration

    /// A verifier for `secrets` (`whsec_…`); a secret shorter than ``minimumSecretLength`` is dropped (anyone could
    /// sign with it).
    public init(secrets: [String], tolerance: Duration = .seconds(300)) {
        self.secrets = secrets.filter { $0.utf8.count >= Self.minimumSecretLength }.map { Array($0.utf8) }
        self.tolerance = tolerance
    }

    /// Checks a delivery; answers the signature's timestamp (seconds since 1970).
    public func verify(payload: [UInt8], header: String?, nowSeconds: Int64) throws(Refusal) -> Int64 {
        guard let header else { throw .missingHeader }
        var timestamp: Int64?
        var signatures: [[UInt8]] = []
        for item in header.split(separator: ",") {
            let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2 else { continue }
            switch pair[0] {
            case "t":
                guard timestamp == nil, let value = Int64(pair[1]) else { throw .malformedHeader }
                timestamp = value
            case "v1":
                if let bytes = Self.hexBytes(pair[1]), bytes.count == SHA256.byteCount { signatures.append(bytes) }
            default:
                continue
            }
        }
        guard let timestamp else { throw .malformedHeader }
        guard !signatures.isEmpty else { throw .noSignature }
        // Any Int64 may come in the header: no arithmetic here may overflow (a trap would stop the store).
        let (age, overflow) = nowSeconds.subtractingReportingOverflow(timestamp)
        let limit = tolerance.components.seconds
        guard !overflow, age <= limit, age >= -limit else {
            throw .outsideTolerance(ageSeconds: overflow ? (timestamp > nowSeconds ? Int64.min : Int64.max) : age)
        }
        let signed = Array("\(timestamp).".utf8) + payload
        for secret in secrets {
            let key = SymmetricKey(data: secret)
            for signature in signatures
            where HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: signed, using: key) {
                return timestamp
            }
        }
        throw .noMatchingSignature
    }

    /// The `Stripe-Signature` header Stripe would send for `payload` at `timestamp` with `secret` (for doubles and
    /// tests).
    public static func header(payload: [UInt8], timestamp: Int64, secret: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("\(timestamp).".utf8) + payload, using: SymmetricKey(data: Array(secret.utf8)))
        return "t=\(timestamp),v1=" + mac.map { String(format: "%02x", $0) }.joined()
    }

    private static func hexBytes(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var index = 0
        while index < digits.count {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// What a Stripe event means for Kiosk: the event types the store acts on, read from the event's JSON.
public struct StripeNotice: Hashable, Sendable {
    /// What happened.
    public enum Kind: Hashable, Sendable {
        /// `charge.refunded`: the charge is refunded; `fully` when nothing of it is left.
        case refunded(fully: Bool)
        /// `charge.dispute.created`: the buyer's bank opened a dispute (a chargeback); `reason` is Stripe's. An
        /// inquiry (`warning_needs_response`: no money moved) is ``ignored``.
        case disputeOpened(reason: String)
        /// `charge.dispute.closed`: won (the money stays) or not.
        case disputeClosed(won: Bool)
        /// `payment_intent.succeeded`.
        case paymentSucceeded
        /// `payment_intent.payment_failed`.
        case paymentFailed
        /// Any other type: acknowledged and ignored.
        case ignored
    }

    /// The event's id (`evt_…`): processed once.
    public var eventID: String
    /// The event's type, as Stripe names it.
    public var type: String
    /// What it means.
    public var kind: Kind
    /// The PaymentIntent concerned (`pi_…`), when the object names one.
    public var paymentIntent: String?
    /// `metadata[kiosk_payment_id]` of the object, when it carries it (a PaymentIntent Kiosk created does).
    public var paymentID: String?
    /// The dispute's id (`du_…`), for dispute events.
    public var dispute: String?
    /// `payment_intent.succeeded` of a payment that saved its method to a Customer (`setup_future_usage`): the
    /// saved method's id.
    public var savedMethod: String?

    /// Reads an event body; nil when it is not a Stripe event object (no id, type or data.object).
    public static func parse(_ body: [UInt8]) -> StripeNotice? {
        guard let event = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let id = event["id"] as? String, let type = event["type"] as? String,
            let object = (event["data"] as? [String: Any])?["object"] as? [String: Any]
        else { return nil }
        let metadata = object["metadata"] as? [String: Any]
        var notice = StripeNotice(
            eventID: id, type: type, kind: .ignored, paymentIntent: object["payment_intent"] as? String,
            paymentID: metadata?["kiosk_payment_id"] as? String, dispute: nil, savedMethod: nil)
        switch type {
        case "charge.refunded":
            let amount = object["amount"] as? Int64 ?? (object["amount"] as? Int).map(Int64.init) ?? 0
            let refunded =
                object["amount_refunded"] as? Int64 ?? (object["amount_refunded"] as? Int).map(Int64.init) ?? 0
            notice.kind = .refunded(fully: (object["refunded"] as? Bool ?? false) || (amount > 0 && refunded >= amount))
        case "charge.dispute.created":
            // An inquiry (warning_*) takes no money: nothing to revoke.
            let status = object["status"] as? String ?? ""
            notice.kind =
                status.hasPrefix("warning_")
                ? .ignored : .disputeOpened(reason: object["reason"] as? String ?? "general")
            notice.dispute = object["id"] as? String
        case "charge.dispute.closed":
            let status = object["status"] as? String ?? ""
            notice.kind = status.hasPrefix("warning_") ? .ignored : .disputeClosed(won: status == "won")
            notice.dispute = object["id"] as? String
        case "payment_intent.succeeded":
            notice.kind = .paymentSucceeded
            notice.paymentIntent = object["id"] as? String
            if object["customer"] is String, object["setup_future_usage"] as? String == "off_session" {
                notice.savedMethod = object["payment_method"] as? String
            }
        case "payment_intent.payment_failed":
            notice.kind = .paymentFailed
            notice.paymentIntent = object["id"] as? String
        default:
            notice.kind = .ignored
        }
        return notice
    }
}
