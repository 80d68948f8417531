import KioskWire

extension ReceiptV1.Environment {
    /// `sandbox` or `production`.
    public var name: String {
        switch self {
        case .sandbox: "sandbox"
        case .production: "production"
        default: "unspecified"
        }
    }

    /// Parses `sandbox` or `production`.
    public init?(name: String) {
        switch name.lowercased() {
        case "sandbox": self = .sandbox
        case "production": self = .production
        default: return nil
        }
    }
}
