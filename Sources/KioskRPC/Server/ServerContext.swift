import KioskWire
import Logging
import NIOConcurrencyHelpers
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
    public var remoteAddress: String {
        get { connection.remoteAddress }
        set {
            connection = ServerConnectionInfo(
                remoteAddress: newValue, logger: connection.logger, shutdown: connection.shutdown, id: connection.id)
        }
    }
    /// Who is calling, as the method's ``RPCAuthenticator`` returned it
    /// (nil for open methods and in the authenticator itself).
    public var principal: (any Sendable)?
    /// A logger with the call's method, id and request id attached (built when asked for,
    /// so calls that do not log pay nothing for it).
    public var logger: Logger {
        var logger = connection.logger
        logger[metadataKey: "rpc.method"] = "\(method)"
        logger[metadataKey: "rpc.call"] = "\(callID)"
        logger[metadataKey: "request_id"] = "\(requestID)"
        return logger
    }
    /// The call's request id, for logs: the client's `x-request-id` metadata when it is acceptable
    /// (``RequestScope/isAcceptable(_:)``), else one the server makes, unique in the process (the connection's
    /// random id and the call id). Logs written under the call's task carry it (``RequestScope``).
    public var requestID: String {
        if let chosen = metadata[RequestScope.metadataKey], RequestScope.isAcceptable(chosen) { return chosen }
        return connection.id + "-" + String(callID, radix: 16)
    }
    /// What every call of the connection shares, in one reference: a context is copied a few times a
    /// call, and each copy retains this one reference, not the address, the logger (three references of
    /// its own) and the flag.
    var connection: ServerConnectionInfo

    /// True once the server has begun a graceful shutdown. A long-lived stream
    /// (a feed that would never end by itself) should check it and finish, so
    /// the shutdown does not wait out its whole grace period.
    public var isShuttingDown: Bool { connection.shutdown.isSet }

    init(
        method: String, metadata: Metadata, deadline: ContinuousClock.Instant?, callID: UInt32,
        principal: (any Sendable)? = nil,
        connection: ServerConnectionInfo
    ) {
        self.method = method
        self.metadata = metadata
        self.deadline = deadline
        self.callID = callID
        self.principal = principal
        self.connection = connection
    }
}

/// The part of a ``ServerContext`` that is the same for every call of a connection.
final class ServerConnectionInfo: Sendable {
    let remoteAddress: String
    let logger: Logger
    let shutdown: ShutdownFlag
    /// A random id of the connection, for the request ids of its calls.
    let id: String

    init(remoteAddress: String, logger: Logger, shutdown: ShutdownFlag, id: String? = nil) {
        self.remoteAddress = remoteAddress
        self.logger = logger
        self.shutdown = shutdown
        self.id = id ?? String(UInt64.random(in: 1...UInt64.max), radix: 16)
    }
}

/// A flag set once, when a server begins shutting down.
final class ShutdownFlag: Sendable {
    private let value = NIOLockedValueBox(false)
    var isSet: Bool { value.withLockedValue { $0 } }
    func set() { value.withLockedValue { $0 = true } }
}
