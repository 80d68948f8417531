import Crypto
import Foundation
import KioskAPI
import KioskSigning
import KioskStoreCore

// Auto-renewable subscriptions: the renewal engine, states and reasons, auto-renew, status.
//
// Every renewal is a payment like a purchase: a durable intent first (its payment id derived from
// the original transaction, the period and the attempt, so however many store processes look at a
// due subscription, a period is charged at most once), then the processor, then one write that
// records the new transaction (same original id, signed receipt, unfinished: the SDK delivers it on
// transactionUpdates) and moves the subscription's row. A declined renewal moves the row instead:
// ACTIVE → IN_GRACE_PERIOD (entitlement kept, when the product has a grace period) → IN_BILLING_RETRY
// (no entitlement) → EXPIRED with reason BILLING_ERROR when the billing retry period ends; a retry that
// succeeds on the way recovers the same subscription.
extension Store {
    /// What one pass of the renewal engine did.
    public struct RenewalReport: Hashable, Sendable {
        /// Renewals charged and recorded (each a new transaction).
        public var renewed = 0
        /// Renewal payments declined (the subscription entered or stayed in grace or billing retry).
        public var failed = 0
        /// Subscriptions that expired (auto-renew off, billing retry over, product gone).
        public var expired = 0
        /// Left for a later pass: being renewed by another store process, or the processor did not answer.
        public var left = 0
        /// Entitlements whose time ran out, recorded after the renewals (``Store/settleEndingEntitlements()``).
        public var entitlementsEnded = 0
    }

    /// How late past a period's end a renewal may be and still start when the period ended: three renewal passes
    /// (at least a minute), in the store's time scale.
    static func renewalLatenessMs(_ interval: Duration, timeScale: Double) -> Int64 {
        max(interval.wholeMilliseconds * 3, Int64((60_000 / timeScale).rounded()))
    }

    /// Charges every renewal that is due by the store's clock and moves failed and cancelled subscriptions on;
    /// a serving store runs it every ``StoreConfiguration/renewalInterval``. A subscription several periods
    /// behind (a clock advanced far) is renewed once per period, each its own charge.
    @discardableResult
    public func renewDueSubscriptions() async throws -> RenewalReport {
        var report = RenewalReport()
        var skipped: Set<String> = []
        // Sweeps through the due rows a page at a time (a cursor, so rows set aside never hide the rest); a row
        // renewed but still due (a clock far ahead) comes again in the next sweep. Bounded: each step moves a row's
        // due time forward, ends it, or sets it aside for this pass.
        var cursor: (Int64, String)?
        var movedInSweep = false
        for _ in 0..<10_000 {
            let nowMs = now
            let page = try await ledger.offload { [ledger, cursor] in
                try ledger.dueSubscriptions(atMs: nowMs, after: cursor)
            }
            guard let last = page.last else {
                guard movedInSweep else { break }
                cursor = nil
                movedInSweep = false
                continue
            }
            cursor = (last.dueMs, last.originalID)
            for row in page where !skipped.contains(row.originalID) {
                do {
                    if try await renew(row, report: &report) {
                        movedInSweep = true
                    } else {
                        skipped.insert(row.originalID)
                    }
                } catch {
                    report.left += 1
                    skipped.insert(row.originalID)
                }
            }
        }
        report.entitlementsEnded = try await settleEndingEntitlements()
        return report
    }

    private enum RenewalStep {
        case nothing
        case expired
        case inProgress
        /// Charge the intent; `customer`: the account's customer at a processor that keeps customers.
        case charge(PaymentIntent, customer: String?)
        /// The period's last attempt waits for the buyer to confirm it: ask what became of it (and cancel it if it
        /// still waits) before anything else, so a period is never charged twice nor a confirmed payment left out.
        case resolveAction(PaymentIntent, reference: String)
    }

    /// One step for one due subscription; false when it is left for a later pass.
    private func renew(_ due: SubscriptionRecord, report: inout RenewalReport) async throws -> Bool {
        let nowMs = now
        let instance = self.instance
        let catalog = self.catalog
        let lateness = Self.renewalLatenessMs(configuration.renewalInterval, timeScale: timeScale)
        let catchUp = configuration.catchUpRenewals
        let step = try await ledger.write(account: due.accountID) { db -> RenewalStep in
            guard var row = try db.subscription(originalID: due.originalID) else { return .nothing }
            let terms = self.rules.renewalTerms(row)
            // Past periods are never billed, unless the store catches up period by period
            // (``StoreConfiguration/catchUpRenewals``: a test's driven clock).
            let start: Int64
            let decision = row.renewalDue(atMs: nowMs, terms: terms, latenessMs: catchUp ? nil : lateness)
            if decision != .nothing, let last = row.lastAttemptPaymentID,
                let previous = try db.intent(id: "\(PaymentIntent.Kind.renewal.rawValue):\(last)"),
                let action = PaymentIntentLifecycle.pendingAction(of: previous)
            {
                return .resolveAction(previous, reference: action.reference)
            }
            switch decision {
            case .nothing:
                return .nothing
            case .expire:
                try db.saveSubscription(row, nowMs: nowMs)
                return .expired
            case .charge(_, let periodStartMs):
                start = periodStartMs
            }
            guard let terms, let product = catalog.product(terms.productID) else { return .nothing }
            let saved = try self.renewalMethod(for: row, db)
            if let earlier = try db.intent(id: "\(PaymentIntent.Kind.renewal.rawValue):\(row.renewalPaymentID)") {
                switch earlier.state {
                case .pending where earlier.owner == instance.id:
                    // Asked before without an answer: ask again under the same payment id (the processor deduplicates),
                    // leaving its attempt time alone so reconciliation still settles it if the processor stays silent.
                    return .charge(earlier, customer: saved.customer)
                case .pending:
                    if instance.isAlive(earlier.owner, db) { return .inProgress }
                    return .charge(try db.reopen(earlier, owner: instance.id, nowMs: nowMs), customer: saved.customer)
                case .completed:
                    return .nothing
                case .closed:
                    // Closed uncharged by reconciliation (a processor whose lookup may lag): ask again under the
                    // same payment id, never a new one, so a charge the lookup missed is not made twice.
                    return .charge(try db.reopen(earlier, owner: instance.id, nowMs: nowMs), customer: saved.customer)
                }
            }
            // A purchase in the group (an upgrade, a resubscription) is being paid: it decides; look again next pass.
            if try self.rules.groupPaymentInFlight(db, accountID: row.accountID, productID: product.id) {
                return .inProgress
            }
            var intent = PaymentIntent(
                kind: .renewal, paymentID: row.renewalPaymentID, transactionID: Store.newTransactionID(),
                accountID: row.accountID,
                product: product, quantity: 1, unitPrice: terms.price, currency: terms.currency,
                paymentMethod: saved.method,
                purchaseMs: start, idempotencyKey: nil, requestHash: [], owner: instance.id)
            intent.subscriptionPeriod = terms.period.description
            intent.offerID = terms.offerID
            intent.storefront = catalog.storefront(row.storefront)
            intent.createdMs = nowMs
            intent.attemptMs = nowMs
            try db.insertIntent(intent, nowMs: nowMs)
            return .charge(intent, customer: saved.customer)
        }
        switch step {
        case .nothing:
            return false
        case .expired:
            report.expired += 1
            return true
        case .inProgress:
            report.left += 1
            return false
        case .resolveAction(let previous, let reference):
            switch try await resolveRenewalAction(previous, reference: reference, cancelling: true) {
            case .charged:
                report.renewed += 1
                return true
            case .ended:
                return true
            case .waiting:
                report.left += 1
                return false
            }
        case .charge(let intent, let customer):
            var request = intent.request
            request.customer = customer
            // A processor that keeps customers is never sent a renewal without a saved method: it would refuse a
            // method not saved for off-session use, and the buyer is not there to confirm one.
            let unsaved =
                configuration.paymentProcessor.keepsCustomers && (customer == nil || intent.paymentMethod.isEmpty)
                && PaymentIntentLifecycle.plan(for: request.amount) != .nothingToCharge
            enum Charged: Sendable { case renewed, failed, unknown }
            let charged = try await locks.withLock(intent.paymentID) { () async throws -> Charged in
                let outcome: PaymentOutcome
                do {
                    // First tried longer ago than the processor keeps idempotency keys: ask, never charge blindly.
                    if intent.createdMs < now - Self.processorKeyLifetimeMs,
                        case .charged(let reference, _) = try await processorLookup(intent.request)
                    {
                        try await completeRenewal(intent, reference: reference, via: "lookup")
                        return .renewed
                    }
                    outcome =
                        unsaved
                        ? .declined(
                            reason: Self.methodNotSavedReason,
                            message: "no payment method is saved for renewals; the buyer saves one (SetPaymentMethod)")
                        : try await processorCharge(request)
                } catch {
                    // Unknown: the intent stays pending; the next pass asks again with the same payment id, or reconciliation settles it.
                    return .unknown
                }
                // The intent's lifecycle says what the answer means: a renewal is recorded or closed, never deferred.
                var lifecycle = PaymentIntentLifecycle(kind: .renewal)
                switch lifecycle.processorAnswered(outcome) {
                case .recordPurchased(let reference):
                    try await completeRenewal(intent, reference: reference)
                    return .renewed
                case .close(let closing):
                    try await renewalFailed(intent, outcome: closing)
                    if closing == "declined:\(PaymentOutcome.customerMissingReason)", let customer {
                        try await forgetCustomer(accountID: intent.accountID, customerID: customer)
                    }
                    return .failed
                case .nothing, .recordDeferred, .recordFailed, .keepPending:
                    return .unknown
                }
            }
            switch charged {
            case .renewed: report.renewed += 1
            case .failed: report.failed += 1
            case .unknown: report.left += 1
            }
            return charged != .unknown
        }
    }

    /// The original transaction and the period (periods paid before it) a renewal intent pays for.
    static func renewedPeriod(_ intent: PaymentIntent) -> (originalID: String, period: Int)? {
        // renew_<original>_<period>_<attempt>
        let parts = intent.paymentID.split(separator: "_")
        guard parts.count >= 4, parts.first == "renew", let period = Int(parts[parts.count - 2]) else { return nil }
        return (parts[1..<(parts.count - 2)].joined(separator: "_"), period)
    }

    /// The subscription a renewal intent pays for, and whether the intent is for the period it is renewing now.
    private static func renewedSubscription(
        _ intent: PaymentIntent, _ db: any StoreRepositories
    ) throws -> (SubscriptionRecord, current: Bool)? {
        guard let (originalID, period) = renewedPeriod(intent),
            let row = try db.subscription(originalID: originalID)
        else { return nil }
        return (row, row.isLive && row.periodsPaid == period)
    }

    /// One write: the renewal's transaction (same original id, signed, unfinished), the subscription ACTIVE for
    /// the new period, the intent completed. A charge for a period already paid (another way) is refunded.
    func completeRenewal(_ intent: PaymentIntent, reference: String, via: String? = nil) async throws {
        let label = (via.map { "\($0):" } ?? "") + "charged:\(reference)"
        let nowMs = now
        let signer = try keys.activeKey()
        let refundDue = try await ledger.write(account: intent.accountID) { db -> Bool in
            if try db.transaction(paymentID: intent.paymentID) != nil {
                try db.settle(intent.id, account: intent.accountID, .completed, outcome: label, nowMs: nowMs)
                return false
            }
            guard let (row, current) = try Self.renewedSubscription(intent, db), current else {
                try db.settle(
                    intent.id, account: intent.accountID, .closed, outcome: "\(Self.refundDuePrefix)\(reference)",
                    nowMs: nowMs)
                return true
            }
            let record = try self.purchasedRecord(
                intent, db, signer: signer, renewing: (row.originalID, intent.purchaseMs))
            try db.insertTransaction(record, event: .renewed)
            // The regular price the renewal was charged, which the lifecycle agreed to only where it needed no consent.
            try SubscriptionRules.paid(
                record, regularPrice: intent.offerID.isEmpty ? intent.unitPrice : nil, renewal: true, nowMs: nowMs, db)
            try db.settle(intent.id, account: intent.accountID, .completed, outcome: label, nowMs: nowMs)
            return false
        }
        if refundDue { await refundDuplicate(intent) }
    }

    /// One write: the intent closed, the subscription into grace or billing retry (or expired when the
    /// retry period is over), the next attempt scheduled.
    private func renewalFailed(_ intent: PaymentIntent, outcome: String) async throws {
        let nowMs = now
        let scale = timeScale
        let catalog = self.catalog
        try await ledger.write(account: intent.accountID) { db in
            try db.settle(intent.id, account: intent.accountID, .closed, outcome: outcome, nowMs: nowMs)
            guard let (found, current) = try Self.renewedSubscription(intent, db), current else { return }
            if outcome.hasPrefix(PaymentIntentLifecycle.needsActionPrefix) {
                // The client secret stays in the ledger and goes to the account only (its subscription status).
                try db.appendEvent(
                    EventRecord(
                        type: .renewalNeedsAction, accountID: found.accountID, transactionID: found.latestTransactionID,
                        originalTransactionID: found.originalID, productID: intent.productID, createdMs: nowMs,
                        reason: "authentication_required"))
            }
            var row = found
            let product = catalog.product(intent.productID)
            row.renewalDeclined(
                atMs: nowMs,
                policy: RetryPolicy(
                    gracePeriod: product?.gracePeriod,
                    billingRetryPeriod: product?.billingRetryPeriod ?? CatalogProduct.defaultBillingRetryPeriod,
                    timeScale: scale))
            try db.saveSubscription(row, nowMs: nowMs)
        }
    }

    /// The buyer agrees to the product's current price: the subscription renews at it.
    public func consentToPriceIncrease(
        account: AccountRecord, originalID: String
    ) async throws -> StoreV1.SubscriptionStatus {
        guard !originalID.isEmpty else { throw StoreError.invalid("original_transaction_id is required") }
        let nowMs = now
        let catalog = self.catalog
        let row = try await ledger.write(account: account.id) { db -> SubscriptionRecord in
            guard var row = try db.subscription(originalID: originalID), row.accountID == account.id else {
                throw StoreError.notFound("no auto-renewable subscription \(originalID) for this account")
            }
            // The price of the product the next renewal is of (a pending downgrade's), in the subscription's storefront.
            let renewing = row.pendingProductID.isEmpty ? row.productID : row.pendingProductID
            guard let product = catalog.product(renewing, storefront: row.storefront) else {
                throw StoreError(.conflict, "\(renewing) is no longer sold; the subscription ends with its period")
            }
            let changed: Bool
            do throws(SubscriptionRefusal) {
                changed = try row.priceConsented(product.price, currency: product.currency)
            } catch .ended(let state, let reason) {
                throw StoreError(
                    .conflict, "subscription \(originalID) has ended (\(state), \(reason)); buy it again to subscribe")
            }
            try db.saveSubscription(row, nowMs: nowMs)
            if changed {
                var event = EventRecord(
                    type: .priceChanged, accountID: row.accountID, transactionID: row.latestTransactionID,
                    originalTransactionID: row.originalID,
                    productID: renewing, createdMs: nowMs, price: product.price)
                event.storefront = catalog.storefront(row.storefront)
                event.currency = product.currency
                try db.appendEvent(event)
            }
            return row
        }
        return try await ledger.offload { try self.statusMessage(row, forAccount: true) }
    }

    // MARK: Offers

    enum OfferCheck {
        case accepted(OfferTerms)
        case refused(FailedPurchase.Code, String, String)
    }

    /// Whether a purchase may have the offer it asks for (inside the purchase's write). A promotional offer's
    /// nonce is used up here, in the same write as the payment's intent.
    func checkOffer(
        _ offer: StoreV1.SubscriptionOffer, for product: CatalogProduct, accountID: String, nowMs: Int64,
        _ db: any StoreRepositories
    ) throws -> OfferCheck {
        guard product.type == .autoRenewableSubscription else {
            return .refused(
                .invalidOfferIdentifier, "invalid_offer",
                "offers apply to auto-renewable subscriptions only; \(product.id) is not one")
        }
        guard !offer.offerID.isEmpty else {
            return .refused(
                .missingOfferParams, "missing_offer_parameters",
                "the offer has no offer_id (\"introductory\" or a promotional offer's id)")
        }
        guard let terms = product.offer(offer.offerID) else {
            let known = ([product.introductoryOffer?.id].compactMap { $0 } + product.promotionalOffers.map(\.id))
                .joined(separator: ", ")
            return .refused(
                .invalidOfferIdentifier, "invalid_offer",
                "\(product.id) has no offer \"\(offer.offerID)\" (its offers: \(known.isEmpty ? "none" : known))")
        }
        let current = try rules.groupSubscription(db, accountID: accountID, productID: product.id)
        if terms.id == OfferTerms.introductoryID {
            if let current {
                return .refused(
                    .ineligibleForOffer, "ineligible_for_offer",
                    "the introductory offer is once per subscription group and account: this account subscribed to \(current.productID) in group \(product.subscriptionGroup) before (\(current.originalID))"
                )
            }
            return .accepted(terms)
        }
        var missing: [String] = []
        if offer.keyID.isEmpty { missing.append("key_id") }
        if offer.nonce.isEmpty { missing.append("nonce") }
        if offer.timestampMs == 0 { missing.append("timestamp_ms") }
        if offer.signature.isEmpty { missing.append("signature") }
        guard missing.isEmpty else {
            return .refused(
                .missingOfferParams, "missing_offer_parameters",
                "promotional offer \(terms.id) needs \(missing.joined(separator: ", ")) signed by the app's server")
        }
        guard PromotionalOfferSignature.isWellFormed(nonce: offer.nonce) else {
            return .refused(
                .missingOfferParams, "invalid_nonce", "the offer's nonce must be 8 to 64 of A-Z, a-z, 0-9 and '-'")
        }
        guard let raw = catalog.offerKeys[offer.keyID],
            let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw)
        else {
            return .refused(
                .invalidSignature, "unknown_offer_key",
                "key_id \"\(offer.keyID)\" is not one of the catalog's offer_keys")
        }
        if offer.timestampMs < nowMs - Self.offerSignatureLifetimeMs {
            return .refused(
                .invalidSignature, "offer_signature_expired",
                "the offer was signed at \(offer.timestampMs), more than 24 hours before the store's clock (\(nowMs)); sign a new one"
            )
        }
        if offer.timestampMs > nowMs + 300_000 {
            return .refused(
                .invalidSignature, "offer_signature_in_the_future",
                "the offer's timestamp \(offer.timestampMs) is more than 5 minutes after the store's clock (\(nowMs))")
        }
        let signature = PromotionalOfferSignature(
            offerID: terms.id, keyID: offer.keyID, nonce: offer.nonce, timestampMs: offer.timestampMs,
            signature: offer.signature)
        guard signature.isValid(publicKey: key, bundleID: catalog.bundleID, productID: product.id, accountID: accountID)
        else {
            return .refused(
                .invalidSignature, "invalid_offer_signature",
                "the signature does not match key \(offer.keyID) over (bundle \(catalog.bundleID), product \(product.id), offer \(terms.id), this account, nonce, timestamp): signed for another buyer, product or offer, or altered"
            )
        }
        if try db.offerNonceUsed(offer.nonce) {
            return .refused(
                .invalidSignature, "offer_nonce_used",
                "the offer's nonce \(offer.nonce) was used before: each signed offer is good for one purchase")
        }
        if let current, current.isEntitled(atMs: nowMs) {
            return .refused(
                .ineligibleForOffer, "ineligible_for_offer",
                "this account is subscribed to \(current.productID) in group \(product.subscriptionGroup) now; a promotional offer starts a subscription"
            )
        }
        // Used up in the purchase's own write (the unique key also stops a racing second use).
        guard try db.useOfferNonce(offer.nonce, accountID: accountID, nowMs: nowMs) else {
            return .refused(
                .invalidSignature, "offer_nonce_used",
                "the offer's nonce \(offer.nonce) was used before: each signed offer is good for one purchase")
        }
        return .accepted(terms)
    }

    /// How long a promotional offer's signature is accepted after its timestamp.
    static let offerSignatureLifetimeMs: Int64 = 24 * 3600 * 1000

    /// The catalog's subscription rules (renewal terms, groups, upgrades).
    var rules: SubscriptionRules { SubscriptionRules(catalog: catalog) }

    // MARK: The buyer's side

    /// Turns a subscription's auto-renew off (it ends at the end of the paid period, reason CANCELLED;
    /// in grace or billing retry it ends now) or on again.
    /// - Throws: ``StoreError`` NOT_FOUND for another account's or an unknown subscription, FAILED_PRECONDITION-like
    ///   conflict (9) for one that has ended.
    public func setAutoRenew(
        account: AccountRecord, originalID: String, _ on: Bool
    ) async throws -> StoreV1.SubscriptionStatus {
        guard !originalID.isEmpty else { throw StoreError.invalid("original_transaction_id is required") }
        let nowMs = now
        let row = try await ledger.write(account: account.id) { db -> SubscriptionRecord in
            guard var row = try db.subscription(originalID: originalID), row.accountID == account.id else {
                throw StoreError.notFound("no auto-renewable subscription \(originalID) for this account")
            }
            let change: AutoRenewChange
            do throws(SubscriptionRefusal) {
                change = try row.autoRenewSet(on)
            } catch .ended(let state, let reason) {
                throw StoreError(
                    .conflict, "subscription \(originalID) has ended (\(state), \(reason)); buy it again to subscribe")
            }
            if change != .unchanged {
                try db.appendEvent(
                    EventRecord(
                        type: .autoRenewChanged, accountID: row.accountID, transactionID: row.latestTransactionID,
                        originalTransactionID: row.originalID,
                        productID: row.productID, createdMs: nowMs, autoRenew: on))
            }
            try db.saveSubscription(row, nowMs: nowMs)
            return row
        }
        return try await ledger.offload { try self.statusMessage(row, forAccount: true) }
    }

    /// Ends a subscription now, as the App Store sandbox's "expire": no entitlement from now on, nothing renews.
    @discardableResult
    public func expireSubscription(
        originalID: String, reason: Subscription.ExpirationReason = .cancelled
    ) async throws -> SubscriptionRecord {
        guard let found = try ledger.subscription(originalID: originalID) else {
            throw StoreError.notFound("no auto-renewable subscription \(originalID)")
        }
        let nowMs = now
        return try await ledger.write(account: found.accountID) { db -> SubscriptionRecord in
            guard var row = try db.subscription(originalID: originalID) else {
                throw StoreError.notFound("no auto-renewable subscription \(originalID)")
            }
            guard row.isLive else { return row }
            row.expiredNow(atMs: nowMs, reason: reason)
            try db.saveSubscription(row, nowMs: nowMs)
            return row
        }
    }

    /// Where the account's subscriptions stand: all of them, or the one with `originalID`.
    public func subscriptionStatuses(
        account: AccountRecord, originalID: String = ""
    ) throws -> [StoreV1.SubscriptionStatus] {
        if !originalID.isEmpty {
            guard let row = try ledger.subscription(originalID: originalID), row.accountID == account.id else {
                throw StoreError.notFound("no auto-renewable subscription \(originalID) for this account")
            }
            return [try statusMessage(row, forAccount: true)]
        }
        return try ledger.subscriptions(accountID: account.id).map { try statusMessage($0, forAccount: true) }
    }

    /// A subscription's status as sent on the wire. `forAccount`: sent to the subscription's own account, with
    /// what the app needs to confirm a renewal that waits for the buyer (the client secret goes nowhere else).
    func statusMessage(_ row: SubscriptionRecord, forAccount: Bool = false) throws -> StoreV1.SubscriptionStatus {
        let product = catalog.product(row.productID)
        let terms = rules.renewalTerms(row)
        let action = forAccount && row.isLive ? try pendingRenewalAction(row) : nil
        return StoreV1.SubscriptionStatus(
            originalTransactionID: row.originalID, productID: row.productID,
            subscriptionGroup: product?.subscriptionGroup ?? row.productID,
            state: StoreV1.SubscriptionState(rawValue: row.state.rawValue), willAutoRenew: row.willAutoRenew,
            expiresDateMs: row.expiresMs,
            expirationReason: StoreV1.ExpirationReason(rawValue: row.expirationReason.rawValue),
            gracePeriodExpiresMs: row.state == .inGracePeriod ? row.graceEndMs : 0,
            billingRetryEndsMs: row.state == .inGracePeriod || row.state == .inBillingRetry ? row.retryEndMs : 0,
            pendingProductID: row.pendingProductID, renewalPrice: terms?.price ?? "", currency: terms?.currency ?? "",
            latestTransaction: try ledger.transaction(id: row.latestTransactionID)?.message,
            periodsPaid: UInt32(clamping: row.periodsPaid),
            renewalOfferID: terms?.offerID ?? "", entitled: row.isEntitled(atMs: now),
            priceIncreasePending: rules.priceIncreasePending(row),
            actionPaymentReference: action?.reference ?? "", actionClientSecret: action?.clientSecret ?? "",
            storefront: catalog.storefront(row.storefront))
    }
}
