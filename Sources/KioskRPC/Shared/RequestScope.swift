import Logging

/// The call a task is serving, for the logs it writes: the RPC server binds it around each handler that runs as a
/// task, and ``metadataProvider`` adds its `request_id` and `rpc.method` to every log line written under it,
/// from the handler or from anything it calls (the ledger, the payment processor), through any logger.
public enum RequestScope {
    /// The call being served.
    public struct Call: Sendable, Hashable {
        /// The call's request id (``ServerContext/requestID``).
        public var requestID: String
        /// The full method name.
        public var method: String

        /// A call with `requestID` to `method`.
        public init(requestID: String, method: String) {
            self.requestID = requestID
            self.method = method
        }
    }

    /// The call the current task serves; nil outside one.
    @TaskLocal public static var current: Call?

    /// Adds the current call's `request_id` and `rpc.method` to a log line (the services bootstrap their logging
    /// with it).
    public static let metadataProvider = Logger.MetadataProvider {
        guard let call = current else { return [:] }
        return ["request_id": .string(call.requestID), "rpc.method": .string(call.method)]
    }

    /// The metadata key a client sets to choose the request id of its call (`x-request-id`).
    public static let metadataKey = "x-request-id"

    /// True for a request id a client may choose: 1 to 64 characters of letters, digits, `.`, `_`, `:` and `-`
    /// (anything else could forge a log line or carry a secret into the logs; the server then makes its own).
    public static func isAcceptable(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 64 else { return false }
        return id.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"),
                UInt8(ascii: "-"):
                true
            default: false
            }
        }
    }
}
