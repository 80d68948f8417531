import KioskRPC
import KioskWire
import NIOCore
import Testing

/// The inline fast path's memory (``InlineCallPath``), event by event: remembered HEADERS and their
/// generations, the principal kept for them, and the one pending call and what each frame does to it.
@Suite struct InlineCallPathTests {
    final class Routed {
        let name: String
        init(_ name: String) { self.name = name }
    }

    typealias Path = InlineCallPath<Routed>

    func bytes(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    @Test func newHeadersTakeTheNextGenerationAndTheSameBytesFindThem() {
        var path = Path()
        #expect(path.routed(matching: bytes("a")) == nil)
        let first = Routed("a")
        #expect(path.remember(bytes("a"), routed: first) == 1)
        let found = path.routed(matching: bytes("a"))
        #expect(found?.routed === first && found?.generation == 1)
        #expect(path.routed(matching: bytes("b")) == nil)
        #expect(path.remember(bytes("b"), routed: Routed("b")) == 2)
        #expect(path.routed(matching: bytes("a")) == nil, "only the last HEADERS are remembered")
        #expect(path.rememberedBytes == 1)
    }

    @Test func headersTooLargeToKeepAreNotRememberedAndLeaveTheLastOnes() {
        var path = Path()
        _ = path.remember(bytes("a"), routed: Routed("a"))
        let large = ByteBuffer(repeating: 0x41, count: Path.largestRememberedHeaders + 1)
        #expect(path.remember(large, routed: Routed("large")) == 0)
        #expect(path.generation == 1)
        #expect(path.routed(matching: bytes("a"))?.routed.name == "a")
    }

    @Test func aPrincipalIsReusedOnlyForTheGenerationItWasFoundFor() {
        var path = Path()
        let generation = path.remember(bytes("a"), routed: Routed("a"))
        #expect(path.principal(forGeneration: generation) == nil, "nothing found yet")
        path.authenticated("alice", generation: generation)
        #expect(path.principal(forGeneration: generation).flatMap { $0 as? String } == "alice")
        #expect(path.principal(forGeneration: 0) == nil, "a call whose HEADERS were not remembered")
        // An authenticator that finds no principal to keep still answers: the outer optional is set.
        path.authenticated(nil, generation: generation)
        #expect(path.principal(forGeneration: generation) != nil)
        // New HEADERS forget it; a verdict for the old generation is ignored.
        let next = path.remember(bytes("b"), routed: Routed("b"))
        #expect(path.principal(forGeneration: next) == nil)
        path.authenticated("mallory", generation: generation)
        #expect(path.principal(forGeneration: next) == nil)
        #expect(path.principal(forGeneration: generation) == nil)
    }

    @Test func aRefusedCheckForgetsThePrincipalBeforeItRuns() {
        var path = Path()
        let generation = path.remember(bytes("a"), routed: Routed("a"))
        path.authenticated("alice", generation: generation)
        path.forgetPrincipal(generation: generation)
        #expect(path.principal(forGeneration: generation) == nil)
    }

    @Test func thePendingCallsOwnRequestAnswersItAndAnyOtherFrameOpensItFirst() {
        var path = Path()
        let routed = Routed("a")
        #expect({ if case .none = path.frameRead(type: .message, callID: 1) { true } else { false } }())

        path.admit(.init(callID: 1, routed: routed, timeoutMs: 0, headersGeneration: 1))
        guard case .answer(let answered) = path.frameRead(type: .message, callID: 1) else {
            Issue.record("its own MESSAGE answers the call")
            return
        }
        #expect(answered.callID == 1 && answered.routed === routed && path.pending == nil)

        for (type, callID) in [
            (FrameType.message, UInt32(3)), (.headers, 2), (.cancel, 2), (.ping, 0), (.windowUpdate, 2),
        ] {
            path.admit(.init(callID: 2, routed: routed, timeoutMs: 50, headersGeneration: 1))
            guard case .open(let opened) = path.frameRead(type: type, callID: callID) else {
                Issue.record("\(type) for call \(callID) must open call 2 first")
                return
            }
            #expect(opened.callID == 2 && opened.timeoutMs == 50 && path.pending == nil)
        }
    }

    @Test func theEndOfAReadTakesThePendingCallOnce() {
        var path = Path()
        #expect(path.takePending() == nil)
        path.admit(.init(callID: 7, routed: Routed("a"), timeoutMs: 0, headersGeneration: 0))
        #expect(path.takePending()?.callID == 7)
        #expect(path.takePending() == nil)
    }
}
