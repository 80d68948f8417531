import KioskRPC

/// A request the store refuses as a call error (not a transaction outcome).
public struct StoreError: Error, Hashable, Sendable, CustomStringConvertible, RPCErrorConvertible {
    /// The status code the call ends with.
    public var code: StatusCode
    /// A readable reason.
    public var message: String

    /// Creates an error.
    public init(_ code: StatusCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var rpcError: RPCError { RPCError(code, message) }
    public var description: String { "\(code.name): \(message)" }

    static func unauthenticated(_ message: String) -> StoreError { StoreError(.unauthenticated, message) }
    static func invalid(_ message: String) -> StoreError { StoreError(.invalidArgument, message) }
    static func notFound(_ message: String) -> StoreError { StoreError(.notFound, message) }
}
