import KioskWire

/// `/kiosk.rpc.v1.Health/Check`, built into every ``RPCServer``, as gRPC's health protocol.
///
/// The empty service name asks about the server as a whole. A registered
/// service answers SERVING, or NOT_SERVING once a shutdown has begun; an
/// unknown one fails with NOT_FOUND (5), as in gRPC.
struct HealthService: RPCService {
    static let name = "kiosk.rpc.v1.Health"
    static let checkMethod = "/kiosk.rpc.v1.Health/Check"

    var serviceName: String { Self.name }
    let knownServices: Set<String>
    let isServing: @Sendable () -> Bool

    func register(in router: inout RPCRouter) {
        router.registerUnary(Self.checkMethod, request: HealthCheckRequest.self, response: HealthCheckResponse.self) {
            [knownServices, isServing] request, _ in
            guard request.service.isEmpty || request.service == Self.name || knownServices.contains(request.service)
            else {
                throw RPCError(.notFound, "unknown service \(request.service)")
            }
            return HealthCheckResponse(status: isServing() ? .serving : .notServing)
        }
    }
}
