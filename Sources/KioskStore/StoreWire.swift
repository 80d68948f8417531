import KioskAPI
import KioskRPC
import KioskSigning

// The service layer's mapping of the store's domain values to the wire
// (`kiosk.store.v1` messages and call statuses), and back for answers a ledger
// holds per idempotency key as wire bytes (what the store writes is the
// outcome: IdempotentAnswers.swift).

extension StoreError: RPCErrorConvertible {
    /// The call status a refusal of this kind ends a call with.
    public var code: StatusCode {
        switch kind {
        case .invalidRequest: .invalidArgument
        case .unauthenticated: .unauthenticated
        case .notFound: .notFound
        case .keyReused: .alreadyExists
        case .conflict: .failedPrecondition
        case .inProgress: .aborted
        case .processorUnavailable: .unavailable
        case .internalFailure: .internal
        case .rateLimited: .resourceExhausted
        }
    }

    public var rpcError: RPCError { RPCError(code, message) }
}

extension LedgerError: RPCErrorConvertible {
    /// The call status a ledger failure ends a call with: UNAVAILABLE while the database does not answer (the
    /// caller retries), ABORTED for a transaction the database could not serialize, INTERNAL otherwise.
    public var code: StatusCode {
        switch kind {
        case .unavailable: .unavailable
        case .serializationFailure: .aborted
        case .uniqueViolation, .checkViolation, .schema, .refused: .internal
        }
    }

    public var rpcError: RPCError { RPCError(code, message) }
}

extension FailedPurchase {
    /// The FAILED transaction as sent.
    public var transactionMessage: StoreV1.Transaction {
        StoreV1.Transaction(
            transactionID: transactionID, originalTransactionID: transactionID, productID: productID,
            productType: productType?.wire ?? .productTypeUnspecified,
            quantity: quantity, state: .failed, purchaseDateMs: dateMs, accountID: accountID, errorCode: code.rawValue,
            errorReason: reason,
            errorMessage: message, finished: true, price: price, currency: currency, environment: environment.wire)
    }

    init(_ message: StoreV1.Transaction) throws {
        guard let environment = StoreEnvironment(wire: message.environment) else {
            throw LedgerError(
                .schema,
                "a kept answer holds failed transaction \(message.transactionID) in no environment this version knows")
        }
        self.init(
            code: Code(rawValue: message.errorCode) ?? .unknown, reason: message.errorReason,
            message: message.errorMessage,
            transactionID: message.transactionID, accountID: message.accountID, productID: message.productID,
            productType: ProductKind(wire: message.productType), quantity: message.quantity,
            dateMs: message.purchaseDateMs, price: message.price,
            currency: message.currency, environment: environment)
    }
}

extension PurchaseOutcome {
    /// The answer as sent.
    public var message: StoreV1.PurchaseResponse {
        let transaction: StoreV1.Transaction =
            switch result {
            case .purchased(let record), .deferred(let record): record.message
            case .failed(let failure): failure.transactionMessage
            }
        return StoreV1.PurchaseResponse(transaction: transaction, replayed: replayed, alreadyOwned: alreadyOwned)
    }

    /// An answer the ledger kept for an idempotency key, as it was first sent (marked replayed).
    init(replaying message: StoreV1.PurchaseResponse) throws {
        let transaction = message.transaction ?? StoreV1.Transaction()
        switch transaction.state {
        case .purchased: result = .purchased(try TransactionRecord(sent: transaction))
        case .deferred: result = .deferred(try TransactionRecord(sent: transaction))
        default: result = .failed(try FailedPurchase(transaction))
        }
        replayed = true
        alreadyOwned = message.alreadyOwned
    }
}

extension SpendOutcome {
    /// The answer as sent.
    public var message: StoreV1.SpendCreditsResponse {
        StoreV1.SpendCreditsResponse(balance: balance, replayed: replayed)
    }
}

extension ReceiptVerdict {
    /// The answer as sent.
    public var message: StoreV1.VerifyReceiptResponse {
        StoreV1.VerifyReceiptResponse(
            status: check.status.rawValue, message: check.message, receipt: check.payload,
            revocationDateMs: revocationMs, revocationReason: revocationReason,
            latestTransaction: latestTransaction, subscription: subscription,
            entitlements: entitlements.map(\.message))
    }
}

extension OfferCodeBatch {
    /// The batch as sent.
    public var message: StoreV1.OfferCodeBatch {
        StoreV1.OfferCodeBatch(
            batchID: id, kind: kind.rawValue, productID: productID, price: price, period: period, quantity: quantity,
            redemptionLimit: UInt64(max(0, redemptionLimit)), redeemed: UInt64(max(0, redeemed)),
            expiresMs: expiresMs, revokedMs: revokedMs, createdMs: createdMs)
    }
}

extension ActiveEntitlement {
    /// The entitlement as sent.
    public var message: StoreV1.Entitlement {
        StoreV1.Entitlement(
            entitlementID: id, productID: productID, transactionID: transactionID,
            originalTransactionID: originalTransactionID, source: source.rawValue, expiresMs: expiresMs,
            purchaseMs: purchaseMs, willRenew: willRenew)
    }
}

extension ReceiptPublicKey {
    /// The key as `PublicKeys` sends it, with its validity window (`not_after_ms` 0: not retired).
    public var message: StoreV1.PublicKey {
        StoreV1.PublicKey(
            keyID: id, ed25519PublicKey: rawRepresentation, notBeforeMs: notBeforeMs, notAfterMs: notAfterMs)
    }
}

extension TransactionRecord {
    /// A transaction as it was sent (an answer kept for an idempotency key): what the wire carries, no payment details.
    init(sent message: StoreV1.Transaction) throws {
        guard let type = ProductKind(wire: message.productType), let state = TransactionState(wire: message.state),
            let environment = StoreEnvironment(wire: message.environment)
        else {
            throw LedgerError(
                .schema, "a kept answer holds transaction \(message.transactionID) this version cannot read")
        }
        self.init(
            id: message.transactionID, originalID: message.originalTransactionID, accountID: message.accountID,
            product: CatalogProduct(
                id: message.productID, type: type, title: "", price: message.price, currency: message.currency),
            quantity: message.quantity, state: state, purchaseMs: message.purchaseDateMs,
            expiresMs: message.expiresDateMs,
            paymentMethod: "", paymentID: nil, environment: environment)
        receipt = message.signedReceipt
        finished = message.finished
        revokedMs = message.revocationDateMs
        revocationReason = message.revocationReason
        refundCreditShortfall = message.refundCreditShortfall
        storefront = message.storefront
    }
}

// The domain's enums ⇄ the wire's. The domain's are closed; the wire's are open (a newer peer may
// send a value this version does not know), so reading one back can fail.

extension ProductKind {
    /// The receipt format's product type.
    public var wire: ReceiptV1.ProductType { ReceiptV1.ProductType(rawValue: rawValue) }
    /// The kind a wire product type names; nil for UNSPECIFIED or a value this version does not know.
    public init?(wire: ReceiptV1.ProductType) { self.init(rawValue: wire.rawValue) }
}

extension TransactionState {
    public var wire: StoreV1.TransactionState { StoreV1.TransactionState(rawValue: rawValue) }
    public init?(wire: StoreV1.TransactionState) { self.init(rawValue: wire.rawValue) }
}

extension StoreEnvironment {
    public var wire: ReceiptV1.Environment { ReceiptV1.Environment(rawValue: rawValue) }
    public init?(wire: ReceiptV1.Environment) { self.init(rawValue: wire.rawValue) }
}

extension EventKind {
    public var wire: StoreV1.EventType { StoreV1.EventType(rawValue: rawValue) }
    /// Both are open: every wire value has its kind.
    public init(wire: StoreV1.EventType) { self.init(rawValue: wire.rawValue) }
}

extension StoreV1.EventType {
    /// The name without its prefix, as webhooks and `kiosk-store events` print it ("REFUNDED").
    public var shortName: String { EventKind(wire: self).shortName }

    /// The type named `name` ("refunded", "REFUNDED" or "EVENT_TYPE_REFUNDED").
    public init?(shortName name: String) {
        guard let kind = EventKind(shortName: name) else { return nil }
        self = kind.wire
    }
}

extension Subscription.ExpirationReason {
    public var wire: StoreV1.ExpirationReason { StoreV1.ExpirationReason(rawValue: rawValue) }
}

extension TransactionRecord {
    /// The transaction as sent on the wire.
    public var message: StoreV1.Transaction {
        StoreV1.Transaction(
            transactionID: id, originalTransactionID: originalID, productID: productID, productType: productType.wire,
            quantity: quantity, state: state.wire, purchaseDateMs: purchaseMs, expiresDateMs: expiresMs,
            accountID: accountID,
            errorCode: errorCode, errorReason: errorReason, errorMessage: errorMessage, signedReceipt: receipt ?? [],
            finished: finished, revocationDateMs: revokedMs, revocationReason: revocationReason, price: price,
            currency: currency, environment: environment.wire, refundCreditShortfall: refundCreditShortfall,
            periodStartMs: periodStartMs,
            offerID: offerID, storefront: storefront)
    }
}

extension RevocationRecord {
    /// The revocation as sent on the wire.
    public var message: StoreV1.Revocation {
        StoreV1.Revocation(
            cursor: cursor, transactionID: transactionID, originalTransactionID: originalTransactionID,
            revocationDateMs: revokedMs, reason: reason, creditShortfall: creditShortfall, accountID: accountID)
    }
}

extension TransactionRecord {
    init(
        id: String, originalID: String, accountID: String, product: CatalogProduct, quantity: UInt32,
        state: TransactionState, purchaseMs: Int64, expiresMs: Int64, paymentMethod: String, paymentID: String?,
        environment: StoreEnvironment
    ) {
        self.init(
            id: id, originalID: originalID, accountID: accountID, productID: product.id, productType: product.type,
            quantity: quantity,
            state: state, purchaseMs: purchaseMs, expiresMs: expiresMs, price: product.price,
            currency: product.currency,
            paymentMethod: paymentMethod, paymentID: paymentID, environment: environment)
    }
}

extension PaymentIntent {
    init(
        kind: Kind, paymentID: String, transactionID: String, accountID: String, product: CatalogProduct,
        quantity: UInt32,
        unitPrice: String, currency: String, paymentMethod: String, purchaseMs: Int64, idempotencyKey: String?,
        requestHash: [UInt8],
        owner: String
    ) {
        self.init(
            kind: kind, paymentID: paymentID, transactionID: transactionID, accountID: accountID, productID: product.id,
            productType: product.type, creditsPerUnit: product.credits,
            subscriptionPeriod: product.subscriptionPeriod?.description ?? "",
            quantity: quantity, unitPrice: unitPrice, currency: currency, paymentMethod: paymentMethod,
            purchaseMs: purchaseMs,
            idempotencyKey: idempotencyKey, requestHash: requestHash, owner: owner, createdMs: purchaseMs,
            attemptMs: purchaseMs)
    }
}

extension EventRecord {
    /// The event as signed and sent.
    public func message(environment: StoreEnvironment) -> StoreV1.Event {
        StoreV1.Event(
            eventID: id, type: type.wire, accountID: accountID, transactionID: transactionID,
            originalTransactionID: originalTransactionID,
            productID: productID, createdMs: createdMs, reason: reason, creditShortfall: creditShortfall,
            autoRenew: autoRenew,
            price: price, expirationReason: expirationReason.wire, environment: environment.wire, actor: actor,
            entitlementID: entitlementID, expiresMs: expiresMs, storefront: storefront, currency: currency)
    }
}

extension TransactionFilter {
    /// The filters of a ListTransactions request.
    /// - Throws: ``StoreError`` 3 for a `revoked` other than 0, 1, 2, more than 100 products or types, or a type or state
    ///   this version does not know (a filter that could only match nothing is a mistake, not a question).
    public init(_ request: StoreV1.ListTransactionsRequest) throws {
        guard request.revoked <= 2 else {
            throw StoreError.invalid(
                "revoked is 0 (any), 1 (only revoked) or 2 (only not revoked), not \(request.revoked)")
        }
        guard request.productIDs.count <= 100, request.productTypes.count <= 100 else {
            throw StoreError.invalid("at most 100 product_ids and 100 product_types")
        }
        let types = try request.productTypes.map { type in
            guard let kind = ProductKind(wire: type) else {
                throw StoreError.invalid("product_types holds \(type), not a product type")
            }
            return kind
        }
        var state: TransactionState?
        if request.state != .transactionStateUnspecified {
            guard let known = TransactionState(wire: request.state) else {
                throw StoreError.invalid("state is \(request.state), not a transaction state")
            }
            state = known
        }
        self.init(
            productIDs: request.productIDs, productTypes: types, state: state,
            revoked: request.revoked == 0 ? nil : request.revoked == 1)
    }
}

// MARK: - Catalog

extension CatalogProduct {
    /// The product as sent on the wire.
    public var message: StoreV1.Product {
        StoreV1.Product(
            id: id, type: type.wire, title: title, description: description, price: price, currency: currency,
            creditsPerUnit: credits, maxQuantity: maxQuantity, hostedContent: hostedContent,
            subscriptionPeriod: subscriptionPeriod?.description ?? "", subscriptionGroup: subscriptionGroup,
            groupLevel: groupLevel,
            gracePeriod: type == .autoRenewableSubscription ? gracePeriod?.description ?? "" : "",
            billingRetryPeriod: type == .autoRenewableSubscription ? billingRetryPeriod.description : "",
            introductoryOffer: introductoryOffer?.message, promotionalOffers: promotionalOffers.map(\.message),
            entitlements: entitlements)
    }
}

extension OfferTerms {
    /// The terms as sent on the wire.
    public var message: StoreV1.OfferInfo {
        StoreV1.OfferInfo(id: id, price: price, period: period.description, periods: UInt32(periods))
    }
}
