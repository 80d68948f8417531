import Foundation
import KioskAPI
import KioskRPC
import KioskSigning
import KioskStoreCore
import KioskWire
import Logging
import NIOConcurrencyHelpers
import Tracing

// Purchases, approvals, refunds and reconciliation: every payment has a
// durable intent before the processor is asked, and the database (unique
// indexes, checks inside one serializable write transaction), not a process-local
// lock, keeps a payment from being charged twice. The per-payment lock in this
// process only queues retries of one payment, so they replay rather than race.
extension Store {
    // MARK: Purchases

    /// Buys `quantity` of a product, at most once per idempotency key.
    ///
    /// Call errors: quantity outside 1…max, empty product id or payment method
    /// (3), the key reused for another request (6), a payment of the same
    /// owned-once product already in flight for the account (10), a processor
    /// that did not answer (14: the payment stays pending; retry with the same
    /// key, or the store reconciles it). Every other outcome is a transaction:
    /// PURCHASED (with its receipt), FAILED or DEFERRED. The answer is committed
    /// to the ledger (fsynced) before this returns.
    ///
    /// Once started, a purchase is not cancelled with the calling task: it is
    /// charged and committed whole, and a retry with its key gets the answer.
    public func purchase(
        account: AccountRecord, productID: String, quantity: UInt32, paymentMethod: String, idempotencyKey: String?,
        offer: StoreV1.SubscriptionOffer? = nil
    ) async throws -> PurchaseOutcome {
        try await purchase(
            account: account, productID: productID, quantity: quantity, paymentMethod: paymentMethod,
            idempotencyKey: idempotencyKey, offer: offer, code: nil)
    }

    /// A purchase, or an offer code's redemption (`code`: normalized, and its hash).
    func purchase(
        account: AccountRecord, productID: String, quantity: UInt32, paymentMethod: String, idempotencyKey: String?,
        offer: StoreV1.SubscriptionOffer? = nil, code: (text: String, hash: [UInt8])?
    ) async throws -> PurchaseOutcome {
        do {
            let outcome = try await Task {
                try await uncancellablePurchase(
                    account: account, productID: productID, quantity: quantity,
                    paymentMethod: paymentMethod, idempotencyKey: idempotencyKey, offer: offer, code: code)
            }.value
            let result: String =
                switch outcome.result {
                case .purchased: outcome.alreadyOwned ? "already_owned" : "purchased"
                case .deferred: "deferred"
                case .failed: "failed"
                }
            logger.info(
                "purchase",
                metadata: [
                    "account_id": "\(account.id)", "product_id": "\(productID)", "outcome": "\(result)",
                    "transaction_id": "\(outcome.transactionID)", "replayed": "\(outcome.replayed)",
                ])
            return outcome
        } catch {
            logger.notice(
                "purchase not answered",
                metadata: ["account_id": "\(account.id)", "product_id": "\(productID)", "error": "\(error)"])
            throw error
        }
    }

    private func uncancellablePurchase(
        account: AccountRecord, productID: String, quantity: UInt32, paymentMethod: String, idempotencyKey: String?,
        offer: StoreV1.SubscriptionOffer?, code: (text: String, hash: [UInt8])?
    ) async throws -> PurchaseOutcome {
        guard !productID.isEmpty else { throw StoreError.invalid("product_id is required") }
        guard !paymentMethod.isEmpty else {
            throw StoreError.invalid("payment_method is required, e.g. \"test-card:4242424242424242\"")
        }
        try Self.checkIdempotencyKey(idempotencyKey)
        let product = catalog.product(productID)
        let maxQuantity = product?.maxQuantity ?? 10
        guard quantity >= 1, quantity <= maxQuantity else {
            throw StoreError.invalid("quantity \(quantity) is outside 1…\(maxQuantity) for product \(productID)")
        }
        let offer = offer.flatMap {
            $0.offerID.isEmpty && $0.keyID.isEmpty && $0.nonce.isEmpty && $0.signature.isEmpty ? nil : $0
        }
        // The offer is part of the request: a key reused with another offer is another request.
        let offerText =
            offer.map {
                "\u{0}offer\u{0}\($0.offerID)\u{0}\($0.keyID)\u{0}\($0.nonce)\u{0}\($0.timestampMs)\u{0}\($0.signature.hexString)"
            } ?? ""
        // So is the code: a key reused with another code is another request.
        let codeText = code.map { "\u{0}code\u{0}\($0.text)" } ?? ""
        let order = Order(
            account: account.id, productID: productID, product: product, quantity: quantity,
            paymentMethod: paymentMethod,
            idempotencyKey: idempotencyKey, offer: offer, code: code,
            requestHash: Self.hash(
                "purchase\u{0}\(productID)\u{0}\(quantity)\u{0}\(paymentMethod)\(offerText)\(codeText)"))
        // Calls with the same key queue here, so a racing retry replays the first answer; other purchases
        // (of the same account too) run at once and commit together: the database guards them.
        let transactionID = Self.newTransactionID()
        let response = try await locks.withLock(order.paymentID(or: transactionID)) {
            switch try await startPurchase(order, transactionID: transactionID) {
            case .answered(let response):
                return response
            case .charge(let intent):
                // A payment first tried longer ago than the processor keeps idempotency keys (Stripe: 24 h) may
                // have been charged under a key the processor forgot: ask, never charge again blindly.
                if intent.createdMs < now - Self.processorKeyLifetimeMs {
                    switch try await lookup(intent) {
                    case .charged(let reference, let savedMethod):
                        return try await completePurchase(
                            intent, .succeeded(reference: reference, savedMethod: savedMethod), via: "lookup")
                    case .deferred:
                        return try await completePurchase(intent, .deferred, via: "lookup")
                    case .notCharged:
                        break
                    }
                }
                return try await completePurchase(intent, try await charge(intent))
            }
        }
        if !response.replayed { await configuration.purchaseCommitted?(response) }
        return response
    }

    /// What a purchase asks for.
    struct Order {
        var account: String
        var productID: String
        var product: CatalogProduct?
        var quantity: UInt32
        var paymentMethod: String
        var idempotencyKey: String?
        var offer: StoreV1.SubscriptionOffer?
        /// An offer code being redeemed (normalized), and its hash.
        var code: (text: String, hash: [UInt8])? = nil
        var requestHash: [UInt8]

        /// The payment's stable id: the same key of the same account pays once.
        func paymentID(or transactionID: String) -> String {
            idempotencyKey.map { Store.hash("\(account)\u{0}\($0)").hexString } ?? transactionID
        }
    }

    enum PurchaseStart {
        /// Answered without a payment (a replay, a refusal, already owned).
        case answered(PurchaseOutcome)
        /// The intent is on disk: ask the processor.
        case charge(PaymentIntent)
    }

    /// Step 1, one write: the key's earlier answer, restrictions, the catalog,
    /// ownership, an earlier record of the same payment, and the payment's
    /// intent. Every lookup is a primary key or an index: no history scan.
    private func startPurchase(_ order: Order, transactionID: String) async throws -> PurchaseStart {
        let nowMs = now
        let paymentID = order.paymentID(or: transactionID)
        let instance = self.instance
        return try await ledger.write(account: order.account) { db -> PurchaseStart in
            let intentID = "\(PaymentIntent.Kind.purchase.rawValue):\(paymentID)"
            try db.readAheadPurchase(
                account: order.account, key: order.idempotencyKey, intentID: intentID, paymentID: paymentID)
            // The order with its product priced in the account's storefront (once the account is read).
            var priced = order
            if let bytes = try db.remembered(
                account: order.account, key: order.idempotencyKey, operation: "purchase", hash: order.requestHash)
            {
                return .answered(try PurchaseOutcome.replaying(bytes, db))
            }
            func answer(_ outcome: PurchaseOutcome) throws -> PurchaseStart {
                try db.remember(
                    StoredAnswer(outcome).encoded(), account: order.account, key: order.idempotencyKey,
                    operation: "purchase",
                    hash: order.requestHash, nowMs: nowMs)
                return .answered(outcome)
            }
            func refuse(code: FailedPurchase.Code, _ reason: String, _ message: String) throws -> PurchaseStart {
                try answer(
                    PurchaseOutcome(
                        result: .failed(
                            self.failure(
                                transactionID, order: priced, nowMs: nowMs, code: code, reason: reason, message)
                        )))
            }
            guard let account = try db.account(id: order.account) else {
                throw StoreError.unauthenticated("account \(order.account) no longer exists")
            }
            let storefront = self.catalog.storefront(account.storefront)
            priced.product = order.product?.priced(in: storefront)
            // An earlier attempt of this payment comes first: one that may have been charged is never
            // answered FAILED because the account, the catalog or the rules changed since.
            let earlierIntent = try db.intent(id: intentID)
            if let earlierIntent, let key = order.idempotencyKey, earlierIntent.requestHash != order.requestHash {
                throw StoreError(
                    .keyReused,
                    "idempotency-key \"\(key)\" was already used for a different purchase; use a new key for a new request"
                )
            }
            if order.idempotencyKey != nil, let earlier = try db.transaction(paymentID: paymentID) {
                // The key's answer was pruned (past the retention) but the ledger still has what that
                // payment bought: the same answer again, never a second charge.
                return .answered(
                    PurchaseOutcome(
                        result: earlier.state == .deferred ? .deferred(earlier) : .purchased(earlier), replayed: true))
            }
            if let earlierIntent, earlierIntent.state == .pending {
                // Its outcome was never recorded. Another live process may be asking the processor right now.
                if earlierIntent.owner != instance.id, instance.isAlive(earlierIntent.owner, db) {
                    throw StoreError(
                        .inProgress,
                        "this payment is being made by another store process; retry with the same idempotency-key")
                }
                // Ask again with the same payment id (the processor deduplicates on it), as the same transaction.
                return .charge(try db.reopen(earlierIntent, owner: instance.id, nowMs: nowMs))
            }
            guard account.paymentsAllowed else {
                return try refuse(
                    code: .paymentNotAllowed, "payment_not_allowed",
                    "payment not allowed: purchases are disabled for this account")
            }
            guard let product = priced.product else {
                return try refuse(
                    code: .productUnavailable, "product_unavailable",
                    "product unavailable: \(order.productID) is not in the catalog")
            }
            if self.configuration.environment == .production,
                SimulatedPaymentProcessor.isTestMethod(order.paymentMethod)
            {
                return try refuse(
                    code: .paymentInvalid, "test_payment_method",
                    "\(order.paymentMethod) is a sandbox test method; a production store takes real payment methods only"
                )
            }
            if let owned = try db.owned(
                accountID: order.account, productID: product.id, kind: product.type, nowMs: nowMs)
            {
                return try answer(PurchaseOutcome(result: .purchased(owned), alreadyOwned: true))
            }
            var unitPrice = product.price
            var offerTerms: OfferTerms?
            var codeOfferID: String?
            if let code = order.code {
                // A retry of a payment closed uncharged (reopened below, as its first transaction) holds its code.
                switch try self.takeOfferCode(
                    code, product: product, order: order,
                    transactionID: earlierIntent?.transactionID ?? transactionID, nowMs: nowMs, db)
                {
                case .accepted(let batch):
                    // Never more than the product's regular price where the buyer is (a storefront of the same
                    // currency may price it below the code).
                    let offered = Money(decimal: batch.price, currency: product.currency)
                    let regular = Money(decimal: product.price, currency: product.currency)
                    unitPrice = offered.flatMap { o in regular.map { o > $0 } } == true ? product.price : batch.price
                    codeOfferID = batch.offerID
                    if product.type == .autoRenewableSubscription,
                        let period = SubscriptionPeriod(iso8601: batch.period)
                    {
                        offerTerms = OfferTerms(id: batch.offerID, price: batch.price, period: period, periods: 1)
                    }
                case .refused(let code, let reason, let message):
                    return try refuse(code: code, reason, message)
                }
            }
            if let offer = order.offer {
                switch try self.checkOffer(offer, for: product, accountID: order.account, nowMs: nowMs, db) {
                case .accepted(let terms):
                    offerTerms = terms
                    unitPrice = terms.price
                case .refused(let code, let reason, let message):
                    return try refuse(code: code, reason, message)
                }
            }
            if offerTerms == nil {
                switch try self.rules.groupChange(
                    db, accountID: order.account, to: product, storefront: storefront, nowMs: nowMs)
                {
                case .none:
                    break
                case .atRenewal(let current):
                    // A downgrade or crossgrade: nothing is charged now; the next renewal is of the new product.
                    return try answer(PurchaseOutcome(result: .purchased(current), alreadyOwned: true))
                case .upgrade(let price):
                    unitPrice = price
                }
            }
            if product.type == .autoRenewableSubscription,
                try self.rules.groupPaymentInFlight(
                    db, accountID: order.account, productID: product.id, except: earlierIntent?.id)
            {
                throw StoreError(
                    .inProgress,
                    "a payment for a subscription in \(product.id)'s group (a renewal, or another purchase) is in progress for this account; try again when it has finished"
                )
            }
            if let earlierIntent, earlierIntent.state == .closed {
                // Closed uncharged (reconciliation found nothing): this retry pays, as the same transaction, at the
                // price it was first tried at; not when the buyer has moved storefront since (another price).
                if !earlierIntent.storefront.isEmpty, earlierIntent.storefront != storefront {
                    throw StoreError(
                        .conflict,
                        "this payment was first tried in storefront \(earlierIntent.storefront), not the account's \(storefront) now; buy again with a new idempotency-key"
                    )
                }
                return .charge(try db.reopen(earlierIntent, owner: instance.id, nowMs: nowMs))
            }
            var intent = PaymentIntent(
                kind: .purchase, paymentID: paymentID, transactionID: transactionID, accountID: order.account,
                product: product,
                quantity: order.quantity, unitPrice: unitPrice, currency: product.currency,
                paymentMethod: order.paymentMethod,
                purchaseMs: nowMs, idempotencyKey: order.idempotencyKey, requestHash: order.requestHash,
                owner: instance.id)
            if let offerTerms {
                intent.offerID = offerTerms.id
                intent.subscriptionPeriod = offerTerms.period.description
            }
            if let codeOfferID { intent.offerID = codeOfferID }
            intent.storefront = storefront
            try db.insertIntent(intent, nowMs: nowMs)
            return .charge(intent)
        }
    }

    /// The processor's charge; nothing to charge (a free trial, an upgrade fully credited) is not sent to it.
    func processorCharge(_ request: PaymentRequest) async throws -> PaymentOutcome {
        if PaymentIntentLifecycle.plan(for: request.amount) == .nothingToCharge {
            return .succeeded(reference: Self.noChargeReference)
        }
        return try await processorCall("charge") { try await configuration.paymentProcessor.charge(request) }
    }

    /// Runs a call to the payment processor; when a tracer is bootstrapped, as a `payment.<operation>` client
    /// span of the current one (the purchase's call, a reconciliation).
    func processorCall<T: Sendable>(_ operation: String, _ body: () async throws -> T) async throws -> T {
        let tracer = InstrumentationSystem.tracer
        guard !(tracer is NoOpTracer) else { return try await body() }
        let span = tracer.startSpan(
            "payment.\(operation)", context: ServiceContext.current ?? .topLevel, ofKind: .client)
        span.attributes["kiosk.processor"] = configuration.paymentProcessor.name
        defer { span.end() }
        do {
            return try await ServiceContext.$current.withValue(span.context) { try await body() }
        } catch {
            span.recordError(error)
            span.setStatus(SpanStatus(code: .error))
            throw error
        }
    }

    /// The processor's lookup; a payment of nothing was never sent to it and counts as charged.
    func processorLookup(_ request: PaymentRequest) async throws -> PaymentLookup {
        if PaymentIntentLifecycle.plan(for: request.amount) == .nothingToCharge {
            return .charged(reference: Self.noChargeReference)
        }
        return try await processorCall("lookup") { try await configuration.paymentProcessor.lookup(request) }
    }

    /// The reference recorded for a payment of nothing, which no processor saw.
    static let noChargeReference = "no_charge"

    /// How long a processor is trusted to deduplicate a payment id (Stripe keeps idempotency keys 24 hours).
    static let processorKeyLifetimeMs: Int64 = 23 * 3600 * 1000

    private func lookup(_ intent: PaymentIntent) async throws -> PaymentLookup {
        do {
            return try await processorLookup(intent.request)
        } catch {
            throw StoreError(
                .processorUnavailable,
                "the payment processor did not answer (\(error)); the payment is pending: retry with the same idempotency-key later"
            )
        }
    }

    /// Step 2: the processor. An unknown outcome leaves the intent pending.
    private func charge(_ intent: PaymentIntent) async throws -> PaymentOutcome {
        do {
            return try await chargeFirstPayment(intent)
        } catch {
            throw StoreError(
                .processorUnavailable,
                "the payment processor did not answer (\(error)); the payment is pending: retry with the same idempotency-key, or the store settles it with the processor"
            )
        }
    }

    /// Step 3, one write: the outcome recorded, the intent completed or closed, the key's answer stored.
    /// - Parameter via: how the outcome was learnt, when not from the charge itself (`reconciled`, `lookup`), kept in the intent's outcome.
    func completePurchase(
        _ intent: PaymentIntent, _ outcome: PaymentOutcome, via: String? = nil
    ) async throws -> PurchaseOutcome {
        let prefix = via.map { "\($0):" } ?? ""
        let nowMs = now
        let signer = try keys.activeKey()
        let (answer, refundDue) = try await ledger.write(account: intent.accountID) { db -> (PurchaseOutcome, Bool) in
            let response: PurchaseOutcome
            switch outcome {
            case .succeeded(let reference, let savedMethod):
                try db.readAheadCharged(paymentID: intent.paymentID, signingKey: signer.id)
                if let recorded = try db.transaction(paymentID: intent.paymentID) {
                    response = PurchaseOutcome(result: .purchased(recorded))
                } else if intent.exclusive,
                    let owned = try db.owned(
                        accountID: intent.accountID, productID: intent.productID, kind: intent.productType, nowMs: nowMs
                    )
                {
                    // Charged for something the account came to own meanwhile (only possible when a pending payment
                    // was taken for uncharged and another bought the product): the charge is never dropped silently —
                    // it is refunded, and stays due in the ledger until the processor confirms.
                    try db.settle(
                        intent.id, account: intent.accountID, .closed, outcome: "\(Self.refundDuePrefix)\(reference)",
                        nowMs: nowMs)
                    return (PurchaseOutcome(result: .purchased(owned), alreadyOwned: true), true)
                } else {
                    let record = try self.purchasedRecord(intent, db, signer: signer)
                    try db.insertTransaction(record)
                    try self.rules.bought(record, nowMs: nowMs, db)
                    try self.keepSavedMethod(savedMethod, for: intent, nowMs: nowMs, db)
                    response = PurchaseOutcome(result: .purchased(record))
                }
                try db.settle(
                    intent.id, account: intent.accountID, .completed, outcome: "\(prefix)charged:\(reference)",
                    nowMs: nowMs)
            case .deferred:
                if let recorded = try db.transaction(paymentID: intent.paymentID) {
                    response = PurchaseOutcome(
                        result: recorded.state == .deferred ? .deferred(recorded) : .purchased(recorded))
                } else {
                    let deferred = TransactionRecord(
                        intent, id: intent.transactionID, state: .deferred, purchaseMs: intent.purchaseMs,
                        environment: self.configuration.environment)
                    try db.insertTransaction(deferred)
                    response = PurchaseOutcome(result: .deferred(deferred))
                }
                try db.settle(
                    intent.id, account: intent.accountID, .completed, outcome: "\(prefix)deferred", nowMs: nowMs)
            case .cancelled:
                response = PurchaseOutcome(
                    result: .failed(
                        self.failure(
                            intent, code: .paymentCancelled, reason: "payment_cancelled",
                            "payment cancelled by the user")))
                try db.settle(
                    intent.id, account: intent.accountID, .closed, outcome: "\(prefix)cancelled", nowMs: nowMs)
            case .needsAction:
                // Only renewals are left for the buyer to confirm; a purchase's buyer is there, so it is a decline.
                response = PurchaseOutcome(
                    result: .failed(
                        self.failure(
                            intent, code: .paymentInvalid, reason: "authentication_required",
                            "the card issuer requires the buyer to authenticate this payment")))
                try db.settle(
                    intent.id, account: intent.accountID, .closed, outcome: "\(prefix)declined:authentication_required",
                    nowMs: nowMs)
            case .declined(let reason, let message):
                response = PurchaseOutcome(
                    result: .failed(self.failure(intent, code: .paymentInvalid, reason: reason, message)))
                try db.settle(
                    intent.id, account: intent.accountID, .closed, outcome: "\(prefix)declined:\(reason)", nowMs: nowMs)
            }
            // A failed payment gives back the offer code it was to redeem.
            if case .failed = response.result, intent.offerID.hasPrefix(EntitlementSource.offerCodePrefix) {
                try db.releaseOfferCode(transactionID: intent.transactionID)
            }
            // A recorded charge replaces whatever the key answered before.
            try db.remember(
                StoredAnswer(response).encoded(), account: intent.accountID, key: intent.idempotencyKey,
                operation: "purchase",
                hash: intent.requestHash, nowMs: nowMs, replacing: response.isPurchased)
            return (response, false)
        }
        if refundDue { await refundDuplicate(intent) }
        return answer
    }

    /// The outcome of an intent whose charge must be given back (a duplicate), until it is.
    static let refundDuePrefix = "refund_due:"

    /// Gives back a duplicate charge; on failure it stays due and reconciliation tries again.
    @discardableResult
    func refundDuplicate(_ intent: PaymentIntent) async -> Bool {
        do {
            try await processorCall("refund") {
                try await configuration.paymentProcessor.refund(intent.request, reason: "duplicate")
            }
            let nowMs = now
            try await ledger.write(account: intent.accountID) { db in
                try db.settle(
                    intent.id, account: intent.accountID, .closed, outcome: "refunded_duplicate", nowMs: nowMs)
            }
            return true
        } catch {
            return false
        }
    }

    /// A PURCHASED record of an intent, with its signed receipt, expiry and credits; read and written in one write.
    /// A subscription renewal passes its subscription's original id and the start of the period it pays for.
    func purchasedRecord(
        _ intent: PaymentIntent, _ db: any LedgerDatabase, signer: ReceiptSigningKey,
        renewing: (originalID: String, periodStartMs: Int64)? = nil
    ) throws -> TransactionRecord {
        var record = TransactionRecord(
            intent, id: intent.transactionID, state: .purchased, purchaseMs: intent.purchaseMs,
            environment: configuration.environment)
        if let period = SubscriptionPeriod(iso8601: intent.subscriptionPeriod) {
            if let renewing {
                record.originalID = renewing.originalID
                record.periodStartMs = renewing.periodStartMs
            } else {
                let history = try db.subscriptionHistory(accountID: intent.accountID, productID: intent.productID)
                if intent.productType == .autoRenewableSubscription,
                    let group = try rules.groupSubscription(
                        db, accountID: intent.accountID, productID: intent.productID)
                {
                    // One subscription per group: an upgrade or a resubscription continues it.
                    record.originalID = group.originalID
                } else if intent.productType == .autoRenewableSubscription, let first = history.originalID {
                    record.originalID = first
                }
                // A non-renewing period bought while another runs starts when that one ends; an auto-renewable one
                // is bought only when the account is not subscribed (or in billing retry): it starts now.
                record.periodStartMs =
                    intent.productType == .autoRenewableSubscription
                    ? intent.purchaseMs : max(intent.purchaseMs, history.latestExpiryMs)
            }
            record.expiresMs = period.end(fromMs: record.periodStartMs, timeScale: timeScale)
        }
        record.offerID = intent.offerID
        record.credits = intent.productType == .consumable ? intent.creditsPerUnit * UInt64(intent.quantity) : 0
        // Signed now, by the store's clock; never before the key's own start (a clock a step behind the
        // process that rotated it must not make a receipt its own key refuses).
        let signedAtMs = max(now, signer.notBeforeMs)
        record.receipt = try sign(record, with: try keys.signer(signer, at: signedAtMs, db), atMs: signedAtMs)
        return record
    }

    func sign(_ record: TransactionRecord, with key: ReceiptSigningKey, atMs signedAtMs: Int64) throws -> [UInt8] {
        let payload = ReceiptV1.ReceiptPayload(
            transactionID: record.id, originalTransactionID: record.originalID, productID: record.productID,
            productType: record.productType.wire, quantity: record.quantity, purchaseDateMs: record.purchaseMs,
            expiresDateMs: record.expiresMs, accountID: record.accountID, bundleID: catalog.bundleID,
            environment: record.environment.wire, periodStartMs: record.periodStartMs, offerID: record.offerID,
            entitlements: EntitlementMap.grantedEntitlement(productID: record.productID).map { [$0] }
                ?? entitlementMap.entitlements(of: record.productID), storefront: record.storefront,
            currency: record.storefront.isEmpty ? "" : record.currency)
        return try key.sign(payload, signedAtMs: signedAtMs).serializedBytes()
    }

    /// A FAILED purchase: reported, never recorded (nothing was charged).
    private func failure(
        _ id: String, order: Order, nowMs: Int64, code: FailedPurchase.Code, reason: String, _ message: String
    ) -> FailedPurchase {
        FailedPurchase(
            code: code, reason: reason, message: message, transactionID: id, accountID: order.account,
            productID: order.productID,
            productType: order.product?.type, quantity: order.quantity, dateMs: nowMs,
            price: order.product?.price ?? "", currency: order.product?.currency ?? "",
            environment: configuration.environment)
    }

    private func failure(
        _ intent: PaymentIntent, code: FailedPurchase.Code, reason: String, _ message: String
    ) -> FailedPurchase {
        FailedPurchase(
            code: code, reason: reason, message: message, transactionID: intent.transactionID,
            accountID: intent.accountID,
            productID: intent.productID, productType: intent.productType, quantity: intent.quantity,
            dateMs: intent.purchaseMs,
            price: intent.unitPrice, currency: intent.currency, environment: configuration.environment)
    }

    // MARK: Credits

    /// Spends credits, at most once per idempotency key; returns the new balance.
    /// - Throws: ``StoreError`` 3 for an amount below 1, 9 when the balance is too low, 6 for a reused key.
    /// Like a purchase, a spend once started is not cancelled with the calling task.
    public func spendCredits(
        account: AccountRecord, amount: Int64, idempotencyKey: String?
    ) async throws -> SpendOutcome {
        guard amount > 0 else { throw StoreError.invalid("amount must be 1 or more, got \(amount)") }
        try Self.checkIdempotencyKey(idempotencyKey)
        let requestHash = Self.hash("spend\u{0}\(amount)")
        let nowMs = now
        return try await Task {
            // The key's answer, the balance check and the movement are one write: two processes cannot spend one key twice.
            try await ledger.write(account: account.id) { db -> SpendOutcome in
                if let bytes = try db.remembered(
                    account: account.id, key: idempotencyKey, operation: "spend", hash: requestHash)
                {
                    return try SpendOutcome.replaying(bytes)
                }
                // A purchase holds the key from its intent on, before its answer is stored.
                if let key = idempotencyKey,
                    try db.intent(
                        id:
                            "\(PaymentIntent.Kind.purchase.rawValue):\(Store.hash("\(account.id)\u{0}\(key)").hexString)"
                    ) != nil
                {
                    throw StoreError(
                        .keyReused,
                        "idempotency-key \"\(key)\" was already used for a purchase; use a new key for a new request")
                }
                let balance = Int64(clamping: try db.account(id: account.id)?.creditBalance ?? 0)
                guard balance >= amount else {
                    throw StoreError(
                        .conflict, "insufficient credits: the balance is \(balance), cannot spend \(amount)")
                }
                try db.addCredits(-amount, account: account.id, transaction: nil, reason: "spend", nowMs: nowMs)
                let response = SpendOutcome(balance: UInt64(balance - amount))
                try db.remember(
                    StoredAnswer.spend(balance: response.balance).encoded(), account: account.id, key: idempotencyKey,
                    operation: "spend",
                    hash: requestHash, nowMs: nowMs)
                return response
            }
        }.value
    }

    static func checkIdempotencyKey(_ key: String?) throws {
        guard let key else { return }
        guard !key.isEmpty, key.utf8.count <= FieldLimits.idempotencyKey else {
            throw StoreError.invalid("idempotency-key must be 1 to \(FieldLimits.idempotencyKey) bytes")
        }
    }

    // MARK: Approval (ask to buy)

    /// Approves a DEFERRED (ask-to-buy) transaction: charges it, at the price
    /// it was asked for, and makes it PURCHASED.
    /// - Throws: ``StoreError`` 9 when it is not waiting for approval (also when
    ///   another process approved it first or is approving it), its product left
    ///   the catalog, or the account already owns the product (bought meanwhile;
    ///   nothing is charged); 10 when a purchase of the same owned-once product is
    ///   in flight; 14 when the processor did not answer (the approval is pending
    ///   and is settled by reconciliation or another `approve`).
    public func approve(transactionID: String) async throws -> TransactionRecord {
        try requireRealPaymentsInProduction()
        try requireServedProcessor()
        let ledger = self.ledger
        guard let record = try await ledger.offload({ try ledger.transaction(id: transactionID) }) else {
            throw StoreError.notFound("no transaction \(transactionID)")
        }
        return try await locks.withLock(record.paymentID ?? record.id) {
            let intent = try await startApproval(transactionID)
            // An approval first tried longer ago than the processor keeps idempotency keys: ask before charging again.
            if intent.createdMs < now - Self.processorKeyLifetimeMs,
                case .charged(let reference, let savedMethod) = try await lookup(intent)
            {
                return try await completeApproval(intent, reference: reference, savedMethod: savedMethod, via: "lookup")
            }
            let outcome: PaymentOutcome
            do {
                outcome = try await chargeFirstPayment(intent, approving: true)
            } catch {
                throw StoreError(
                    .processorUnavailable,
                    "the payment processor did not answer (\(error)); the approval is pending and is settled with the processor"
                )
            }
            guard case .succeeded(let reference, let savedMethod) = outcome else {
                try await close(intent, outcome: "refused:\(outcome)")
                throw StoreError(
                    .conflict,
                    "the payment processor refused the approved payment (\(outcome)); \(transactionID) stays deferred")
            }
            return try await completeApproval(intent, reference: reference, savedMethod: savedMethod)
        }
    }

    private func startApproval(_ transactionID: String) async throws -> PaymentIntent {
        let nowMs = now
        let instance = self.instance
        // The account, read before the write (a transaction's account never changes), orders the write with the account's others.
        let account = try await ledger.accountOf(transactionID: transactionID)
        return try await ledger.write(account: account) { db -> PaymentIntent in
            guard let deferred = try db.transaction(id: transactionID), deferred.state == .deferred else {
                throw StoreError(.conflict, "transaction \(transactionID) is not waiting for approval")
            }
            guard let product = self.catalog.product(deferred.productID) else {
                throw StoreError(.conflict, "product \(deferred.productID) is no longer in the catalog")
            }
            if let owned = try db.owned(
                accountID: deferred.accountID, productID: product.id, kind: product.type, nowMs: nowMs)
            {
                throw StoreError(
                    .conflict,
                    "account \(deferred.accountID) already owns \(product.id) (transaction \(owned.id)); \(transactionID) was not charged"
                )
            }
            // An ask-to-buy request is approved as asked: not as an upgrade or a downgrade of a subscription the account
            // has in the group now (its price was asked for without one); the buyer asks again.
            if product.type == .autoRenewableSubscription,
                let current = try self.rules.groupSubscription(
                    db, accountID: deferred.accountID, productID: product.id),
                current.productID != product.id, current.isEntitled(atMs: nowMs)
            {
                throw StoreError(
                    .conflict,
                    "account \(deferred.accountID) subscribes to \(current.productID) in \(product.id)'s group now; \(transactionID) was not charged: ask to buy again"
                )
            }
            let paymentID = deferred.paymentID ?? deferred.id
            if let earlier = try db.intent(id: "\(PaymentIntent.Kind.approval.rawValue):\(paymentID)") {
                if earlier.state == .pending, earlier.owner != instance.id, instance.isAlive(earlier.owner, db) {
                    throw StoreError(.conflict, "transaction \(transactionID) is being approved by another process")
                }
                return try db.reopen(earlier, owner: instance.id, nowMs: nowMs)
            }
            var intent = PaymentIntent(
                kind: .approval, paymentID: paymentID, transactionID: deferred.id, accountID: deferred.accountID,
                product: product,
                quantity: deferred.quantity, unitPrice: deferred.price, currency: deferred.currency,
                paymentMethod: deferred.paymentMethod,
                purchaseMs: nowMs, idempotencyKey: nil, requestHash: [], owner: instance.id)
            // Approved as asked: in the storefront and at the price the buyer asked in.
            intent.storefront = deferred.storefront
            try db.insertIntent(intent, nowMs: nowMs)
            return intent
        }
    }

    /// One write: the deferred row becomes PURCHASED (same id), the intent completed.
    func completeApproval(
        _ intent: PaymentIntent, reference: String, savedMethod: String? = nil, via: String? = nil
    ) async throws -> TransactionRecord {
        let label = (via.map { "\($0):" } ?? "") + "charged:\(reference)"
        let nowMs = now
        let signer = try keys.activeKey()
        let (record, refundDue) = try await ledger.write(account: intent.accountID) {
            db -> (TransactionRecord?, Bool) in
            let current = try db.transaction(id: intent.transactionID)
            if let current, current.state == .purchased {
                try db.settle(intent.id, account: intent.accountID, .completed, outcome: label, nowMs: nowMs)
                return (current, false)
            }
            let owned =
                intent.exclusive
                ? try db.owned(
                    accountID: intent.accountID, productID: intent.productID, kind: intent.productType, nowMs: nowMs)
                : nil
            guard let current, current.state == .deferred, owned == nil else {
                // Charged, but there is nothing left to approve (the account bought the product meanwhile):
                // the charge is refunded, and stays due in the ledger until the processor confirms.
                try db.settle(
                    intent.id, account: intent.accountID, .closed, outcome: "\(Self.refundDuePrefix)\(reference)",
                    nowMs: nowMs)
                return (nil, true)
            }
            // Updated in place: the transaction keeps its id and its place in the account's history.
            let record = try self.purchasedRecord(intent, db, signer: signer)
            try db.replaceTransaction(record)
            // The buyer asked at the deferred price: that is the regular price agreed to, whatever the catalog says now.
            try self.rules.bought(
                record, regularPrice: intent.offerID.isEmpty ? intent.unitPrice : nil, nowMs: nowMs, db)
            try self.keepSavedMethod(savedMethod, for: intent, nowMs: nowMs, db)
            try db.settle(intent.id, account: intent.accountID, .completed, outcome: label, nowMs: nowMs)
            return (record, false)
        }
        if let record { return record }
        if refundDue { await refundDuplicate(intent) }
        throw StoreError(
            .conflict,
            "transaction \(intent.transactionID) is no longer waiting for approval (the account owns \(intent.productID)); the approved charge is refunded"
        )
    }

    private func close(_ intent: PaymentIntent, outcome: String) async throws {
        let nowMs = now
        try await ledger.write(account: intent.accountID) { db in
            try db.settle(intent.id, account: intent.accountID, .closed, outcome: outcome, nowMs: nowMs)
        }
    }

    // MARK: Refunds

    /// Refunds (revokes) a purchased transaction: the processor gives the
    /// money back, then its receipt verifies with the revocation set, it leaves
    /// restore, and `WatchRevocations` delivers it. A consumable's credits are
    /// taken back as far as the balance allows; what was already spent is
    /// recorded as the refund's credit shortfall.
    public func refund(transactionID: String, reason: String) async throws -> RevocationRecord {
        try requireRealPaymentsInProduction()
        try requireServedProcessor()
        let ledger = self.ledger
        guard let record = try await ledger.offload({ try ledger.transaction(id: transactionID) }) else {
            throw StoreError.notFound("no transaction \(transactionID)")
        }
        guard record.state == .purchased else {
            throw StoreError(.conflict, "transaction \(transactionID) is not purchased")
        }
        guard record.revokedMs == 0 else {
            throw StoreError(.conflict, "transaction \(transactionID) was already refunded")
        }
        let reasonText = reason.isEmpty ? "refunded" : reason
        // Money first: the processor refunds a payment once however often it is asked,
        // so a crash between refunding and recording is mended by refunding again.
        // A transaction that charged nothing (a free trial, a fully credited upgrade) has nothing to give back at the processor.
        if let paymentID = record.paymentID,
            RefundPlan.forTransaction(
                paymentID: paymentID, unitPrice: record.price, currency: record.currency, quantity: record.quantity)
                == .processor
        {
            let request = PaymentRequest(
                paymentID: paymentID, accountID: record.accountID, productID: record.productID,
                quantity: record.quantity,
                unitPrice: record.price, currency: record.currency, paymentMethod: record.paymentMethod)
            do {
                try await processorCall("refund") {
                    try await configuration.paymentProcessor.refund(request, reason: reasonText)
                }
            } catch {
                throw StoreError(
                    .processorUnavailable,
                    "the payment processor did not refund \(transactionID) (\(error)); nothing was recorded: run the refund again"
                )
            }
        }
        let nowMs = now
        let revocation = try await ledger.write(account: record.accountID) { db -> RevocationRecord in
            let revocation = try db.revoke(transactionID: transactionID, reason: reasonText, nowMs: nowMs)
            // A refund the buyer asked for is granted by it (an upgrade's revocation is no refund: it grants nothing).
            try Ledger.decideRefundRequest(transactionID: transactionID, .granted, reason: reasonText, nowMs: nowMs, db)
            return revocation
        }
        feed.noteWritten()
        logger.info(
            "refund",
            metadata: [
                "account_id": "\(record.accountID)", "transaction_id": "\(transactionID)",
                "product_id": "\(record.productID)",
            ])
        return revocation
    }

    /// Refuses a catalog with a price (a product's, an offer's) the payment processor could never charge: a store
    /// would otherwise take the price to every purchase and fail each one.
    func requireChargeableCatalog() throws {
        let processor = configuration.paymentProcessor
        for base in catalog.products {
            // The default storefront's prices and every other storefront's.
            for storefront in [catalog.defaultStorefront] + base.storefrontPrices.keys.sorted() {
                let product = base.priced(in: storefront)
                var prices = [("price", product.price)]
                for offer in [product.introductoryOffer].compactMap({ $0 }) + product.promotionalOffers {
                    prices.append(("offer \(offer.id)", offer.price))
                }
                for (field, price) in prices {
                    guard let money = Money(decimal: price, currency: product.currency),
                        let refusal = processor.refusal(toCharge: money)
                    else { continue }
                    throw StoreError.invalid(
                        "the catalog's \(product.id) \(field) \(price) \(product.currency) (storefront \(storefront)) "
                            + "cannot be charged by the \(processor.name) processor: \(refusal)")
                }
            }
        }
    }

    /// Production takes real money: the simulated processor, and a processor in test mode, are refused;
    /// a sandbox store must not take real money: a processor not in test mode is refused.
    func requireRealPaymentsInProduction() throws {
        let processor = configuration.paymentProcessor
        if configuration.environment == .production, processor.isSimulated {
            throw StoreError(
                .conflict,
                "a production store takes real payments: the \(processor.name) processor is for sandbox only; configure a real one (kiosk-store serve --payment-processor stripe --stripe-key-file FILE)"
            )
        }
        if configuration.environment == .production, processor.isTestMode {
            throw StoreError(
                .conflict,
                "a production store takes real payments: the \(processor.name) processor is in test mode (a test key); give a live key"
            )
        }
        if configuration.environment == .sandbox, !processor.isTestMode {
            throw StoreError(
                .conflict,
                "a sandbox store must not take real money: the \(processor.name) processor is live (a live key); give a test key"
            )
        }
    }

    // MARK: Reconciliation

    /// What ``reconcile(all:)`` did.
    public struct ReconcileReport: Hashable, Sendable {
        /// Intents found charged and recorded.
        public var charged = 0
        /// Intents found not charged and closed.
        public var closed = 0
        /// Intents left for later: a live process's recent payment, or a lookup that failed.
        public var left = 0
        /// Purchases found deferred (ask to buy) and recorded as DEFERRED.
        public var deferred = 0
        /// Duplicate charges refunded.
        public var refunded = 0

        /// A report of nothing done.
        public init() {}
    }

    /// Settles pending payment intents with the processor: charged → the
    /// transaction is recorded (delivered as unfinished, its key answered);
    /// not charged → the intent is closed. Runs at start-up and every
    /// ``StoreConfiguration/reconcileInterval``.
    ///
    /// An intent whose store process died is settled once older than
    /// ``StoreConfiguration/lookupDelay``; one a live process wrote, once older
    /// than ``StoreConfiguration/intentGrace`` (its charge may be in flight).
    /// - Parameter all: settle every pending intent now, whoever wrote it (when no process is paying: tests, scripts).
    @discardableResult
    public func reconcile(all: Bool = false) async throws -> ReconcileReport {
        do {
            let report = try await settleIntents(all: all)
            reconcileMeter.count(report)
            return report
        } catch {
            reconcileMeter.countFailure()
            throw error
        }
    }

    /// What every ``reconcile(all:)`` of this process did since it started, summed (for metrics).
    public var reconciliationStatistics: ReconciliationStatistics { reconcileMeter.statistics }

    private func settleIntents(all: Bool) async throws -> ReconcileReport {
        try requireRealPaymentsInProduction()
        try requireServedProcessor()
        var report = ReconcileReport()
        let nowMs = now
        // The processor's lookup cannot see a charge younger than its lag: not even `all` looks sooner.
        let lookupDelay = max(configuration.lookupDelay, configuration.paymentProcessor.lookupDelay).wholeMilliseconds
        var cursor: (Int64, String)? = nil
        while true {
            let page = try await ledger.offload { [ledger, cursor] in try ledger.openIntents(after: cursor) }
            guard let last = page.last else { break }
            cursor = (last.createdMs, last.id)
            for intent in page {
                // Age counts from the last attempt: a payment a retry just reopened may be being charged now.
                let age = nowMs - intent.attemptMs
                let due =
                    age >= lookupDelay
                    && (all || age >= configuration.intentGrace.wholeMilliseconds || !instance.isAlive(intent.owner))
                guard due else {
                    report.left += 1
                    continue
                }
                do {
                    try await settle(intent, report: &report)
                } catch {
                    report.left += 1
                }
            }
        }
        // A second look at what was closed as uncharged, once the processor's lookup has surely caught up:
        // a charge its lagging index did not show the first time is recorded now, not lost.
        let secondLookBefore = nowMs - max(lookupDelay * 10, Self.secondLookDelayMs)
        for intent in try await ledger.offload({ [ledger] in try ledger.closedUncharged(before: secondLookBefore) }) {
            do {
                try await secondLook(intent, report: &report)
            } catch {
                report.left += 1
            }
        }
        // Renewal payments left waiting for the buyer after their subscription moved on.
        try await resolveOrphanedActions(report: &report)
        // Duplicate charges (a payment recorded twice is impossible; one charged for something already owned is refunded).
        for intent in try ledger.refundsDue() where await refundDuplicate(intent) {
            report.refunded += 1
        }
        return report
    }

    /// How long after closing an intent as uncharged reconciliation looks it up once more.
    static let secondLookDelayMs: Int64 = 10 * 60 * 1000

    private func secondLook(_ intent: PaymentIntent, report: inout ReconcileReport) async throws {
        var settled = report
        try await locks.withLock(intent.paymentID) {
            guard let current = try await ledger.offload({ [ledger] in try ledger.intent(id: intent.id) }),
                current.state == .closed, current.outcome == Self.closedUncharged
            else { return }
            var lifecycle = PaymentIntentLifecycle(kind: current.kind, state: .closed(uncharged: true))
            let looked = try await processorLookup(current.request)
            switch lifecycle.lookedUp(looked) {
            case .recordPurchased(let reference):
                try await recordCharged(
                    current, reference: reference, savedMethod: looked.savedMethod, via: "second-look")
                settled.charged += 1
            case .close(let outcome):
                let nowMs = now
                try await ledger.write(account: current.accountID) { db in
                    try db.settle(current.id, .closed, outcome: outcome, nowMs: nowMs)
                }
            case .nothing, .recordDeferred, .recordFailed, .keepPending:
                break
            }
        }
        report = settled
    }

    /// The outcome of an intent reconciliation closed as not charged (before its second look).
    static let closedUncharged = PaymentIntentLifecycle.closedUncharged

    /// Records a payment the processor says it charged, as its kind records it.
    func recordCharged(
        _ intent: PaymentIntent, reference: String, savedMethod: String? = nil, via: String
    ) async throws {
        switch intent.kind {
        case .purchase:
            _ = try await completePurchase(intent, .succeeded(reference: reference, savedMethod: savedMethod), via: via)
        case .approval:
            _ = try? await completeApproval(intent, reference: reference, savedMethod: savedMethod, via: via)
        case .renewal: try await completeRenewal(intent, reference: reference, via: via)
        }
    }

    func settle(_ intent: PaymentIntent, report: inout ReconcileReport) async throws {
        var settled = report
        try await locks.withLock(intent.paymentID) {
            // Read again under the lock: a retry in this process may have settled it meanwhile.
            guard let current = try await ledger.offload({ [ledger] in try ledger.intent(id: intent.id) }),
                current.state == .pending, current.owner == intent.owner,
                current.attemptMs == intent.attemptMs
            else { return }
            var lifecycle = PaymentIntentLifecycle(kind: current.kind)
            let looked = try await processorLookup(current.request)
            switch lifecycle.lookedUp(looked) {
            case .recordPurchased(let reference):
                try await recordCharged(
                    current, reference: reference, savedMethod: looked.savedMethod, via: "reconciled")
                settled.charged += 1
            case .recordDeferred:
                _ = try await completePurchase(current, .deferred, via: "reconciled")
                settled.deferred += 1
            case .close(let outcome):
                let closedMs = now
                let changed = try await ledger.write(account: current.accountID) { db in
                    try db.settleIfUnchanged(current, .closed, outcome: outcome, nowMs: closedMs)
                }
                if changed, current.kind != .renewal { settled.closed += 1 }
            case .nothing, .recordFailed, .keepPending:
                break
            }
        }
        report = settled
    }

    /// A data dir served with one processor is not settled, approved or refunded through another
    /// (a sandbox ledger served with Stripe would otherwise be "reconciled" by the simulated processor).
    func requireServedProcessor() throws {
        if let served = try ledger.setting("payment_processor"), served != configuration.paymentProcessor.name {
            throw StoreError(
                .conflict,
                "this data dir is served with the \(served) payment processor, not \(configuration.paymentProcessor.name): give the same one (--payment-processor \(served) …)"
            )
        }
    }
}

extension TransactionRecord {
    /// The record an intent makes, before its receipt, expiry and credits.
    init(_ intent: PaymentIntent, id: String, state: TransactionState, purchaseMs: Int64, environment: StoreEnvironment)
    {
        self.init(
            id: id, originalID: id, accountID: intent.accountID,
            product: CatalogProduct(
                id: intent.productID, type: intent.productType, title: "", description: "", price: intent.unitPrice,
                currency: intent.currency),
            quantity: intent.quantity, state: state, purchaseMs: purchaseMs, expiresMs: 0,
            paymentMethod: intent.paymentMethod,
            paymentID: intent.paymentID, environment: environment)
        storefront = intent.storefront
    }
}

/// What this process's reconciliation runs did since it started: runs, runs that failed, and the intents settled
/// by outcome, summed over the runs (an intent left for later counts again at each run that leaves it).
public struct ReconciliationStatistics: Hashable, Sendable {
    /// Runs that finished.
    public var runs: UInt64 = 0
    /// Runs that stopped on an error (the ledger or the processor unreachable).
    public var failedRuns: UInt64 = 0
    /// The finished runs' reports, summed.
    public var settled = Store.ReconcileReport()
}

/// Sums ``Store/reconcile(all:)`` reports as they finish.
final class ReconcileMeter: Sendable {
    private let totals = NIOLockedValueBox(ReconciliationStatistics())

    func count(_ report: Store.ReconcileReport) {
        totals.withLockedValue { totals in
            totals.runs += 1
            totals.settled.charged += report.charged
            totals.settled.closed += report.closed
            totals.settled.left += report.left
            totals.settled.deferred += report.deferred
            totals.settled.refunded += report.refunded
        }
    }

    func countFailure() { totals.withLockedValue { $0.failedRuns += 1 } }

    var statistics: ReconciliationStatistics { totals.withLockedValue { $0 } }
}
