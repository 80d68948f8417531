import KioskStore
import NIOConcurrencyHelpers

/// The simulated payment processor, plus knobs: make the next payments fail,
/// defer or go unanswered, and count the charges and refunds actually made.
/// Like a real processor, it deduplicates on the payment id: asked again for a
/// payment it charged, it answers as before and charges nothing; its
/// ``lookup(_:)`` is exact.
public final class TestPaymentProcessor: PaymentProcessor {
    /// What the next payment does instead of what its method says.
    public enum Override: Sendable {
        /// Answer this outcome.
        case outcome(PaymentOutcome)
        /// Charge, then throw as if the answer was lost on the way (a timeout after charging).
        case chargeThenLoseAnswer
        /// Throw without charging (the processor was unreachable).
        case unreachable
    }

    private struct State {
        var overrides: [Override] = []
        var charges: [String: Int] = [:]
        var outcomes: [String: PaymentOutcome] = [:]
        var refunds: [String: Int] = [:]
        var renewalDeclines = 0
        var renewalCharges = 0
    }

    private let simulated = SimulatedPaymentProcessor()
    private let state = NIOLockedValueBox(State())

    /// Creates the processor.
    public init() {}

    /// `test`, the processor's name in logs and errors.
    public var name: String { "test" }
    /// True: it takes no real money, so a production store refuses it.
    public var isSimulated: Bool { true }

    /// The next payment (whatever its method) has this outcome instead.
    public func overrideNextPayment(_ outcome: PaymentOutcome) {
        state.withLockedValue { $0.overrides.append(.outcome(outcome)) }
    }

    /// The next payment behaves as `override` says.
    public func overrideNextPayment(_ override: Override) {
        state.withLockedValue { $0.overrides.append(override) }
    }

    /// The next `count` subscription renewals the store charges are declined (`card_declined`); `Int.max`: every one until
    /// ``stopFailingRenewals()``. Purchases are not affected.
    public func failNextRenewals(_ count: Int = 1) {
        state.withLockedValue { $0.renewalDeclines = count == Int.max ? Int.max : $0.renewalDeclines + count }
    }

    /// Renewals are charged again.
    public func stopFailingRenewals() {
        state.withLockedValue { $0.renewalDeclines = 0 }
    }

    /// The number of subscription renewals charged.
    public var renewalChargeCount: Int { state.withLockedValue { $0.renewalCharges } }

    /// How many times each payment id was charged (always once: repeats are deduplicated).
    public var charges: [String: Int] { state.withLockedValue { $0.charges } }

    /// The number of charges made.
    public var chargeCount: Int { state.withLockedValue { $0.charges.values.reduce(0, +) } }

    /// The number of refunds made.
    public var refundCount: Int { state.withLockedValue { $0.refunds.values.reduce(0, +) } }

    /// Charges a payment: a payment id already answered gets the same answer again (nothing is charged twice);
    /// a renewal is declined while ``failNextRenewals(_:)`` says so; otherwise the next override, if any,
    /// decides, and else the payment method does, as with the simulated processor.
    public func charge(_ request: PaymentRequest) async throws -> PaymentOutcome {
        if let earlier = state.withLockedValue({ $0.outcomes[request.paymentID] }) { return earlier }
        if request.isRenewal {
            let declined = state.withLockedValue { state -> Bool in
                guard state.renewalDeclines > 0 else { return false }
                if state.renewalDeclines != Int.max { state.renewalDeclines -= 1 }
                return true
            }
            if declined {
                return settle(
                    request, .declined(reason: "card_declined", message: "renewal declined by the test session"))
            }
        }
        let override = state.withLockedValue { state in state.overrides.isEmpty ? nil : state.overrides.removeFirst() }
        let outcome: PaymentOutcome
        switch override {
        case .outcome(let forced)?: outcome = forced
        case .unreachable?: throw PaymentProcessorError("test: the processor is unreachable")
        case .chargeThenLoseAnswer?:
            settle(request, .succeeded(reference: "test_" + request.paymentID))
            throw PaymentProcessorError("test: the answer was lost after charging")
        case nil: outcome = await simulated.charge(request)
        }
        return settle(request, outcome)
    }

    @discardableResult
    private func settle(_ request: PaymentRequest, _ outcome: PaymentOutcome) -> PaymentOutcome {
        let first = state.withLockedValue { state -> Bool in
            if let earlier = state.outcomes[request.paymentID], case .succeeded = earlier { return false }
            state.outcomes[request.paymentID] = outcome
            return true
        }
        if first, case .succeeded = outcome {
            state.withLockedValue {
                $0.charges[request.paymentID, default: 0] += 1
                if request.isRenewal { $0.renewalCharges += 1 }
            }
        }
        return outcome
    }

    /// Charges a deferred (ask-to-buy) payment once it was approved; counted once per payment id.
    public func approve(_ request: PaymentRequest) async throws -> PaymentOutcome {
        settle(request, .succeeded(reference: "test_" + request.paymentID))
        return .succeeded(reference: "test_" + request.paymentID)
    }

    /// What this processor answered for the payment id: charged, deferred, or not charged (never asked,
    /// declined or cancelled). Charges nothing.
    public func lookup(_ request: PaymentRequest) async throws -> PaymentLookup {
        switch state.withLockedValue({ $0.outcomes[request.paymentID] }) {
        case .succeeded(let reference, let savedMethod)?:
            return .charged(reference: reference, savedMethod: savedMethod)
        case .deferred?: return .deferred
        default: return .notCharged
        }
    }

    /// Records a refund of the payment; asking again for the same payment id counts it once.
    public func refund(_ request: PaymentRequest, reason: String) async throws {
        state.withLockedValue { state in
            if state.refunds[request.paymentID] == nil { state.refunds[request.paymentID] = 1 }
        }
    }
}
