import KioskRPC

/// An ``RPCServer``'s meter (``RPCServer/meterReading()``) as Prometheus text, appended to a service's `/metrics`.
/// Names follow the gRPC server metrics operators know (`grpc_server_handled_total`, …) under `kiosk_rpc_server_`;
/// the `method` label is the full method name, from the router's fixed set (calls to any other name count as
/// `unknown`), and `code` the status name.
public enum RPCMetrics {
    /// The status codes' names, by code (gRPC's, as `grpc_code` labels spell them).
    public static let codeNames = [
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
        "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
        "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
    ]

    /// The exposition text (format 0.0.4) of `reading`.
    public static func exposition(_ reading: ServerMeter.Reading) -> [UInt8] {
        var text = ""
        func family(_ name: String, _ type: String, _ help: String) {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        }
        func method(_ name: String) -> String { "method=\"\(escaped(name))\"" }

        family("kiosk_rpc_server_started_total", "counter", "RPC calls opened, by method.")
        for entry in reading.methods {
            text += "kiosk_rpc_server_started_total{\(method(entry.method))} \(entry.opened)\n"
        }

        family(
            "kiosk_rpc_server_handled_total", "counter",
            "RPC calls ended (or refused before opening), by method and status code.")
        for entry in reading.methods {
            for (code, count) in entry.byCode.enumerated() where count > 0 || code == 0 {
                text += "kiosk_rpc_server_handled_total{\(method(entry.method)),code=\"\(codeNames[code])\"} \(count)\n"
            }
        }

        family("kiosk_rpc_server_in_flight", "gauge", "RPC calls open now, by method.")
        for entry in reading.methods {
            text += "kiosk_rpc_server_in_flight{\(method(entry.method))} \(entry.inFlight)\n"
        }

        let timed = reading.methods.filter { !$0.latencyBuckets.isEmpty }
        if !timed.isEmpty {
            family(
                "kiosk_rpc_server_handling_seconds", "histogram",
                "Time from a call's HEADERS to its TRAILERS being written, by method.")
            for entry in timed {
                var cumulative: UInt64 = 0
                for (index, count) in entry.latencyBuckets.enumerated() {
                    cumulative += count
                    let bound = index < ServerMeter.latencyBounds.count ? "\(ServerMeter.latencyBounds[index])" : "+Inf"
                    text +=
                        "kiosk_rpc_server_handling_seconds_bucket{\(method(entry.method)),le=\"\(bound)\"} \(cumulative)\n"
                }
                text += "kiosk_rpc_server_handling_seconds_sum{\(method(entry.method))} \(entry.latencySumSeconds)\n"
                text += "kiosk_rpc_server_handling_seconds_count{\(method(entry.method))} \(cumulative)\n"
            }
            family("kiosk_rpc_server_received_bytes_total", "counter", "Request message bytes received, by method.")
            for entry in timed {
                text += "kiosk_rpc_server_received_bytes_total{\(method(entry.method))} \(entry.bytesIn)\n"
            }
            family("kiosk_rpc_server_sent_bytes_total", "counter", "Response message bytes sent, by method.")
            for entry in timed {
                text += "kiosk_rpc_server_sent_bytes_total{\(method(entry.method))} \(entry.bytesOut)\n"
            }
        }

        family("kiosk_rpc_server_connections_accepted_total", "counter", "Connections accepted since the start.")
        text += "kiosk_rpc_server_connections_accepted_total \(reading.connectionsAccepted)\n"
        family("kiosk_rpc_server_connections", "gauge", "Connections open now.")
        text += "kiosk_rpc_server_connections \(reading.connectionsOpen)\n"
        family(
            "kiosk_rpc_server_limit_refusals_total", "counter",
            "Connections or calls refused or ended by a server limit, by limit.")
        for limit in ServerMeter.Limit.allCases {
            text +=
                "kiosk_rpc_server_limit_refusals_total{limit=\"\(limit.rawValue)\"} \(reading.refusals[limit] ?? 0)\n"
        }
        return Array(text.utf8)
    }

    /// A label value as the text format wants it: backslash, double quote and new line escaped.
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
