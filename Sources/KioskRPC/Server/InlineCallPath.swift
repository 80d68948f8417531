import KioskWire
import NIOCore

/// What one server connection remembers for its inline fast path, apart from the connection's state
/// machine: the HEADERS of the last call (decoded and routed once, for the calls that send the same
/// bytes), the caller an inline authenticator found for them, and the unary call those HEADERS
/// admitted whose request has not been read yet.
///
/// States, each independent of the others:
/// - remembered HEADERS: none, or one payload with its routing and a generation (1, 2, … — each new
///   payload remembered takes the next one);
/// - principal: none, or the caller found for the current generation (a new generation forgets it);
/// - pending call: none, or one call (id, routing, timeout, generation) admitted but not yet entered
///   in the state machine.
///
/// Events: HEADERS read (``routed(matching:)``, then ``remember(_:routed:)`` for new bytes), an inline
/// call admitted (``admit(_:)``), any frame read (``frameRead(type:callID:)``: the pending call's own
/// request answers it; anything else enters it first), the read batch ending (``takePending()``),
/// and the authenticator's verdicts (``principal(forGeneration:)``, ``authenticated(_:generation:)``,
/// ``forgetPrincipal(generation:)``).
package struct InlineCallPath<Routed: AnyObject> {
    /// A call admitted by HEADERS whose request should follow in the same read.
    package struct PendingCall {
        package var callID: UInt32
        /// Its HEADERS as routed (their method has an inline form).
        package var routed: Routed
        package var timeoutMs: UInt32
        /// The generation of the remembered HEADERS it came with; 0: not remembered.
        package var headersGeneration: UInt64
        /// When it opened (uptime nanoseconds) if calls are timed, else 0.
        package var startNanos: UInt64

        package init(
            callID: UInt32, routed: Routed, timeoutMs: UInt32, headersGeneration: UInt64, startNanos: UInt64 = 0
        ) {
            self.callID = callID
            self.routed = routed
            self.timeoutMs = timeoutMs
            self.headersGeneration = headersGeneration
            self.startNanos = startNanos
        }
    }

    /// What to do with the pending call when a frame is read.
    package enum FrameDisposition {
        /// No call was pending.
        case none
        /// The frame is the pending call's request: answer it without entering it.
        case answer(PendingCall)
        /// Another frame: enter the pending call first, then handle the frame.
        case open(PendingCall)
    }

    /// HEADERS larger than this are decoded every time, not remembered: a peer can make a connection hold
    /// this much more, not the 16 KiB a HEADERS frame may carry.
    package static var largestRememberedHeaders: Int { 2048 }

    private var remembered: (payload: ByteBuffer, routed: Routed)?
    /// The generation of ``remembered``; 0 before any.
    package private(set) var generation: UInt64 = 0
    /// The principal found for the current generation (nil inside: the authenticator found no principal to keep).
    private var principal: (any Sendable)??
    package private(set) var pending: PendingCall?

    package init() {}

    /// Bytes of HEADERS remembered.
    package var rememberedBytes: Int { remembered?.payload.readableBytes ?? 0 }

    /// The routing of `payload` when it is the remembered HEADERS, with their generation.
    package func routed(matching payload: ByteBuffer) -> (routed: Routed, generation: UInt64)? {
        guard let remembered, remembered.payload == payload else { return nil }
        return (remembered.routed, generation)
    }

    /// Remembers new HEADERS (a copy of the bytes the caller owns); returns their generation, or 0 when they
    /// are too large to keep. The principal found for the HEADERS before is forgotten.
    package mutating func remember(_ payload: ByteBuffer, routed: Routed) -> UInt64 {
        guard payload.readableBytes <= Self.largestRememberedHeaders else { return 0 }
        remembered = (payload, routed)
        generation += 1
        principal = nil
        return generation
    }

    /// An inline unary call admitted by its HEADERS; there is at most one (each frame read settles the one before).
    package mutating func admit(_ call: PendingCall) {
        assert(pending == nil, "a call was admitted while another was pending")
        pending = call
    }

    /// A frame was read: what becomes of the pending call. Either way it is no longer pending.
    package mutating func frameRead(type: FrameType, callID: UInt32) -> FrameDisposition {
        guard let call = pending else { return .none }
        pending = nil
        return type == .message && callID == call.callID ? .answer(call) : .open(call)
    }

    /// The pending call, taken (the read batch ended, or an event other than a frame came): to be entered.
    package mutating func takePending() -> PendingCall? {
        defer { pending = nil }
        return pending
    }

    /// The principal found earlier for HEADERS of `generation`, if they are still the remembered ones.
    /// The outer optional is nil when there is none to reuse.
    package func principal(forGeneration generation: UInt64) -> (any Sendable)?? {
        guard generation != 0, generation == self.generation else { return nil }
        return principal
    }

    /// The authenticator found `principal` for a call with HEADERS of `generation`: kept for the next call
    /// with the same HEADERS (when they are still the remembered ones).
    package mutating func authenticated(_ principal: (any Sendable)?, generation: UInt64) {
        guard generation != 0, generation == self.generation else { return }
        self.principal = .some(principal)
    }

    /// Forgets the principal of `generation` (before a new check: credentials it refuses must not pass later).
    package mutating func forgetPrincipal(generation: UInt64) {
        guard generation != 0, generation == self.generation else { return }
        principal = nil
    }
}
