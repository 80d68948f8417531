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
                resolution = try await configuration.paymentProcessor.resolveAction(
                    reference: reference, cancelling: cancelling)
            } catch {
                throw StoreError(
                    .processorUnavailable,
                    "the payment processor did not answer about payment \(reference) (\(error)); ask again later")
            }
            switch resolution {
            case .charged(let charged):
                try await completeRenewal(current, reference: charged, via: "confirmed")
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
