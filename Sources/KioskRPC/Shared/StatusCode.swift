/// A gRPC status code, carried in TRAILERS (`CallStatus.code`).
///
/// Open: codes this version does not know are kept as they are.
public struct StatusCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The code's number, 0 to 16 for the codes gRPC defines.
    public var rawValue: UInt32
    /// Creates a code from its number; any number is kept, known or not.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// 0: the call succeeded.
    public static let ok = StatusCode(rawValue: 0)
    /// 1: the call was cancelled, usually by the caller.
    public static let cancelled = StatusCode(rawValue: 1)
    /// 2: an error the server could not classify.
    public static let unknown = StatusCode(rawValue: 2)
    /// 3: the request is invalid, whatever the server's state.
    public static let invalidArgument = StatusCode(rawValue: 3)
    /// 4: the deadline passed before the call finished.
    public static let deadlineExceeded = StatusCode(rawValue: 4)
    /// 5: something asked for does not exist.
    public static let notFound = StatusCode(rawValue: 5)
    /// 6: something to be created exists already.
    public static let alreadyExists = StatusCode(rawValue: 6)
    /// 7: the caller may not do this.
    public static let permissionDenied = StatusCode(rawValue: 7)
    /// 8: a limit was reached (sizes, quotas, concurrency).
    public static let resourceExhausted = StatusCode(rawValue: 8)
    /// 9: the system is not in the state the call needs.
    public static let failedPrecondition = StatusCode(rawValue: 9)
    /// 10: the call was aborted, e.g. by a conflict.
    public static let aborted = StatusCode(rawValue: 10)
    /// 11: a value is outside its valid range.
    public static let outOfRange = StatusCode(rawValue: 11)
    /// 12: the method is not implemented by this server.
    public static let unimplemented = StatusCode(rawValue: 12)
    /// 13: an invariant broke, in the server or in the protocol.
    public static let `internal` = StatusCode(rawValue: 13)
    /// 14: the service is unavailable now; retrying may succeed.
    public static let unavailable = StatusCode(rawValue: 14)
    /// 15: data was lost or corrupted.
    public static let dataLoss = StatusCode(rawValue: 15)
    /// 16: the caller's credentials are missing or wrong.
    public static let unauthenticated = StatusCode(rawValue: 16)

    /// The upper-case gRPC name, e.g. `DEADLINE_EXCEEDED`.
    public var name: String {
        let names = [
            "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
            "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
            "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
            "UNAUTHENTICATED",
        ]
        return rawValue < names.count ? names[Int(rawValue)] : "CODE_\(rawValue)"
    }

    /// The name and number, e.g. `DEADLINE_EXCEEDED (4)`.
    public var description: String { "\(name) (\(rawValue))" }
}
