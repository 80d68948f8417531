/// An error from the wire layer: framing, message encoding or compression.
///
/// Each error carries a ``Code`` a caller can switch on and a message a person can read.
public struct WireError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, for callers that branch on it.
    public enum Code: String, Hashable, Sendable {
        /// The connection did not start with the 8-byte preface `KIOSK/1\n`.
        case badPreface
        /// A frame's LENGTH exceeds the configured maximum payload size.
        case frameTooLarge
        /// A frame's LENGTH is below the 6-byte minimum (TYPE, FLAGS, CALL_ID).
        case frameTooShort
        /// The bytes are not a valid protobuf encoding of the expected message.
        case malformedMessage
        /// A compressed payload could not be inflated.
        case decompressionFailed
        /// A compressed payload inflates beyond the maximum message size.
        case decompressedTooLarge
        /// The connection ended in the middle of a frame.
        case truncatedFrame
    }

    /// What went wrong.
    public var code: Code
    /// A readable explanation.
    public var message: String

    /// Creates an error with a code and a readable message.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
