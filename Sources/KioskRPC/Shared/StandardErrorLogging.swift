import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How a service writes its log lines.
public enum LogFormat: String, CaseIterable, Sendable {
    /// swift-log's text lines, for a terminal.
    case text
    /// One JSON object a line (``JSONLogHandler``), for a log pipeline.
    case json
}

/// Sends every logger of the process to standard error at `level` (a
/// `Logger.Level` name: trace … critical; unknown names mean info), in `format`, each line with the request id
/// and method of the call it was written for (``RequestScope``). For service executables; libraries never
/// bootstrap logging themselves.
public func bootstrapStandardErrorLogging(level: String, format: LogFormat = .text) {
    let threshold = Logger.Level(rawValue: level) ?? .info
    LoggingSystem.bootstrap(
        { label, provider in
            switch format {
            case .text:
                var handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
                handler.logLevel = threshold
                return handler
            case .json:
                var handler = JSONLogHandler(label: label, metadataProvider: provider)
                handler.logLevel = threshold
                return handler
            }
        }, metadataProvider: RequestScope.metadataProvider)
}

/// Writes each log line to standard error as one JSON object:
/// `{"timestamp":"YYYY-MM-DDThh:mm:ss.mmmZ","level":"info","label":"kiosk-store","message":"…", …}`, then the
/// line's metadata as more members (a request's `request_id` and `rpc.method`, an `account_id`, …; a member
/// named like one of the four above is left out). One `write` a line, so lines from several threads never
/// interleave.
public struct JSONLogHandler: LogHandler {
    /// The logger's label (`kiosk-store`, …).
    public let label: String
    /// The lowest level written.
    public var logLevel: Logger.Level = .info
    /// Metadata added to every line of this logger.
    public var metadata: Logger.Metadata = [:]
    /// More metadata, read at each line (the current call's, ``RequestScope/metadataProvider``).
    public var metadataProvider: Logger.MetadataProvider?

    /// A handler for `label`.
    public init(label: String, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.metadataProvider = metadataProvider
    }

    /// The logger's metadata value for `key`.
    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Writes one line.
    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        // The event's error, unless the line names one in its metadata already (that one is kept).
        if let error = event.error { merged[merged["error"] == nil ? "error" : "event_error"] = "\(error)" }
        let text = Self.line(
            timestamp: Self.now(), level: event.level, label: label, message: event.message.description,
            metadata: merged)
        writeWhole(2, text)
    }

    /// The JSON line (with its new line) for one log event.
    public static func line(
        timestamp: String, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata
    ) -> String {
        var out = "{\"timestamp\":\"\(timestamp)\",\"level\":\"\(level.rawValue)\",\"label\":"
        appendString(label, to: &out)
        out += ",\"message\":"
        appendString(message, to: &out)
        for key in metadata.keys.sorted() where !["timestamp", "level", "label", "message"].contains(key) {
            out += ","
            appendString(key, to: &out)
            out += ":"
            appendValue(metadata[key]!, to: &out)
        }
        out += "}\n"
        return out
    }

    private static func appendValue(_ value: Logger.Metadata.Value, to out: inout String) {
        switch value {
        case .string(let string): appendString(string, to: &out)
        case .stringConvertible(let convertible): appendString(convertible.description, to: &out)
        case .array(let values):
            out += "["
            for (index, element) in values.enumerated() {
                if index > 0 { out += "," }
                appendValue(element, to: &out)
            }
            out += "]"
        case .dictionary(let entries):
            out += "{"
            for (index, key) in entries.keys.sorted().enumerated() {
                if index > 0 { out += "," }
                appendString(key, to: &out)
                out += ":"
                appendValue(entries[key]!, to: &out)
            }
            out += "}"
        }
    }

    /// Appends `string` as a JSON string: quotes, backslashes and control characters escaped.
    static func appendString(_ string: String, to out: inout String) {
        out += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F || (0x2028...0x2029).contains(scalar.value):
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }

    /// The time now, UTC, to the millisecond: `YYYY-MM-DDThh:mm:ss.mmmZ`.
    static func now() -> String {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        var seconds = spec.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = Int(spec.tv_nsec / 1_000_000)
        let fraction = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):"
            + "\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)Z"
    }
}
