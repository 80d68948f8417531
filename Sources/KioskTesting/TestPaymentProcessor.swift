import KioskStore
import NIOConcurrencyHelpers

/// The simulated payment processor, plus knobs: make the next payments fail or
/// defer, and count the charges actually made. Like a real processor, it
/// deduplicates on the payment id: asked again for a payment it charged, it
/// answers as before and charges nothing.
public final class TestPaymentProcessor: PaymentProcessor {
    private let simulated = SimulatedPaymentProcessor()
    private let state = NIOLockedValueBox<(overrides: [PaymentOutcome], charges: [String: Int], outcomes: [String: PaymentOutcome])>(([], [:], [:]))

    /// Creates the processor.
    public init() {}

    /// The next payment (whatever its method) has this outcome instead.
    public func overrideNextPayment(_ outcome: PaymentOutcome) {
        state.withLockedValue { $0.overrides.append(outcome) }
    }

    /// How many times each payment id was charged (always once: repeats are deduplicated).
    public var charges: [String: Int] { state.withLockedValue { $0.charges } }

    /// The number of charges made.
    public var chargeCount: Int { state.withLockedValue { $0.charges.values.reduce(0, +) } }

    public func charge(_ request: PaymentRequest) async -> PaymentOutcome {
        if let earlier = state.withLockedValue({ $0.outcomes[request.paymentID] }) { return earlier }
        let override = state.withLockedValue { state in state.overrides.isEmpty ? nil : state.overrides.removeFirst() }
        let outcome: PaymentOutcome
        if let override { outcome = override } else { outcome = await simulated.charge(request) }
        state.withLockedValue { $0.outcomes[request.paymentID] = outcome }
        if case .succeeded = outcome { record(request) }
        return outcome
    }

    public func approve(_ request: PaymentRequest) async -> PaymentOutcome {
        let outcome = PaymentOutcome.succeeded(reference: "test_" + request.paymentID)
        let first = state.withLockedValue { state -> Bool in
            if case .succeeded? = state.outcomes[request.paymentID] { return false }
            state.outcomes[request.paymentID] = outcome
            return true
        }
        if first { record(request) }
        return outcome
    }

    private func record(_ request: PaymentRequest) {
        state.withLockedValue { $0.charges[request.paymentID, default: 0] += 1 }
    }
}
