import KioskAPI
import KioskStoreCore

// Renewals that need the buyer: a card issuer may ask the buyer to authenticate an off-session renewal (SCA).
//
// The processor answers `needsAction` with its payment and a client secret; the renewal's intent is closed with
// both (`needs_action:<reference>:<secret>`), the subscription goes to grace or billing retry, and a
// RENEWAL_NEEDS_ACTION event tells the app's back end. The account's subscription status carries the reference
// and the secret (to that account only); the app confirms the payment on the device and calls ConfirmRenewal,
// which records it as a successful retry. Before the next attempt of the period (or its expiry) the engine asks
// the processor what became of the payment: charged → recorded; still waiting → cancelled first, so a period is
// never charged twice and a payment the buyer confirmed is never left unrecorded.
extension Store {
    /// The outcome a resolved payment that needed the buyer leaves on its intent (no longer waiting).
    static let actionEndedPrefix = "needs_action_ended:"

    /// Asks the processor what became of a renewal payment that needed the buyer, and records it: charged → the
    /// renewal (as a successful retry, a duplicate refunded); ended (or cancelled here) → the intent no longer
    /// waits. Waiting changes nothing.
    /// - Throws: ``StoreError`` 14 when the processor does not answer (nothing changes).
    func resolveRenewalAction(
        _ intent: PaymentIntent, reference: String, cancelling: Bool
    ) async throws -> ActionResolution {
        try await locks.withLock(intent.paymentID) {
            // Read again under the lock: ConfirmRenewal or another pass may have resolved it.
            guard let current = try await ledger.offload({ [ledger] in try ledger.intent(id: intent.id) }),
                PaymentIntentLifecycle.pendingAction(of: current) != nil
            else { return .ended }
            let resolution: ActionResolution
            do {
                resolution = try await processorCall("resolve_action") {
                    try await configuration.paymentProcessor.resolveAction(
                        reference: reference, cancelling: cancelling)
                }
            } catch {
                throw StoreError(
                    .processorUnavailable,
                    "the payment processor did not answer about payment \(reference) (\(error)); ask again later")
            }
            switch resolution {
            case .charged(let charged):
                // Recovered from billing retry, the new period starts now, as after a successful retry: the buyer
                // is never billed for days without the entitlement. From grace it follows the old period.
                var recorded = current
                let ledger = self.ledger
                let row = try await ledger.offload {
                    try Self.renewedPeriod(current).flatMap { try ledger.subscription(originalID: $0.originalID) }
                }
                if row?.state == .inBillingRetry { recorded.purchaseMs = max(recorded.purchaseMs, now) }
                try await completeRenewal(recorded, reference: charged, via: "confirmed")
            case .ended:
                let nowMs = now
                try await ledger.write(account: current.accountID) { db in
                    try db.settle(
                        current.id, account: current.accountID, .closed,
                        outcome: "\(Self.actionEndedPrefix)\(reference)", nowMs: nowMs)
                }
            case .waiting:
                break
            }
            return resolution
        }
    }

    /// Renewal payments that wait for the buyer but whose subscription no longer waits on them (bought again, ended,
    /// auto-renew turned off, its period paid another way) are resolved: one the buyer confirmed anyway is recorded,
    /// and refunded as a duplicate when its period is paid; one still unconfirmed is cancelled, so it can never be
    /// charged. Reconciliation runs it; the payment of the period's last attempt of a live subscription is left to
    /// the buyer.
    func resolveOrphanedActions(report: inout ReconcileReport) async throws {
        // Page by page: payments still waiting for their buyer stay at the front and must not hide the rest.
        var cursor: (Int64, String)?
        while true {
            let page = try await ledger.offload { [ledger, cursor] in try ledger.intentsWaitingForBuyer(after: cursor) }
            guard let last = page.last else { break }
            cursor = (last.attemptMs, last.id)
            try await resolveOrphanedActions(page, report: &report)
        }
    }

    private func resolveOrphanedActions(_ waiting: [PaymentIntent], report: inout ReconcileReport) async throws {
        for intent in waiting {
            guard let action = PaymentIntentLifecycle.pendingAction(of: intent) else { continue }
            let ledger = self.ledger
            let row = try await ledger.offload {
                try Self.renewedPeriod(intent).flatMap { try ledger.subscription(originalID: $0.originalID) }
            }
            if let row, row.isLive, row.lastAttemptPaymentID == intent.paymentID { continue }
            do {
                if case .charged = try await resolveRenewalAction(intent, reference: action.reference, cancelling: true)
                {
                    report.charged += 1
                }
            } catch {
                report.left += 1
            }
        }
    }

    /// The renewal attempt of `row`'s period that waits for the buyer, with its payment and client secret.
    func pendingRenewalAction(
        _ row: Subscription
    ) throws -> (
        intent: PaymentIntent, reference: String, clientSecret: String
    )? {
        guard let last = row.lastAttemptPaymentID,
            let intent = try ledger.intent(id: "\(PaymentIntent.Kind.renewal.rawValue):\(last)"),
            let action = PaymentIntentLifecycle.pendingAction(of: intent)
        else { return nil }
        return (intent, action.reference, action.clientSecret)
    }

    /// The buyer confirmed a renewal that needed them (``StoreV1/SubscriptionStatus/actionClientSecret``): the
    /// processor is asked, and a charged payment is recorded as a successful retry.
    /// - Throws: ``StoreError`` 5 for a subscription not the account's; 9 when none of its renewals waits for the
    ///   buyer, or the payment is not confirmed yet, or it can no longer be; 14 when the processor does not answer.
    public func confirmRenewal(account: AccountRecord, originalID: String) async throws -> StoreV1.SubscriptionStatus {
        guard !originalID.isEmpty else { throw StoreError.invalid("original_transaction_id is required") }
        let ledger = self.ledger
        guard let row = try await ledger.offload({ try ledger.subscription(originalID: originalID) }),
            row.accountID == account.id
        else {
            throw StoreError.notFound("no auto-renewable subscription \(originalID) for this account")
        }
        guard let pending = try await ledger.offload({ try self.pendingRenewalAction(row) }) else {
            throw StoreError(.conflict, "no renewal of subscription \(originalID) waits for the buyer to confirm it")
        }
        let resolution = try await resolveRenewalAction(
            pending.intent, reference: pending.reference, cancelling: false)
        guard let updated = try await ledger.offload({ try ledger.subscription(originalID: originalID) }) else {
            throw StoreError.notFound("no auto-renewable subscription \(originalID) for this account")
        }
        // Recorded here, or by a concurrent confirmation or renewal pass: the period is paid.
        guard updated.periodsPaid > row.periodsPaid else {
            switch resolution {
            case .waiting:
                throw StoreError(
                    .conflict,
                    "payment \(pending.reference) is not confirmed yet: the buyer confirms it with the client secret first"
                )
            case .charged, .ended:
                throw StoreError(
                    .conflict,
                    "payment \(pending.reference) can no longer be confirmed; the next billing retry charges the saved method"
                )
            }
        }
        return try await ledger.offload { try self.statusMessage(updated, forAccount: true) }
    }
}
