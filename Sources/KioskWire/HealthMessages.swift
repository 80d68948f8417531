import KioskProto

/// The request of `/kiosk.rpc.v1.Health/Check` (`kiosk.rpc.v1.HealthCheckRequest`).
public struct HealthCheckRequest: Hashable, Sendable {
    /// The service asked about, e.g. `kiosk.rpc.v1.Health`; empty for the server as a whole.
    public var service: String

    /// Creates a health check request.
    public init(service: String = "") {
        self.service = service
    }
}

extension HealthCheckRequest: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__HealthCheckRequest
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__health_check_request__init(c) }
    public init(cStruct c: CStruct) throws(WireError) {
        self.init(service: try CField.string(c.service, field: "HealthCheckRequest.service"))
    }
    public func fill(_ c: inout CStruct, arena: CArena) { c.service = arena.cString(service) }
}

/// The response of `/kiosk.rpc.v1.Health/Check` (`kiosk.rpc.v1.HealthCheckResponse`).
public struct HealthCheckResponse: Hashable, Sendable {
    /// A server's serving status; open, so values from newer peers survive.
    public struct ServingStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// The status is not known.
        public static let unknown = ServingStatus(rawValue: 0)
        /// The server or service is serving.
        public static let serving = ServingStatus(rawValue: 1)
        /// The server or service is not serving (e.g. shutting down).
        public static let notServing = ServingStatus(rawValue: 2)
        /// The service asked about is not known.
        public static let serviceUnknown = ServingStatus(rawValue: 3)

        public var description: String {
            switch self {
            case .unknown: "UNKNOWN"
            case .serving: "SERVING"
            case .notServing: "NOT_SERVING"
            case .serviceUnknown: "SERVICE_UNKNOWN"
            default: "ServingStatus(\(rawValue))"
            }
        }
    }

    /// The serving status.
    public var status: ServingStatus

    /// Creates a health check response.
    public init(status: ServingStatus) {
        self.status = status
    }
}

extension HealthCheckResponse: WireMessage {
    public typealias CStruct = Kiosk__Rpc__V1__HealthCheckResponse
    public static func cInit(_ c: UnsafeMutablePointer<CStruct>) { kiosk__rpc__v1__health_check_response__init(c) }
    public init(cStruct c: CStruct) throws(WireError) {
        self.init(status: ServingStatus(rawValue: Int32(truncatingIfNeeded: c.status.rawValue)))
    }
    public func fill(_ c: inout CStruct, arena: CArena) {
        c.status = Kiosk__Rpc__V1__HealthCheckResponse__ServingStatus(
            rawValue: .init(truncatingIfNeeded: status.rawValue))
    }
}
