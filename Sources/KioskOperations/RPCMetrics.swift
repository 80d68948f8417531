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
        var out = PrometheusText()
        out.family("kiosk_rpc_server_started_total", "counter", help: "RPC calls opened, by method.")
        for entry in reading.methods {
            out.sample("kiosk_rpc_server_started_total", [("method", entry.method)], entry.opened)
        }

        out.family(
            "kiosk_rpc_server_handled_total", "counter",
            help: "RPC calls ended (or refused before opening), by method and status code.")
        for entry in reading.methods {
            for (code, count) in entry.byCode.enumerated() where count > 0 || code == 0 {
                out.sample(
                    "kiosk_rpc_server_handled_total", [("method", entry.method), ("code", codeNames[code])], count)
            }
        }

        out.family("kiosk_rpc_server_in_flight", "gauge", help: "RPC calls open now, by method.")
        for entry in reading.methods {
            out.sample("kiosk_rpc_server_in_flight", [("method", entry.method)], UInt64(entry.inFlight))
        }

        let timed = reading.methods.filter { !$0.latencyBuckets.isEmpty }
        if !timed.isEmpty {
            out.family(
                "kiosk_rpc_server_handling_seconds", "histogram",
                help: "Time from a call's HEADERS to its TRAILERS being written, by method.")
            for entry in timed {
                out.histogram(
                    "kiosk_rpc_server_handling_seconds", [("method", entry.method)],
                    LatencyHistogram.Reading(
                        bounds: ServerMeter.latencyBounds, buckets: entry.latencyBuckets,
                        sumSeconds: entry.latencySumSeconds))
            }
            out.family(
                "kiosk_rpc_server_received_bytes_total", "counter", help: "Request message bytes received, by method.")
            for entry in timed {
                out.sample("kiosk_rpc_server_received_bytes_total", [("method", entry.method)], entry.bytesIn)
            }
            out.family("kiosk_rpc_server_sent_bytes_total", "counter", help: "Response message bytes sent, by method.")
            for entry in timed {
                out.sample("kiosk_rpc_server_sent_bytes_total", [("method", entry.method)], entry.bytesOut)
            }
        }

        out.family(
            "kiosk_rpc_server_connections_accepted_total", "counter", help: "Connections accepted since the start.")
        out.sample("kiosk_rpc_server_connections_accepted_total", [], reading.connectionsAccepted)
        out.family("kiosk_rpc_server_connections", "gauge", help: "Connections open now.")
        out.sample("kiosk_rpc_server_connections", [], UInt64(reading.connectionsOpen))
        out.family(
            "kiosk_rpc_server_limit_refusals_total", "counter",
            help: "Connections or calls refused or ended by a server limit, by limit.")
        for limit in ServerMeter.Limit.allCases {
            out.sample(
                "kiosk_rpc_server_limit_refusals_total", [("limit", limit.rawValue)], reading.refusals[limit] ?? 0)
        }
        return out.bytes
    }
}
