import Foundation
import KioskStoreCore
import KioskStoreIntegrations
import Logging

// Money that moves at Stripe without Kiosk: Stripe's webhooks (``StripeWebhookServer``).
//
// A delivery is taken only with a valid `Stripe-Signature` (``StripeWebhookVerifier``); each event id is acted on
// once (the ledger's `processor_events`), and every action is one Kiosk would take anyway, so a delivery repeated,
// late or out of order changes nothing more:
// - `charge.refunded` (in full): the transaction is refunded as `kiosk-store refund` refunds it (REFUNDED, content
//   refused, credits taken back, shortfall recorded); Stripe answers the refund as already made.
// - `charge.dispute.created`: the transaction is revoked without a refund (Stripe takes the money back through the
//   dispute; a disputed charge cannot be refunded), with a DISPUTED event.
// - `charge.dispute.closed`: lost → it stays revoked (or is revoked now, when the closing came first); won → what
//   this dispute revoked is restored (REFUND_REVERSED), unless restoring it would give the buyer a second copy.
//   Each dispute's state is kept by its id (`disputes`), read and written in the account's write, so its events act
//   right in any order and at the same time.
// - `payment_intent.succeeded` / `payment_failed`: a payment Kiosk has pending is settled now, not at the next
//   reconciliation; a renewal waiting for the buyer is recorded once they confirmed it.
extension Store {
    /// What the webhook endpoint answers Stripe.
    public struct WebhookAnswer: Hashable, Sendable {
        /// The HTTP status: 200 handled or ignored, 400 refused, 503 not handled now (Stripe sends it again).
        public var status: Int
        /// Why, in words.
        public var message: String
    }

    /// Checks and acts on one delivery of Stripe's webhooks.
    public func receiveStripeEvent(signature: String?, body: [UInt8]) async -> WebhookAnswer {
        let verifier = StripeWebhookVerifier(
            secrets: configuration.stripeWebhookSecrets, tolerance: configuration.stripeWebhookTolerance)
        guard !verifier.secrets.isEmpty else {
            return WebhookAnswer(status: 400, message: "refused: no Stripe webhook signing secret is configured")
        }
        do {
            // Stripe signs with the real time, whatever clock the store runs on.
            _ = try verifier.verify(payload: body, header: signature, nowSeconds: Int64(Date().timeIntervalSince1970))
        } catch {
            return WebhookAnswer(status: 400, message: "refused: \(error)")
        }
        guard let notice = StripeNotice.parse(body) else {
            return WebhookAnswer(status: 400, message: "refused: not a Stripe event (id, type, data.object)")
        }
        do {
            if let done = try await ledger.processorEventOutcome(id: notice.eventID) {
                return WebhookAnswer(status: 200, message: "\(notice.eventID) was handled already: \(done)")
            }
            let outcome = try await act(on: notice)
            let nowMs = now
            _ = try await ledger.write { db in
                try db.recordProcessorEvent(id: notice.eventID, type: notice.type, outcome: outcome, nowMs: nowMs)
            }
            logger.info(
                "stripe event",
                metadata: ["event_id": "\(notice.eventID)", "type": "\(notice.type)", "outcome": "\(outcome)"])
            return WebhookAnswer(status: 200, message: outcome)
        } catch {
            logger.warning(
                "stripe event not handled now", metadata: ["event_id": "\(notice.eventID)", "error": "\(error)"])
            return WebhookAnswer(status: 503, message: "\(notice.eventID) not handled now (\(error)); send it again")
        }
    }

    private func act(on notice: StripeNotice) async throws -> String {
        switch notice.kind {
        case .ignored:
            return "ignored: \(notice.type)"
        case .refunded(let fully):
            guard fully else { return "partly refunded at Stripe: nothing revoked" }
            guard let record = try await transaction(for: notice) else { return try await noPayment(notice) }
            guard record.state == .purchased else { return "\(record.id) is not purchased: nothing to revoke" }
            guard record.revokedMs == 0 else { return try await refundedWhileRevoked(record) }
            do {
                _ = try await refund(transactionID: record.id, reason: "refunded at Stripe")
            } catch let error as StoreError where error.kind == .conflict {
                // Refunded meanwhile (a concurrent delivery, an operator): done. Anything else is retried by Stripe.
                guard try await ledger.transaction(paymentID: record.paymentID ?? "")?.revokedMs != 0 else {
                    throw error
                }
                return "\(record.id) was refunded already"
            }
            return "refunded \(record.id)"
        case .disputeOpened(let reason):
            guard let dispute = notice.dispute else { return "a dispute event without a dispute id: ignored" }
            guard let record = try await transaction(for: notice) else { return try await noPayment(notice) }
            return try await refusingMismatch {
                try await disputeOpened(dispute, transactionID: record.id, reason: reason)
            }
        case .disputeClosed(let won):
            guard let dispute = notice.dispute else { return "a dispute event without a dispute id: ignored" }
            guard let record = try await transaction(for: notice) else { return try await noPayment(notice) }
            return try await refusingMismatch { try await disputeClosed(dispute, transactionID: record.id, won: won) }
        case .paymentSucceeded, .paymentFailed:
            return try await settleFromProcessor(notice)
        }
    }

    /// The buyer's bank opened dispute `disputeID` of the transaction's payment: revoked without a refund (REFUNDED
    /// and DISPUTED), as Stripe's `charge.dispute.created` does it. A transaction revoked already (a refund, another
    /// dispute) is left as it is; a dispute closed already (its closing came first) changes nothing. Answers what was
    /// done, in words.
    /// - Throws: ``StoreError`` notFound for an unknown transaction, conflict when `disputeID` is known for another
    ///   transaction; a ledger failure.
    public func disputeOpened(_ disputeID: String, transactionID: String, reason: String) async throws -> String {
        let record = try await disputedTransaction(transactionID)
        let nowMs = now
        let outcome: String = try await ledger.write(account: record.accountID) { db in
            if let known = try db.dispute(id: disputeID) {
                try Self.requireSameTransaction(known, record.id)
                return "dispute \(disputeID) is \(known.state.rawValue) already: nothing more"
            }
            guard let current = try db.transaction(id: record.id), current.state == .purchased else {
                return "\(record.id) is not purchased: nothing to revoke"
            }
            let revokes = current.revokedMs == 0
            if revokes {
                _ = try db.revoke(transactionID: record.id, reason: "disputed: \(reason)", nowMs: nowMs)
                try db.appendEvent(EventRecord(.disputed, current, nowMs: nowMs, reason: reason))
            }
            try db.saveDispute(
                Dispute(
                    id: disputeID, transactionID: record.id, state: .open, revokedTransaction: revokes,
                    updatedMs: nowMs))
            return revokes
                ? "revoked \(record.id): disputed (\(reason))" : "\(record.id) was revoked already: dispute recorded"
        }
        feed.noteWritten()
        return outcome
    }

    /// Dispute `disputeID` closed.
    ///
    /// Lost (the money went back): the transaction stays revoked, or is revoked now when it counts (the closing came
    /// before the opening, or a dispute won before it restored it).
    ///
    /// Won (the money stays): the transaction counts again (REFUND_REVERSED; the content service serves it again)
    /// when a dispute revoked it and every other dispute of its payment was won too. It stays revoked when a refund
    /// revoked it, while another dispute of the payment is open or lost, or when restoring it would give the buyer
    /// a second copy of what they bought again meanwhile (the product, another live subscription of its group, a
    /// subscription period that overlaps it): then the operator decides. Answers what was done, in words.
    /// - Throws: ``StoreError`` notFound for an unknown transaction, conflict when `disputeID` is known for another
    ///   transaction; a ledger failure.
    public func disputeClosed(_ disputeID: String, transactionID: String, won: Bool) async throws -> String {
        let record = try await disputedTransaction(transactionID)
        let nowMs = now
        let members = rules.groupMembers(of: record.productID)
        let outcome: String = try await ledger.write(account: record.accountID) { db in
            let known = try db.dispute(id: disputeID)
            if let known {
                try Self.requireSameTransaction(known, record.id)
                guard known.state == .open else {
                    return "dispute \(disputeID) is \(known.state.rawValue) already: nothing more"
                }
            }
            var dispute =
                known
                ?? Dispute(
                    id: disputeID, transactionID: record.id, state: .open, revokedTransaction: false, updatedMs: 0)
            dispute.state = won ? .won : .lost
            dispute.updatedMs = nowMs
            guard let current = try db.transaction(id: record.id), current.state == .purchased else {
                try db.saveDispute(dispute)
                return "dispute \(disputeID) \(dispute.state.rawValue): \(record.id) is not purchased"
            }
            guard won else {
                // The money went back, so the transaction goes too, whatever came before.
                guard current.revokedMs == 0 else {
                    try db.saveDispute(dispute)
                    return "dispute \(disputeID) lost: \(current.id) stays revoked"
                }
                _ = try db.revoke(transactionID: current.id, reason: "disputed: lost", nowMs: nowMs)
                try db.appendEvent(EventRecord(.disputed, current, nowMs: nowMs, reason: "lost"))
                dispute.revokedTransaction = true
                try db.saveDispute(dispute)
                return "dispute \(disputeID) lost: revoked \(current.id)"
            }
            try db.saveDispute(dispute)
            let all = try db.disputes(transactionID: current.id)
            guard current.revokedMs != 0, all.contains(where: \.revokedTransaction) else {
                return "dispute \(disputeID) won: no dispute revoked \(current.id); nothing to restore"
            }
            if let other = all.first(where: { $0.state != .won }) {
                return
                    "dispute \(disputeID) won, but dispute \(other.id) is \(other.state.rawValue): \(current.id) stays revoked"
            }
            if let second = try Self.secondCopy(of: current, in: db, groupMembers: members, nowMs: nowMs) {
                return "dispute \(disputeID) won, but \(second): \(current.id) stays revoked"
            }
            _ = try db.reinstate(transactionID: current.id, reason: "dispute won", nowMs: nowMs)
            // Its disputes hold no revocation now: a later refund is not undone by a later dispute won.
            for var settled in all where settled.revokedTransaction {
                settled.revokedTransaction = false
                settled.updatedMs = nowMs
                try db.saveDispute(settled)
            }
            if var subscription = try db.subscription(originalID: current.originalID),
                subscription.latestTransactionID == current.id, subscription.reinstated(atMs: nowMs)
            {
                try db.saveSubscription(subscription, nowMs: nowMs)
                // Restored into a period already over: it ended, as any subscription turned off ends.
                if subscription.state == .expired {
                    try db.appendEvent(
                        EventRecord(
                            type: .expired, accountID: current.accountID, transactionID: current.id,
                            originalTransactionID: current.originalID, productID: current.productID, createdMs: nowMs,
                            expirationReason: subscription.expirationReason))
                }
            }
            return "dispute \(disputeID) won: restored \(current.id)"
        }
        feed.noteWritten()
        return outcome
    }

    /// The disputes of a transaction, as the store followed them (several when its payment was disputed again).
    public func disputes(transactionID: String) async throws -> [Dispute] {
        try await ledger.disputes(transactionID: transactionID)
    }

    private static func requireSameTransaction(_ dispute: Dispute, _ transactionID: String) throws {
        guard dispute.transactionID == transactionID else {
            throw StoreError(
                .conflict,
                "dispute \(dispute.id) is about transaction \(dispute.transactionID), not \(transactionID): nothing done"
            )
        }
    }

    /// What the buyer bought again while `revoked` was revoked, that restoring it would duplicate now: a live copy
    /// of the non-consumable, or, while its paid period runs, another live subscription of its group or a later
    /// period of its subscription that overlaps it. Nil when restoring gives nothing twice (a subscription period
    /// already over restores only its history).
    private static func secondCopy(
        of revoked: TransactionRecord, in db: any StoreRepositories, groupMembers: [String], nowMs: Int64
    ) throws -> String? {
        switch revoked.productType {
        case .nonConsumable:
            if let other = try db.owned(
                accountID: revoked.accountID, productID: revoked.productID, kind: .nonConsumable, nowMs: nowMs)
            {
                return "\(other.id) bought it again"
            }
        case .autoRenewableSubscription:
            guard revoked.expiresMs > nowMs else { return nil }
            let group = groupMembers.isEmpty ? [revoked.productID] : groupMembers
            if let other = try db.subscriptions(accountID: revoked.accountID, productIDs: group).first(where: {
                $0.isLive && $0.originalID != revoked.originalID
            }) {
                return "subscription \(other.originalID) was bought"
            }
            // A resubscription keeps the original id: a later period that starts before this one ends was paid
            // for the same time.
            if let subscription = try db.subscription(originalID: revoked.originalID),
                subscription.latestTransactionID != revoked.id,
                let latest = try db.transaction(id: subscription.latestTransactionID), latest.revokedMs == 0,
                latest.periodStartMs < revoked.expiresMs
            {
                return "\(latest.id) paid for the same time"
            }
        default:
            break
        }
        return nil
    }

    /// A refund made at Stripe of a transaction already revoked (by a dispute, or by a refund): it stays revoked
    /// whatever any dispute of it ends as, since the money went back; so its disputes stop holding the revocation,
    /// and a dispute won later restores nothing.
    private func refundedWhileRevoked(_ record: TransactionRecord) async throws -> String {
        let nowMs = now
        return try await ledger.write(account: record.accountID) { db in
            var released = 0
            for var dispute in try db.disputes(transactionID: record.id) where dispute.revokedTransaction {
                dispute.revokedTransaction = false
                dispute.updatedMs = nowMs
                try db.saveDispute(dispute)
                released += 1
            }
            return released > 0
                ? "\(record.id) was revoked by a dispute and is now refunded at Stripe: it stays revoked"
                : "\(record.id) was refunded already"
        }
    }

    /// A dispute id Stripe names for another charge than Kiosk followed it for changes nothing; Stripe is answered
    /// 200 (sending it again would not change it), with the refusal as the outcome.
    private func refusingMismatch(_ act: () async throws -> String) async throws -> String {
        do {
            return try await act()
        } catch let error as StoreError where error.kind == .conflict {
            return "refused: \(error.message)"
        }
    }

    private func disputedTransaction(_ transactionID: String) async throws -> TransactionRecord {
        guard let record = try await ledger.offload({ [ledger] in try ledger.transaction(id: transactionID) }) else {
            throw StoreError(.notFound, "no transaction \(transactionID)")
        }
        return record
    }

    /// No transaction for the object: ignored, unless Kiosk still has its payment pending (its answer was lost),
    /// which reconciliation would record later: then the delivery is refused for now, and Stripe sends it again.
    private func noPayment(_ notice: StripeNotice) async throws -> String {
        var paymentID = notice.paymentID
        if paymentID == nil, let intent = notice.paymentIntent,
            let stripe = configuration.paymentProcessor as? StripePaymentProcessor
        {
            paymentID = try await stripe.paymentID(ofPaymentIntent: intent)
        }
        if let paymentID {
            for kind in [PaymentIntent.Kind.purchase, .approval, .renewal] {
                let id = "\(kind.rawValue):\(paymentID)"
                if try await ledger.offload({ [ledger] in try ledger.intent(id: id) })?.state == .pending {
                    throw StoreError(
                        .processorUnavailable,
                        "payment \(paymentID) is still pending in Kiosk: send the event again later")
                }
            }
        }
        return "no Kiosk transaction for \(notice.paymentIntent ?? "the object"): ignored"
    }

    /// The Kiosk transaction a Stripe object is about: by the payment id in its metadata, else by its
    /// PaymentIntent's (asked of Stripe).
    private func transaction(for notice: StripeNotice) async throws -> TransactionRecord? {
        var paymentID = notice.paymentID
        if paymentID == nil, let intent = notice.paymentIntent,
            let stripe = configuration.paymentProcessor as? StripePaymentProcessor
        {
            paymentID = try await stripe.paymentID(ofPaymentIntent: intent)
        }
        guard let paymentID else { return nil }
        return try await ledger.transaction(paymentID: paymentID)
    }

    /// A PaymentIntent that succeeded or failed, for a Kiosk payment still pending: succeeded (Stripe's signed
    /// word) → recorded now, as reconciliation would record it; failed → settled with the processor once the
    /// process that was paying it is gone (a live one records the decline itself). A renewal waiting for the buyer
    /// is recorded once they confirmed it.
    private func settleFromProcessor(_ notice: StripeNotice) async throws -> String {
        guard let paymentID = notice.paymentID, let reference = notice.paymentIntent else {
            return try await noPayment(notice)
        }
        var settled: [String] = []
        for kind in [PaymentIntent.Kind.purchase, .approval, .renewal] {
            let id = "\(kind.rawValue):\(paymentID)"
            guard let intent = try await ledger.offload({ [ledger] in try ledger.intent(id: id) }) else { continue }
            if let action = PaymentIntentLifecycle.pendingAction(of: intent), action.reference == reference {
                if notice.kind == .paymentSucceeded {
                    _ = try await resolveRenewalAction(intent, reference: reference, cancelling: false)
                    settled.append("\(id) confirmed by the buyer, recorded")
                }
                continue
            }
            guard intent.state == .pending else { continue }
            if notice.kind == .paymentSucceeded {
                try await locks.withLock(intent.paymentID) {
                    guard let current = try await ledger.offload({ [ledger] in try ledger.intent(id: id) }),
                        current.state == .pending
                    else { return }
                    try await recordCharged(
                        current, reference: reference, savedMethod: notice.savedMethod, via: "stripe-event")
                }
                settled.append("\(id) recorded")
            } else if !instance.isAlive(intent.owner) {
                var report = ReconcileReport()
                try await settle(intent, report: &report)
                settled.append("\(id) settled")
            }
        }
        return settled.isEmpty ? "nothing pending for \(paymentID)" : settled.joined(separator: ", ")
    }
}
