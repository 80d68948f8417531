import KioskWire

extension StoreV1.TransactionState {
    /// `PURCHASED`, `FAILED`, `DEFERRED` or `UNSPECIFIED`.
    public var name: String {
        switch self {
        case .purchased: "PURCHASED"
        case .failed: "FAILED"
        case .deferred: "DEFERRED"
        default: "UNSPECIFIED"
        }
    }
}

extension StoreV1.RefundRequestState {
    /// `PENDING`, `GRANTED`, `DENIED` or `UNSPECIFIED`.
    public var name: String {
        switch self {
        case .pending: "PENDING"
        case .granted: "GRANTED"
        case .denied: "DENIED"
        default: "UNSPECIFIED"
        }
    }

    /// The state named `name` (`pending`, `granted`, `denied`, any case), or nil.
    public init?(name: String) {
        switch name.uppercased() {
        case "PENDING": self = .pending
        case "GRANTED": self = .granted
        case "DENIED": self = .denied
        default: return nil
        }
    }
}
