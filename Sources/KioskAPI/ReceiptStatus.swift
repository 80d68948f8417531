/// The answer to "is this receipt real?", with Apple's verifyReceipt codes so
/// that people who know them feel at home.
public struct ReceiptStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// 0: the receipt is valid.
    public static let valid = ReceiptStatus(rawValue: 0)
    /// 21002: the receipt is not a well-formed signed receipt.
    public static let malformed = ReceiptStatus(rawValue: 21002)
    /// 21003: the receipt's signature does not verify with a known key.
    public static let notAuthentic = ReceiptStatus(rawValue: 21003)
    /// 21005: the verifying server cannot decide now (e.g. the store is unreachable).
    public static let serverUnavailable = ReceiptStatus(rawValue: 21005)
    /// 21006: the receipt is valid but its subscription has expired.
    public static let subscriptionExpired = ReceiptStatus(rawValue: 21006)
    /// 21007: a sandbox receipt was sent to a production verifier.
    public static let sandboxReceiptInProduction = ReceiptStatus(rawValue: 21007)
    /// 21008: a production receipt was sent to a sandbox verifier.
    public static let productionReceiptInSandbox = ReceiptStatus(rawValue: 21008)
    /// 21010: the receipt's account is not known to this store.
    public static let accountNotFound = ReceiptStatus(rawValue: 21010)

    /// A short name, e.g. `not_authentic`.
    public var name: String {
        switch self {
        case .valid: "valid"
        case .malformed: "malformed"
        case .notAuthentic: "not_authentic"
        case .serverUnavailable: "server_unavailable"
        case .subscriptionExpired: "subscription_expired"
        case .sandboxReceiptInProduction: "sandbox_receipt_in_production"
        case .productionReceiptInSandbox: "production_receipt_in_sandbox"
        case .accountNotFound: "account_not_found"
        default: "status_\(rawValue)"
        }
    }

    public var description: String { "\(rawValue) (\(name))" }
}
