import KioskWire

/// The error a failed call throws, on the client, and the error a handler throws
/// to choose its call's status, on the server.
public struct RPCError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Where the error arose: lets a caller tell "could not connect" from "the
    /// server said no".
    public enum Source: String, Hashable, Sendable {
        /// The server ended the call with this status (TRAILERS).
        case remote
        /// No connection could be made to the server; the call was never sent.
        case connect
        /// The connection failed or went away while the call was in flight.
        case connection
        /// The connection was going away before the server started the call
        /// (GOAWAY named an earlier last call, it was closing when the call
        /// was opened, or it died before the call's bytes were handed to the
        /// socket): the server did nothing with it, so it may be sent again
        /// whatever it does. ``RPCClient`` sends such a unary call again itself.
        case unprocessed
        /// The client ended the call itself: its deadline passed or it was cancelled.
        case local
    }

    /// The status code.
    public var code: StatusCode
    /// A readable message.
    public var message: String
    /// Trailing metadata sent with the status.
    public var metadata: Metadata
    /// Where the error arose.
    public var source: Source

    /// Creates an error.
    public init(_ code: StatusCode, _ message: String, metadata: Metadata = Metadata(), source: Source = .remote) {
        self.code = code
        self.message = message
        self.metadata = metadata
        self.source = source
    }

    /// True when the call never reached a server because no connection could be made.
    public var isConnectFailure: Bool { source == .connect }

    /// The status's name and number, then the message, and where it arose unless the server sent it:
    /// `UNAVAILABLE (14): <the reason> [connect]`.
    public var description: String {
        "\(code.name) (\(code.rawValue)): \(message)" + (source == .remote ? "" : " [\(source.rawValue)]")
    }
}

/// An error that knows the status it should end a call with.
///
/// Service libraries conform their domain errors, so a handler can throw them directly.
public protocol RPCErrorConvertible: Error {
    /// The status to send for this error.
    var rpcError: RPCError { get }
}

extension RPCError {
    /// The status a server sends for an error thrown by a handler.
    static func from(handlerError error: any Error) -> RPCError {
        switch error {
        case var error as RPCError:
            error.source = .remote
            return error
        case let error as any RPCErrorConvertible:
            return error.rpcError
        case let error as WireError:
            return RPCError(.invalidArgument, "request is invalid: \(error.message)")
        case is CancellationError:
            return RPCError(.cancelled, "call was cancelled")
        default:
            return RPCError(.unknown, "handler failed: \(String(describing: error))")
        }
    }
}
