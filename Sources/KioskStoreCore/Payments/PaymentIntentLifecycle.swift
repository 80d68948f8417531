// The life of a payment intent: the store's record of a payment it is about to ask the processor for.
//
// States (``PaymentIntentLifecycle/State``):
//
//   PENDING ──processorAnswered(succeeded)──► COMPLETED   action: record the transaction PURCHASED
//   PENDING ──processorAnswered(deferred)───► COMPLETED   action: record DEFERRED (purchase); close (approval, renewal)
//   PENDING ──processorAnswered(declined | cancelled)──► CLOSED  action: record FAILED (purchase), close (others)
//   PENDING ──processorSilent──────────────► PENDING     action: keep it; reconciliation or a retry settles it
//   PENDING ──lookedUp(charged)────────────► COMPLETED   action: record PURCHASED
//   PENDING ──lookedUp(deferred)───────────► COMPLETED (purchase: record DEFERRED) | CLOSED (approval, renewal)
//   PENDING ──lookedUp(notCharged)─────────► CLOSED      (closed uncharged: looked up once more later)
//   CLOSED (uncharged) ──lookedUp(charged)─► COMPLETED   action: record PURCHASED (the processor's index lagged)
//   CLOSED (uncharged) ──lookedUp(other)───► CLOSED      (confirmed)
//   COMPLETED | CLOSED ──processorAnswered / lookedUp──► unchanged   action: nothing (settled before)
//
// A payment of nothing (a free trial, an upgrade fully credited) never reaches the processor:
// ``PaymentIntentLifecycle/plan(for:)`` says so, and a refund of one has nothing to give back there
// (``RefundPlan``).

/// What a payment is for.
public enum PaymentKind: String, Hashable, Sendable, CaseIterable {
    /// A purchase: the processor's `charge`.
    case purchase
    /// The approval of a DEFERRED (ask-to-buy) transaction: the processor's `approve`.
    case approval
    /// An auto-renewable subscription's renewal, charged by the store at the end of a period.
    case renewal
}

/// A payment intent's lifecycle: events in, actions out.
public struct PaymentIntentLifecycle: Hashable, Sendable {
    /// Where the intent stands.
    public enum State: Hashable, Sendable {
        /// Written; the processor may be being asked, or the outcome was never recorded.
        case pending
        /// Charged (or deferred) and recorded.
        case completed
        /// Nothing was charged. `uncharged`: closed by a lookup that found nothing (looked up once more later).
        case closed(uncharged: Bool)
    }

    /// What the store must write (in one ledger transaction with the intent's new state).
    public enum Action: Hashable, Sendable {
        /// Nothing: the intent was settled before.
        case nothing
        /// Record the transaction PURCHASED with the processor's reference.
        case recordPurchased(reference: String)
        /// Record a purchase DEFERRED (waiting for approval).
        case recordDeferred
        /// Record a purchase FAILED (declined or cancelled), with a machine-readable reason.
        case recordFailed(reason: String)
        /// Close the intent with this outcome; nothing else is recorded.
        case close(outcome: String)
        /// Leave the intent pending: the outcome is unknown.
        case keepPending
    }

    /// What the payment is for.
    public let kind: PaymentKind
    /// Where it stands.
    public private(set) var state: State

    /// An intent in `state`.
    public init(kind: PaymentKind, state: State = .pending) {
        self.kind = kind
        self.state = state
    }

    /// Whether the processor is asked at all: nothing to charge is never sent to it.
    public static func plan(for amount: Money?) -> ChargePlan {
        guard let amount else { return .invalidAmount }
        return amount.isZero ? .nothingToCharge : .askProcessor
    }

    /// The processor answered a charge (or an approval).
    public mutating func processorAnswered(_ outcome: PaymentOutcome) -> Action {
        guard state == .pending else { return .nothing }
        switch (outcome, kind) {
        case (.succeeded(let reference, _), _):
            state = .completed
            return .recordPurchased(reference: reference)
        case (.deferred, .purchase):
            state = .completed
            return .recordDeferred
        case (.deferred, _):
            // An approval or a renewal is never deferred: nothing was charged.
            state = .closed(uncharged: false)
            return .close(outcome: "deferred")
        case (.declined(let reason, _), .purchase):
            state = .closed(uncharged: false)
            return .recordFailed(reason: reason)
        case (.declined(let reason, _), _):
            state = .closed(uncharged: false)
            return .close(outcome: "declined:\(reason)")
        case (.needsAction(let reference, let clientSecret), .renewal):
            // Closed: nothing was charged. The buyer may confirm the processor's payment later; the renewal engine
            // and ConfirmRenewal ask the processor what became of it (``PaymentProcessor/resolveAction``).
            state = .closed(uncharged: false)
            return .close(outcome: "\(Self.needsActionPrefix)\(reference):\(clientSecret)")
        case (.needsAction, .purchase):
            state = .closed(uncharged: false)
            return .recordFailed(reason: "authentication_required")
        case (.needsAction, _):
            state = .closed(uncharged: false)
            return .close(outcome: "declined:authentication_required")
        case (.cancelled, .purchase):
            state = .closed(uncharged: false)
            return .recordFailed(reason: "cancelled")
        case (.cancelled, _):
            state = .closed(uncharged: false)
            return .close(outcome: "cancelled")
        }
    }

    /// The processor did not answer (network error, timeout): the payment may or may not have been made.
    public mutating func processorSilent() -> Action {
        state == .pending ? .keepPending : .nothing
    }

    /// Reconciliation asked the processor what became of the payment.
    public mutating func lookedUp(_ lookup: PaymentLookup) -> Action {
        switch (state, lookup) {
        case (.pending, .charged(let reference, _)), (.closed(uncharged: true), .charged(let reference, _)):
            state = .completed
            return .recordPurchased(reference: reference)
        case (.pending, .deferred) where kind == .purchase:
            state = .completed
            return .recordDeferred
        case (.pending, .deferred), (.pending, .notCharged):
            state = .closed(uncharged: true)
            return .close(outcome: Self.closedUncharged)
        case (.closed(uncharged: true), _):
            state = .closed(uncharged: false)
            return .close(outcome: Self.closedUncharged + ":confirmed")
        case (.completed, _), (.closed(uncharged: false), _):
            return .nothing
        }
    }

    /// The outcome of an intent reconciliation closed as not charged (before its second look).
    public static let closedUncharged = "reconciled:not_charged"

    /// The outcome of a renewal intent closed because the buyer must authenticate the payment:
    /// `needs_action:<reference>:<client secret>`.
    public static let needsActionPrefix = "needs_action:"

    /// The processor's payment and its client secret of a renewal intent that waits for the buyer; nil otherwise.
    public static func pendingAction(of intent: PaymentIntent) -> (reference: String, clientSecret: String)? {
        guard intent.kind == .renewal, intent.state == .closed, intent.outcome.hasPrefix(needsActionPrefix) else {
            return nil
        }
        let rest = intent.outcome.dropFirst(needsActionPrefix.count)
        guard let colon = rest.firstIndex(of: ":") else { return nil }
        return (String(rest[..<colon]), String(rest[rest.index(after: colon)...]))
    }
}

/// Whether a payment goes to the processor.
public enum ChargePlan: Hashable, Sendable {
    /// A positive amount: ask the processor.
    case askProcessor
    /// Nothing to charge (a free trial, an upgrade fully credited): the payment succeeds without the processor.
    case nothingToCharge
    /// The price cannot be read in its currency: refuse it.
    case invalidAmount
}

/// What refunding a transaction takes at the processor.
public enum RefundPlan: Hashable, Sendable {
    /// Give the payment back through the processor's refund.
    case processor
    /// Nothing was charged (a free trial, a fully credited upgrade): only the ledger changes.
    case ledgerOnly

    /// The plan for a transaction of `quantity` × `unitPrice` in `currency` that was paid under a payment id
    /// (nil: never sent to a processor). A price that cannot be read goes to the processor, which knows.
    public static func forTransaction(
        paymentID: String?, unitPrice: String, currency: String, quantity: UInt32
    ) -> RefundPlan {
        guard paymentID != nil else { return .ledgerOnly }
        if let amount = Money(decimal: unitPrice, currency: currency)?.times(quantity), amount.isZero {
            return .ledgerOnly
        }
        return .processor
    }
}
