import KioskStoreCore
import Testing

/// Every state × event of ``PaymentIntentLifecycle``, for each kind of payment.
@Suite("Payment intent lifecycle")
struct PaymentIntentLifecycleTests {
    static let kinds: [PaymentKind] = [.purchase, .approval, .renewal]
    static let states: [PaymentIntentLifecycle.State] = [
        .pending, .completed, .closed(uncharged: true), .closed(uncharged: false),
    ]

    @Test("a charge succeeds: PENDING → COMPLETED, record PURCHASED", arguments: kinds)
    func succeeded(_ kind: PaymentKind) {
        var intent = PaymentIntentLifecycle(kind: kind)
        #expect(intent.processorAnswered(.succeeded(reference: "ch_1")) == .recordPurchased(reference: "ch_1"))
        #expect(intent.state == .completed)
    }

    @Test("a decline: a purchase records FAILED, approvals and renewals only close", arguments: kinds)
    func declined(_ kind: PaymentKind) {
        var intent = PaymentIntentLifecycle(kind: kind)
        let action = intent.processorAnswered(.declined(reason: "card_declined", message: "no"))
        #expect(
            action
                == (kind == .purchase
                    ? .recordFailed(reason: "card_declined") : .close(outcome: "declined:card_declined")))
        #expect(intent.state == .closed(uncharged: false))
    }

    @Test("a cancel: a purchase records FAILED, the others close", arguments: kinds)
    func cancelled(_ kind: PaymentKind) {
        var intent = PaymentIntentLifecycle(kind: kind)
        #expect(
            intent.processorAnswered(.cancelled)
                == (kind == .purchase ? .recordFailed(reason: "cancelled") : .close(outcome: "cancelled")))
        #expect(intent.state == .closed(uncharged: false))
    }

    @Test("deferred: a purchase records DEFERRED; an approval or renewal is never deferred", arguments: kinds)
    func deferred(_ kind: PaymentKind) {
        var intent = PaymentIntentLifecycle(kind: kind)
        let action = intent.processorAnswered(.deferred)
        #expect(action == (kind == .purchase ? .recordDeferred : .close(outcome: "deferred")))
        #expect(intent.state == (kind == .purchase ? .completed : .closed(uncharged: false)))
    }

    @Test("a silent processor keeps the intent pending", arguments: kinds)
    func silent(_ kind: PaymentKind) {
        var intent = PaymentIntentLifecycle(kind: kind)
        #expect(intent.processorSilent() == .keepPending)
        #expect(intent.state == .pending)
    }

    @Test(
        "settled intents ignore late answers", arguments: kinds,
        [PaymentIntentLifecycle.State.completed, .closed(uncharged: false)])
    func settledIgnoresAnswers(_ kind: PaymentKind, _ state: PaymentIntentLifecycle.State) {
        var intent = PaymentIntentLifecycle(kind: kind, state: state)
        #expect(intent.processorAnswered(.succeeded(reference: "late")) == .nothing)
        #expect(intent.processorSilent() == .nothing)
        #expect(intent.lookedUp(.charged(reference: "late")) == .nothing)
        #expect(intent.state == state)
    }

    @Test("reconciliation: each lookup from each state", arguments: kinds, states)
    func lookups(_ kind: PaymentKind, _ state: PaymentIntentLifecycle.State) {
        for lookup in [PaymentLookup.charged(reference: "ch"), .deferred, .notCharged] {
            var intent = PaymentIntentLifecycle(kind: kind, state: state)
            let action = intent.lookedUp(lookup)
            switch (state, lookup) {
            case (.pending, .charged), (.closed(uncharged: true), .charged):
                #expect(action == .recordPurchased(reference: "ch") && intent.state == .completed)
            case (.pending, .deferred) where kind == .purchase:
                #expect(action == .recordDeferred && intent.state == .completed)
            case (.pending, _):
                #expect(
                    action == .close(outcome: PaymentIntentLifecycle.closedUncharged)
                        && intent.state == .closed(uncharged: true))
            case (.closed(uncharged: true), _):
                #expect(action == .close(outcome: PaymentIntentLifecycle.closedUncharged + ":confirmed"))
                #expect(intent.state == .closed(uncharged: false))
            default:
                #expect(action == .nothing && intent.state == state)
            }
        }
    }

    @Test("nothing to charge never reaches the processor; an unreadable price is refused")
    func chargePlans() {
        #expect(PaymentIntentLifecycle.plan(for: Money(decimal: "0.00", currency: "USD")) == .nothingToCharge)
        #expect(PaymentIntentLifecycle.plan(for: Money(decimal: "1.255", currency: "KWD")) == .askProcessor)
        #expect(PaymentIntentLifecycle.plan(for: nil) == .invalidAmount)
    }

    @Test("a free trial is refunded in the ledger only; a paid one at the processor")
    func refundPlans() {
        #expect(
            RefundPlan.forTransaction(paymentID: "p", unitPrice: "0.00", currency: "USD", quantity: 1) == .ledgerOnly)
        #expect(RefundPlan.forTransaction(paymentID: "p", unitPrice: "0", currency: "JPY", quantity: 3) == .ledgerOnly)
        #expect(
            RefundPlan.forTransaction(paymentID: nil, unitPrice: "4.99", currency: "USD", quantity: 1) == .ledgerOnly)
        #expect(
            RefundPlan.forTransaction(paymentID: "p", unitPrice: "4.99", currency: "USD", quantity: 1) == .processor)
        #expect(
            RefundPlan.forTransaction(paymentID: "p", unitPrice: "garbage", currency: "USD", quantity: 1) == .processor)
    }
}
