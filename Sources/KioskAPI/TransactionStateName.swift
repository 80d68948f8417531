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
