import Foundation
import KioskStoreCore
import KioskStoreIntegrations

// Money that moves at Stripe without Kiosk: Stripe's webhooks (``StripeWebhookServer``).
//
// A delivery is taken only with a valid `Stripe-Signature` (``StripeWebhookVerifier``); each event id is acted on
// once (the ledger's `processor_events`), and every action is one Kiosk would take anyway, so a delivery repeated,
// late or out of order changes nothing more:
// - `charge.refunded` (in full): the transaction is refunded as `kiosk-store refund` refunds it (REFUNDED, content
//   refused, credits taken back, shortfall recorded); Stripe answers the refund as already made.
// - `charge.dispute.created`: the transaction is revoked without a refund (Stripe takes the money back through the
//   dispute; a disputed charge cannot be refunded), with a DISPUTED event.
// - `charge.dispute.closed`: lost → it stays revoked; won → restored (REFUND_REVERSED), unless bought again since.
//   A closing that arrives before its opening is remembered by dispute id: the opening then revokes nothing.
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
                try db.recordProcessorEvent(
                    id: notice.eventID, type: notice.type, subject: notice.dispute ?? notice.paymentIntent ?? "",
                    outcome: outcome, nowMs: nowMs)
            }
            return WebhookAnswer(status: 200, message: outcome)
        } catch {
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
            guard record.revokedMs == 0 else { return "\(record.id) was refunded already" }
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
            // Its closing came first (deliveries are not ordered): the dispute is over; nothing to revoke.
            if let dispute = notice.dispute,
                try await ledger.processorEventHandled(type: "charge.dispute.closed", subject: dispute)
            {
                return "dispute \(dispute) was closed already: nothing revoked"
            }
            guard let record = try await transaction(for: notice) else { return try await noPayment(notice) }
            return try await revokeForDispute(transactionID: record.id, reason: reason)
        case .disputeClosed(let won):
            guard let record = try await transaction(for: notice) else { return try await noPayment(notice) }
            guard won else { return "dispute of \(record.id) lost: it stays revoked" }
            return try await restoreAfterWonDispute(transactionID: record.id)
        case .paymentSucceeded, .paymentFailed:
            return try await settleFromProcessor(notice)
        }
    }

    /// The buyer's bank opened a dispute of the transaction's payment: revoked without a refund (REFUNDED and
    /// DISPUTED), as Stripe's `charge.dispute.created` does it. Answers what was done, in words.
    /// - Throws: ``StoreError`` notFound for an unknown transaction; a ledger failure.
    public func revokeForDispute(transactionID: String, reason: String) async throws -> String {
        guard let record = try await ledger.offload({ [ledger] in try ledger.transaction(id: transactionID) }) else {
            throw StoreError(.notFound, "no transaction \(transactionID)")
        }
        guard record.state == .purchased else { return "\(record.id) is not purchased: nothing to revoke" }
        guard record.revokedMs == 0 else { return "\(record.id) was revoked already" }
        let nowMs = now
        let revoked: Bool = try await ledger.write(account: record.accountID) { db in
            guard let current = try db.transaction(id: record.id), current.state == .purchased,
                current.revokedMs == 0
            else { return false }
            _ = try db.revoke(transactionID: record.id, reason: "disputed: \(reason)", nowMs: nowMs)
            try db.appendEvent(EventRecord(.disputed, current, nowMs: nowMs, reason: reason))
            return true
        }
        feed.noteWritten()
        return revoked ? "revoked \(record.id): disputed (\(reason))" : "\(record.id) was revoked already"
    }

    /// A dispute the merchant won: the money stays, so the transaction the dispute revoked counts again
    /// (REFUND_REVERSED; the content service serves it again), unless the buyer has bought the product, or another
    /// subscription of its group, since: then it stays revoked, and the operator decides (the buyer paid twice).
    /// A transaction revoked by a refund, or not revoked (the dispute's opening not seen yet), is left alone.
    /// Answers what was done, in words.
    /// - Throws: ``StoreError`` notFound for an unknown transaction; a ledger failure.
    public func restoreAfterWonDispute(transactionID: String) async throws -> String {
        guard let record = try await ledger.offload({ [ledger] in try ledger.transaction(id: transactionID) }) else {
            throw StoreError(.notFound, "no transaction \(transactionID)")
        }
        let nowMs = now
        let members = rules.groupMembers(of: record.productID)
        let outcome: String = try await ledger.write(account: record.accountID) { db in
            guard let current = try db.transaction(id: record.id), current.state == .purchased else {
                return "dispute of \(record.id) won: it is not purchased"
            }
            guard current.revokedMs != 0, current.revocationReason.hasPrefix("disputed") else {
                return "dispute of \(record.id) won: it was not revoked by the dispute; nothing to restore"
            }
            var subscription = try db.subscription(originalID: current.originalID)
            if subscription?.latestTransactionID != current.id { subscription = nil }
            switch current.productType {
            case .nonConsumable:
                if let other = try db.owned(
                    accountID: current.accountID, productID: current.productID, kind: .nonConsumable, nowMs: nowMs)
                {
                    return "dispute of \(record.id) won, but \(other.id) bought it again since: it stays revoked"
                }
            case .autoRenewableSubscription where subscription?.state == .revoked:
                let group = members.isEmpty ? [current.productID] : members
                if let other = try db.subscriptions(accountID: current.accountID, productIDs: group).first(where: {
                    $0.isLive && $0.originalID != current.originalID
                }) {
                    return
                        "dispute of \(record.id) won, but subscription \(other.originalID) was bought since: it stays revoked"
                }
            default:
                break
            }
            _ = try db.reinstate(transactionID: current.id, reason: "dispute won", nowMs: nowMs)
            if var subscription, subscription.reinstated(atMs: nowMs) {
                try db.saveSubscription(subscription, nowMs: nowMs)
            }
            return "dispute of \(record.id) won: restored"
        }
        feed.noteWritten()
        return outcome
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
