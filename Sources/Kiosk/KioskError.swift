import KioskRPC

/// An error the SDK throws: a code a caller can switch on (StoreKit's
/// `SKError` numbers where one exists) and a message a person can read.
public struct KioskError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        /// The code's number, as each code lists it: the payment and offer codes share StoreKit's `SKError` numbers.
        public var rawValue: Int
        /// Creates a code from its number (one this SDK does not name is described as `unknown`).
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// 0: the store or content service cannot be reached.
        public static let cannotConnect = Code(rawValue: 0)
        /// 2: the buyer cancelled the payment.
        public static let paymentCancelled = Code(rawValue: 2)
        /// 3: the payment was refused (declined card, insufficient funds, unknown method).
        public static let paymentInvalid = Code(rawValue: 3)
        /// 4: the account may not make payments.
        public static let paymentNotAllowed = Code(rawValue: 4)
        /// 5: the product is not in the store's catalog.
        public static let productUnavailable = Code(rawValue: 5)
        /// 11: the subscription offer asked for does not exist for the product.
        public static let invalidOfferIdentifier = Code(rawValue: 11)
        /// 12: a promotional offer's signature is not valid (unknown key, altered, expired, nonce used).
        public static let invalidSignature = Code(rawValue: 12)
        /// 13: a promotional offer lacks its key id, nonce, timestamp or signature.
        public static let missingOfferParams = Code(rawValue: 13)
        /// 18: the account may not have the offer (an introductory offer the second time).
        public static let ineligibleForOffer = Code(rawValue: 18)
        /// 16: the account token is missing or not valid.
        public static let notAuthenticated = Code(rawValue: 16)
        /// 5000: the request was refused as invalid (quantity out of range, …).
        public static let invalidRequest = Code(rawValue: 5000)
        /// 5001: the account has too few credits.
        public static let insufficientCredits = Code(rawValue: 5001)
        /// 5002: anything else.
        public static let unknown = Code(rawValue: 5002)
        /// 5003: the content service refused a download (receipt, account, product, refund).
        public static let downloadRefused = Code(rawValue: 5003)
        /// 5004: a download failed (bad chunk, checksum mismatch, disk error).
        public static let downloadFailed = Code(rawValue: 5004)
        /// 5005: something asked for does not exist (a transaction, a hosted product).
        public static let notFound = Code(rawValue: 5005)
        /// 5006: too many wrong offer codes from this account or address: nothing was looked up; try later.
        public static let tooManyAttempts = Code(rawValue: 5006)

        /// The code's name, e.g. `paymentInvalid`; `unknown` for a number this SDK does not name.
        public var description: String {
            switch self {
            case .cannotConnect: "cannotConnect"
            case .paymentCancelled: "paymentCancelled"
            case .paymentInvalid: "paymentInvalid"
            case .paymentNotAllowed: "paymentNotAllowed"
            case .productUnavailable: "productUnavailable"
            case .invalidOfferIdentifier: "invalidOfferIdentifier"
            case .invalidSignature: "invalidSignature"
            case .missingOfferParams: "missingOfferParams"
            case .ineligibleForOffer: "ineligibleForOffer"
            case .notAuthenticated: "notAuthenticated"
            case .invalidRequest: "invalidRequest"
            case .insufficientCredits: "insufficientCredits"
            case .downloadRefused: "downloadRefused"
            case .downloadFailed: "downloadFailed"
            case .notFound: "notFound"
            case .tooManyAttempts: "tooManyAttempts"
            default: "unknown"
            }
        }
    }

    /// What went wrong.
    public var code: Code
    /// A readable message.
    public var message: String

    /// Creates an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The code's name and number, then the message, e.g. `paymentInvalid (3): <the store's reason>`.
    public var description: String { "\(code) (\(code.rawValue)): \(message)" }

    /// The SDK error for an RPC failure.
    static func from(_ error: any Error, doing what: String) -> KioskError {
        if let error = error as? KioskError { return error }
        guard let rpc = error as? RPCError else { return KioskError(.unknown, "\(what): \(error)") }
        switch rpc.code {
        case .unavailable, .deadlineExceeded:
            // No answer: the request may or may not have been carried out; retry with the same key.
            return KioskError(.cannotConnect, "\(what): \(rpc.message)")
        case .unauthenticated:
            return KioskError(.notAuthenticated, "\(what): \(rpc.message)")
        case .invalidArgument, .alreadyExists, .outOfRange:
            return KioskError(.invalidRequest, "\(what): \(rpc.message)")
        case .failedPrecondition where rpc.message.contains("insufficient credits"):
            return KioskError(.insufficientCredits, rpc.message)
        case .notFound:
            return KioskError(.notFound, "\(what): \(rpc.message)")
        case .resourceExhausted where rpc.message.contains("offer codes"):
            return KioskError(.tooManyAttempts, "\(what): \(rpc.message)")
        default:
            return KioskError(.unknown, "\(what): \(rpc.description)")
        }
    }

    /// True when the request may not have reached the store (safe to retry with the same idempotency key).
    var isConnectivity: Bool { code == .cannotConnect }

    /// True when the store answered that it will never do this request, so a queued payment can be dropped.
    var isDefinitiveRefusal: Bool { code == .invalidRequest || code == .notAuthenticated || code == .notFound }
}
