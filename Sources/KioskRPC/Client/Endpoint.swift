/// A server's address: a host name or IP address and a TCP port.
///
/// ```swift
/// let stores = try Endpoint.list(parsing: "10.0.0.5:7301,10.0.0.6:7301,[fd00::7]:7301")
/// let client = RPCClient(endpoints: stores)
/// ```
public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
    /// The host name or IP address (an IPv6 address without brackets).
    public var host: String
    /// The TCP port.
    public var port: Int

    /// Creates an endpoint.
    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `host:port`, or `[ipv6]:port`.
    /// - Throws: ``EndpointSyntaxError`` naming what is wrong.
    public init(parsing text: some StringProtocol) throws {
        let text = String(text).trimmingSpaces
        let host: Substring
        let port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw EndpointSyntaxError("\(text.debugDescription) is not [ipv6]:port")
            }
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(close, offsetBy: 2)...]
        } else {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 2 else {
                throw EndpointSyntaxError(
                    "\(text.debugDescription) is not host:port (an IPv6 address goes in brackets: [::1]:7301)")
            }
            host = parts[0]
            port = parts[1]
        }
        guard !host.isEmpty else { throw EndpointSyntaxError("\(text.debugDescription) has no host") }
        guard let number = Int(port), (1...65535).contains(number) else {
            throw EndpointSyntaxError("\(text.debugDescription): the port must be a number from 1 to 65535")
        }
        self.init(host: String(host), port: number)
    }

    /// Parses a comma-separated list of endpoints (`a:7301,b:7301`), in order; at least one.
    /// - Throws: ``EndpointSyntaxError`` for an empty list, an empty entry, a bad entry or one given twice.
    public static func list(parsing text: some StringProtocol) throws -> [Endpoint] {
        let entries = text.split(separator: ",", omittingEmptySubsequences: false)
        var endpoints: [Endpoint] = []
        for entry in entries {
            guard !String(entry).trimmingSpaces.isEmpty else {
                throw EndpointSyntaxError(
                    "\(String(text).debugDescription) has an empty entry: write host:port[,host:port…]")
            }
            let endpoint = try Endpoint(parsing: entry)
            guard !endpoints.contains(endpoint) else { throw EndpointSyntaxError("\(endpoint) is listed twice") }
            endpoints.append(endpoint)
        }
        return endpoints
    }

    /// `host:port`, or `[ipv6]:port`.
    public var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}

/// An endpoint or endpoint list that cannot be parsed.
public struct EndpointSyntaxError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, naming the text.
    public let description: String

    init(_ description: String) {
        self.description = description
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var text = Substring(self)
        while text.first == " " { text.removeFirst() }
        while text.last == " " { text.removeLast() }
        return String(text)
    }
}
