/// The operator an action is done for, bound around it: every event the action records keeps it
/// (``EventRecord/actor``), and an action that records no event of its own records an
/// ``EventKind/operatorAction`` event naming it. The Admin RPCs, `kiosk-store` and the admin console bind it; a
/// buyer's calls and the store's own work (renewals, reconciliation) run without one.
public enum OperatorScope {
    /// Who is acting: `admin-rpc svc_… (name)`, `console svc_… (name)`, `kiosk-store (user)`; nil outside an
    /// operator's action.
    @TaskLocal public static var actor: String?

    /// The longest actor kept (a credential's name is the operator's words): longer ones are cut.
    public static let maxActorBytes = 200

    /// `actor` cut to ``maxActorBytes`` at a character boundary.
    public static func bounded(_ actor: String) -> String {
        guard actor.utf8.count > maxActorBytes else { return actor }
        var cut = ""
        for character in actor {
            guard cut.utf8.count + character.utf8.count <= maxActorBytes else { break }
            cut.append(character)
        }
        return cut
    }
}
