import KioskRPC

extension Store {
    /// Runs `body` as an operator's action by `actor` (``OperatorScope``): the events it records keep who did it,
    /// and an action that records no event of its own (a key rotated or retired, a credential created or revoked,
    /// deliveries redriven, an account created) records an OPERATOR_ACTION event. The Admin RPCs, `kiosk-store`
    /// and the admin console each name their operator.
    public func acting<T: Sendable>(as actor: String, _ body: () async throws -> T) async rethrows -> T {
        try await OperatorScope.$actor.withValue(OperatorScope.bounded(actor)) { try await body() }
    }

    /// How an operator is named in the events: how they acted, then their service credential.
    public static func actorName(via: String, credentialID: String, name: String) -> String {
        "\(via) \(credentialID) (\(name))"
    }
}
