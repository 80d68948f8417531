import KioskWire
import Logging
import NIOCore

/// What a handler knows about the call it serves.
///
/// The call's cancellation (client CANCEL, deadline, connection loss, shutdown
/// past its grace) reaches the handler as Swift task cancellation.
public struct ServerContext: Sendable {
    /// The method called, "/package.Service/Method".
    public var method: String
    /// The request metadata (e.g. `authorization`).
    public var metadata: Metadata
    /// When the call's deadline passes, if the client set one.
    public var deadline: ContinuousClock.Instant?
    /// The call id on its connection.
    public var callID: UInt32
    /// The client's address, e.g. "127.0.0.1:53122".
    public var remoteAddress: String
    /// A logger with the call's method and id attached.
    public var logger: Logger
}
