import KioskRPC

/// Prometheus's text exposition format (0.0.4), written family by family: for what a service counts itself
/// (the RPC server's meter, the ledger's and the webhooks' histograms) rather than through a registry.
public struct PrometheusText: Sendable {
    /// The text so far.
    public private(set) var text = ""

    /// An empty text.
    public init() {}

    /// The text's bytes.
    public var bytes: [UInt8] { Array(text.utf8) }

    /// Starts a family: its HELP and TYPE lines (once per family).
    public mutating func family(_ name: String, _ type: String, help: String) {
        text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
    }

    /// One sample: `name{labels} value`.
    public mutating func sample(_ name: String, _ labels: [(String, String)] = [], _ value: UInt64) {
        sample(name, labels, String(value))
    }

    /// One sample with a value already formatted (a float, `+Inf`).
    public mutating func sample(_ name: String, _ labels: [(String, String)], _ value: String) {
        text += name
        if !labels.isEmpty {
            text += "{"
            for (index, (key, label)) in labels.enumerated() {
                if index > 0 { text += "," }
                text += "\(key)=\"\(Self.escaped(label))\""
            }
            text += "}"
        }
        text += " \(value)\n"
    }

    /// The samples of one histogram (its family started already): cumulative `_bucket`s, `_sum` and `_count`.
    public mutating func histogram(
        _ name: String, _ labels: [(String, String)] = [], _ reading: LatencyHistogram.Reading
    ) {
        var cumulative: UInt64 = 0
        for (index, count) in reading.buckets.enumerated() {
            cumulative += count
            let bound = index < reading.bounds.count ? "\(reading.bounds[index])" : "+Inf"
            sample(name + "_bucket", labels + [("le", bound)], cumulative)
        }
        sample(name + "_sum", labels, "\(reading.sumSeconds)")
        sample(name + "_count", labels, cumulative)
    }

    /// A label value as the format wants it: backslash, double quote and new line escaped.
    static func escaped(_ value: String) -> String {
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
