import NIOConcurrencyHelpers
import Tracing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A tracer that writes each span, when it ends, as one JSON object a line, and carries a trace across calls
/// in W3C Trace Context's `traceparent` metadata: what `--trace-log` on the services uses, and what an app or
/// a test can bootstrap (`InstrumentationSystem.bootstrap(JSONSpanTracer(...))`) to follow its calls into
/// the services.
///
/// A line has `trace_id` (32 hex digits), `span_id` and `parent_span_id` (16), `name`, `kind`, `service`,
/// `start_unix_nano`, `duration_ns`, `status` (`ok`, `error`, `unset`), `attributes`, and `events` when any.
/// A collector that reads JSON lines (the OpenTelemetry Collector's `filelog` receiver, Vector, a script)
/// turns them into traces; so does `jq` for one request.
public final class JSONSpanTracer: Tracer, Sendable {
    /// Receives each ended span's JSON line (with its new line).
    public typealias Sink = @Sendable (String) -> Void

    /// The name written as each span's `service` (`kiosk-store`, `kiosk-content`, an app's).
    public let service: String
    private let sink: Sink

    /// A tracer naming its spans' `service`, handing each line to `sink`.
    public init(service: String, sink: @escaping Sink) {
        self.service = service
        self.sink = sink
    }

    /// A tracer appending its lines to the file at `path` (created when missing, mode 0600), one write(2) a
    /// line.
    /// - Throws: ``TraceLogError`` when the file cannot be opened.
    public static func appending(to path: String, service: String) throws -> JSONSpanTracer {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw TraceLogError(message: "cannot open the trace log \(path): errno \(errno)")
        }
        return JSONSpanTracer(service: service) { line in writeWhole(descriptor, line) }
    }

    /// Makes a tracer appending to `path` (``appending(to:service:)``) the process's tracer
    /// (`InstrumentationSystem.bootstrap`): its servers, clients and ledger then trace. Once per process.
    public static func bootstrap(appendingTo path: String, service: String) throws {
        InstrumentationSystem.bootstrap(try appending(to: path, service: service))
    }

    // MARK: Tracer

    /// Starts a span: a child of the span in `context` when there is one, else the root of a new trace.
    public func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> JSONSpan {
        var context = context()
        let parent = context.traceParent
        let own = TraceParent(
            traceID: parent?.traceID ?? TraceParent.randomTraceID(), spanID: TraceParent.randomSpanID(),
            sampled: parent?.sampled ?? true)
        context.traceParent = own
        return JSONSpan(
            name: operationName, kind: kind, context: context, parentSpanID: parent?.spanID,
            startNanos: instant().nanosecondsSinceEpoch, tracer: self)
    }

    /// Nothing is buffered: each line is written when its span ends.
    public func forceFlush() {}

    /// Reads `traceparent` (W3C Trace Context) from `carrier`; a value that is not a valid one is ignored, and
    /// the call starts a trace of its own.
    public func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract
    ) where Extract.Carrier == Carrier {
        guard let value = extractor.extract(key: TraceParent.headerName, from: carrier),
            let parent = TraceParent(header: value)
        else { return }
        context.traceParent = parent
    }

    /// Writes the current span as `traceparent` (W3C Trace Context) into `carrier`.
    public func inject<Carrier, Inject: Injector>(
        _ context: ServiceContext, into carrier: inout Carrier, using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let parent = context.traceParent else { return }
        injector.inject(parent.header, forKey: TraceParent.headerName, into: &carrier)
    }

    fileprivate func export(_ line: String) { sink(line) }
}

/// A trace log that could not be opened.
public struct TraceLogError: Error, CustomStringConvertible, Sendable {
    /// What went wrong.
    public var message: String
    /// The message.
    public var description: String { message }
}

/// A span of ``JSONSpanTracer``: recorded in memory until it ends, then written as one line.
public final class JSONSpan: Span, Sendable {
    private struct State {
        var name: String
        var attributes: SpanAttributes = [:]
        var status: SpanStatus?
        var events: [SpanEvent] = []
        var ended = false
    }

    /// The span's context: its trace and span ids (``TraceParent``).
    public let context: ServiceContext
    private let kind: SpanKind
    private let parentSpanID: String?
    private let startNanos: UInt64
    private let tracer: JSONSpanTracer
    private let state: NIOLockedValueBox<State>

    fileprivate init(
        name: String, kind: SpanKind, context: ServiceContext, parentSpanID: String?, startNanos: UInt64,
        tracer: JSONSpanTracer
    ) {
        self.context = context
        self.kind = kind
        self.parentSpanID = parentSpanID
        self.startNanos = startNanos
        self.tracer = tracer
        self.state = NIOLockedValueBox(State(name: name))
    }

    /// The span's name.
    public var operationName: String {
        get { state.withLockedValue { $0.name } }
        set { state.withLockedValue { $0.name = newValue } }
    }

    /// The span's attributes.
    public var attributes: SpanAttributes {
        get { state.withLockedValue { $0.attributes } }
        set { state.withLockedValue { $0.attributes = newValue } }
    }

    /// True until it ends.
    public var isRecording: Bool { state.withLockedValue { !$0.ended } }

    /// Sets its status (written as `status`, with `status_message` for an error's).
    public func setStatus(_ status: SpanStatus) { state.withLockedValue { $0.status = status } }

    /// Records an event at a time within the span.
    public func addEvent(_ event: SpanEvent) { state.withLockedValue { $0.events.append(event) } }

    /// Records an error as an `exception` event (its type, not its message: messages can carry what a log must
    /// not).
    public func recordError<Instant: TracerInstant>(
        _ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant
    ) {
        var attributes = attributes
        attributes["exception.type"] = String(describing: type(of: error))
        addEvent(SpanEvent(name: "exception", at: instant(), attributes: attributes))
    }

    /// Links are not written.
    public func addLink(_ link: SpanLink) {}

    /// Ends the span and writes its line; a second end does nothing.
    public func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        let endNanos = instant().nanosecondsSinceEpoch
        guard
            let ended = state.withLockedValue({ state -> State? in
                guard !state.ended else { return nil }
                state.ended = true
                return state
            })
        else { return }
        guard let own = context.traceParent, own.sampled else { return }
        var out = "{\"trace_id\":\"\(own.traceID)\",\"span_id\":\"\(own.spanID)\""
        if let parentSpanID { out += ",\"parent_span_id\":\"\(parentSpanID)\"" }
        out += ",\"name\":"
        JSONLogHandler.appendString(ended.name, to: &out)
        out += ",\"kind\":\"\(Self.name(kind))\",\"service\":"
        JSONLogHandler.appendString(tracer.service, to: &out)
        out += ",\"start_unix_nano\":\(startNanos),\"duration_ns\":\(endNanos &- startNanos)"
        switch ended.status?.code {
        case .error?:
            out += ",\"status\":\"error\""
            if let message = ended.status?.message {
                out += ",\"status_message\":"
                JSONLogHandler.appendString(message, to: &out)
            }
        case .ok?: out += ",\"status\":\"ok\""
        case nil: out += ",\"status\":\"unset\""
        }
        out += ",\"attributes\":"
        Self.append(ended.attributes, to: &out)
        if !ended.events.isEmpty {
            out += ",\"events\":["
            for (index, event) in ended.events.enumerated() {
                if index > 0 { out += "," }
                out += "{\"name\":"
                JSONLogHandler.appendString(event.name, to: &out)
                out += ",\"time_unix_nano\":\(event.nanosecondsSinceEpoch),\"attributes\":"
                Self.append(event.attributes, to: &out)
                out += "}"
            }
            out += "]"
        }
        out += "}\n"
        tracer.export(out)
    }

    private static func name(_ kind: SpanKind) -> String {
        switch kind {
        case .server: "server"
        case .client: "client"
        case .producer: "producer"
        case .consumer: "consumer"
        case .internal: "internal"
        }
    }

    private static func append(_ attributes: SpanAttributes, to out: inout String) {
        var entries: [(String, SpanAttribute)] = []
        // SpanAttributes is not a Sequence: forEach is its only walk.
        // swift-format-ignore: ReplaceForEachWithForLoop
        attributes.forEach { entries.append(($0, $1)) }
        entries.sort { $0.0 < $1.0 }
        out += "{"
        for (index, (key, value)) in entries.enumerated() {
            if index > 0 { out += "," }
            JSONLogHandler.appendString(key, to: &out)
            out += ":"
            switch value {
            case .int32(let number): out += "\(number)"
            case .int64(let number): out += "\(number)"
            case .double(let number) where number.isFinite: out += "\(number)"
            case .bool(let flag): out += flag ? "true" : "false"
            case .string(let text): JSONLogHandler.appendString(text, to: &out)
            default: JSONLogHandler.appendString("\(value)", to: &out)
            }
        }
        out += "}"
    }
}

/// A W3C Trace Context `traceparent`: the trace a call belongs to and the span that made it.
public struct TraceParent: Hashable, Sendable {
    /// The metadata key it travels in: `traceparent`.
    public static let headerName = "traceparent"

    /// 32 lowercase hex digits, not all zero.
    public var traceID: String
    /// 16 lowercase hex digits, not all zero.
    public var spanID: String
    /// The caller records this trace (flag 01): spans of an unsampled trace are not written.
    public var sampled: Bool

    /// A context from its parts (ids as lowercase hex).
    public init(traceID: String, spanID: String, sampled: Bool = true) {
        self.traceID = traceID
        self.spanID = spanID
        self.sampled = sampled
    }

    /// Parses `00-<trace id>-<span id>-<flags>` (or a later version's first four fields, as the
    /// specification says); nil for anything else, all-zero ids included.
    public init?(header: String) {
        let fields = header.split(separator: "-", omittingEmptySubsequences: false)
        guard fields.count >= 4, fields[0].utf8.count == 2, Self.isHex(fields[0]), fields[0] != "ff",
            fields[0] != "00" || fields.count == 4,
            fields[1].utf8.count == 32, Self.isHex(fields[1]), fields[1].contains(where: { $0 != "0" }),
            fields[2].utf8.count == 16, Self.isHex(fields[2]), fields[2].contains(where: { $0 != "0" }),
            fields[3].utf8.count == 2, Self.isHex(fields[3]), let flags = UInt8(fields[3], radix: 16)
        else { return nil }
        self.init(traceID: String(fields[1]), spanID: String(fields[2]), sampled: flags & 1 == 1)
    }

    /// `00-<trace id>-<span id>-<flags>`.
    public var header: String { "00-\(traceID)-\(spanID)-\(sampled ? "01" : "00")" }

    private static func isHex(_ text: Substring) -> Bool {
        text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }

    static func randomTraceID() -> String { hex(count: 16) }
    static func randomSpanID() -> String { hex(count: 8) }

    private static func hex(count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        while true {
            // Eight bytes a draw: each draw of the system generator is a system call.
            var bytes: [UInt8] = []
            bytes.reserveCapacity(count + 7)
            while bytes.count < count { withUnsafeBytes(of: generator.next()) { bytes.append(contentsOf: $0) } }
            bytes.removeLast(bytes.count - count)
            guard bytes.contains(where: { $0 != 0 }) else { continue }
            let digits = Array("0123456789abcdef".utf8)
            var out = [UInt8]()
            out.reserveCapacity(count * 2)
            for byte in bytes {
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 0x0F)])
            }
            return String(decoding: out, as: UTF8.self)
        }
    }
}

extension ServiceContext {
    /// The trace and span a ``JSONSpanTracer`` span or an incoming `traceparent` put in this context.
    public var traceParent: TraceParent? {
        get { self[TraceParentKey.self] }
        set { self[TraceParentKey.self] = newValue }
    }
}

private enum TraceParentKey: ServiceContextKey {
    typealias Value = TraceParent
    static var nameOverride: String? { "traceparent" }
}

/// Writes all of `text` to `descriptor`, looping over short writes and interruptions: a line longer than
/// the pipe's atomic size still arrives whole (though then possibly interleaved with another writer's).
func writeWhole(_ descriptor: Int32, _ text: String) {
    var text = text
    text.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let written = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written > 0 {
                offset += written
            } else if written < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}
