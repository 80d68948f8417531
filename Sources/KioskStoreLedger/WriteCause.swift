import KioskRPC
import KioskStoreCore
import KioskWire
import Tracing

/// The call a ledger write is made for: the request id its logs carry and the trace context of its span, kept
/// with each event the write records (the `request_id` and `traceparent` columns), so that work the event
/// causes later (a webhook delivery, on any replica) is logged and traced as part of that call.
package struct WriteCause: Sendable, Hashable {
    /// The call's request id (``RequestScope``); empty outside a call.
    package var requestID: String
    /// The W3C `traceparent` of the write's span, or of the caller's; empty when not traced.
    package var traceParent: String
    /// The operator acting (``OperatorScope/actor``); nil for a buyer's or the store's own doing.
    package var actor: String? = nil

    /// The cause bound around a write's body (on whatever thread runs it).
    @TaskLocal package static var current: WriteCause?

    /// The current task's cause: its call's request id and the trace context of `span` (else the task's); nil
    /// when there is neither.
    package static func capture(span: (any Span)?) -> WriteCause? {
        let requestID = RequestScope.current?.requestID ?? ""
        var carrier = Metadata()
        if let context = span?.context ?? ServiceContext.current {
            InstrumentationSystem.tracer.inject(context, into: &carrier, using: MetadataInjector())
        }
        let traceParent = carrier[TraceParent.headerName] ?? ""
        let actor = OperatorScope.actor
        guard !requestID.isEmpty || !traceParent.isEmpty || actor != nil else { return nil }
        return WriteCause(requestID: requestID, traceParent: traceParent, actor: actor)
    }
}
