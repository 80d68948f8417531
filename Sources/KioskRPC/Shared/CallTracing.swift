import KioskWire
import Tracing

/// Puts a trace's context into a call's metadata (a client's HEADERS): what a `Tracer`'s
/// `inject(_:into:using:)` writes, such as W3C `traceparent`.
public struct MetadataInjector: Injector {
    /// An injector.
    public init() {}

    /// Sets `key` to `value` in `carrier`, replacing any value it had.
    public func inject(_ value: String, forKey key: String, into carrier: inout Metadata) {
        carrier.set(key, value)
    }
}

/// Reads a trace's context from a call's metadata (a server's HEADERS), for a `Tracer`'s
/// `extract(_:into:using:)`.
public struct MetadataExtractor: Extractor {
    /// An extractor.
    public init() {}

    /// The first value of `key` in `carrier`, if any.
    public func extract(key: String, from carrier: Metadata) -> String? {
        carrier[key]
    }
}

/// How the RPC server and client trace calls: a span per call, its context taken from (server) or put into
/// (client) the call's metadata.
enum CallTracing {
    /// The tracer to use: the one configured, else the process's (`InstrumentationSystem.tracer`) when one was
    /// bootstrapped; nil when there is none, so that a process without tracing pays nothing per call.
    static func resolve(_ configured: (any Tracer)?) -> (any Tracer)? {
        if let configured { return configured }
        let global = InstrumentationSystem.tracer
        return global is NoOpTracer ? nil : global
    }

    /// The span of a call the server received: a child of the caller's span when its metadata carries one.
    static func startServerSpan(
        _ tracer: any Tracer, method: String, metadata: Metadata, requestID: String,
        at start: DefaultTracerClock.Instant = DefaultTracerClock.now
    ) -> any Span {
        var context = ServiceContext.topLevel
        tracer.extract(metadata, into: &context, using: MetadataExtractor())
        let span = tracer.startSpan(method, context: context, ofKind: .server, at: start)
        span.updateAttributes { attributes in
            Self.describe(method, into: &attributes)
            attributes["kiosk.request_id"] = requestID
        }
        return span
    }

    /// The span of a call a client makes, a child of the current task's span when there is one.
    static func startClientSpan(_ tracer: any Tracer, method: String) -> any Span {
        let span = tracer.startSpan(method, context: ServiceContext.current ?? .topLevel, ofKind: .client)
        span.updateAttributes { Self.describe(method, into: &$0) }
        return span
    }

    /// Ends a call's span with the call's status code: an error unless OK.
    static func end(_ span: any Span, code: UInt32, message: String = "") {
        span.attributes["rpc.grpc.status_code"] = Int64(code)
        if code != 0 {
            span.setStatus(SpanStatus(code: .error, message: message.isEmpty ? nil : String(message.prefix(200))))
        }
        span.end()
    }

    /// `metadata` with the current task's trace context put in, as `tracer` writes it.
    static func inject(_ tracer: any Tracer, into metadata: Metadata) -> Metadata {
        guard let context = ServiceContext.current else { return metadata }
        var metadata = metadata
        tracer.inject(context, into: &metadata, using: MetadataInjector())
        return metadata
    }

    /// OpenTelemetry's RPC attributes for a full method name (`/package.Service/Method`).
    private static func describe(_ method: String, into attributes: inout SpanAttributes) {
        attributes["rpc.system"] = "kiosk"
        let parts = method.split(separator: "/", omittingEmptySubsequences: true)
        if parts.count == 2 {
            attributes["rpc.service"] = String(parts[0])
            attributes["rpc.method"] = String(parts[1])
        } else {
            attributes["rpc.method"] = method
        }
    }
}
