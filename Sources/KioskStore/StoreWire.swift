import KioskAPI
import KioskRPC

// The service layer's mapping of the store's domain values to the wire
// (`kiosk.store.v1` messages and call statuses), and back for the answers an
// earlier version kept per idempotency key as wire bytes (the ledger keeps
// outcomes now: IdempotentAnswers.swift).

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
            transactionID: transactionID, originalTransactionID: transactionID, productID: productID, productType: productType,
            quantity: quantity, state: .failed, purchaseDateMs: dateMs, accountID: accountID, errorCode: code.rawValue, errorReason: reason,
            errorMessage: message, finished: true, price: price, currency: currency, environment: environment)
    }

    init(_ message: StoreV1.Transaction) {
        self.init(code: Code(rawValue: message.errorCode) ?? .unknown, reason: message.errorReason, message: message.errorMessage,
                  transactionID: message.transactionID, accountID: message.accountID, productID: message.productID,
                  productType: message.productType, quantity: message.quantity, dateMs: message.purchaseDateMs, price: message.price,
                  currency: message.currency, environment: message.environment)
    }
}

extension PurchaseOutcome {
    /// The answer as sent.
    public var message: StoreV1.PurchaseResponse {
        let transaction: StoreV1.Transaction = switch result {
        case .purchased(let record), .deferred(let record): record.message
        case .failed(let failure): failure.transactionMessage
        }
        return StoreV1.PurchaseResponse(transaction: transaction, replayed: replayed, alreadyOwned: alreadyOwned)
    }

    /// An answer the ledger kept for an idempotency key, as it was first sent (marked replayed).
    init(replaying message: StoreV1.PurchaseResponse) {
        let transaction = message.transaction ?? StoreV1.Transaction()
        switch transaction.state {
        case .purchased: result = .purchased(TransactionRecord(sent: transaction))
        case .deferred: result = .deferred(TransactionRecord(sent: transaction))
        default: result = .failed(FailedPurchase(transaction))
        }
        replayed = true
        alreadyOwned = message.alreadyOwned
    }
}

extension SpendOutcome {
    /// The answer as sent.
    public var message: StoreV1.SpendCreditsResponse { StoreV1.SpendCreditsResponse(balance: balance, replayed: replayed) }
}

extension ReceiptVerdict {
    /// The answer as sent.
    public var message: StoreV1.VerifyReceiptResponse {
        StoreV1.VerifyReceiptResponse(status: check.status.rawValue, message: check.message, receipt: check.payload,
                                      revocationDateMs: revocationMs, revocationReason: revocationReason,
                                      latestTransaction: latestTransaction, subscription: subscription)
    }
}

extension ReceiptPublicKey {
    /// The key as `PublicKeys` sends it, with its validity window (`not_after_ms` 0: not retired).
    public var message: StoreV1.PublicKey {
        StoreV1.PublicKey(keyID: id, ed25519PublicKey: rawRepresentation, notBeforeMs: notBeforeMs, notAfterMs: notAfterMs)
    }
}

extension TransactionRecord {
    /// A transaction as it was sent (an answer kept for an idempotency key): what the wire carries, no payment details.
    init(sent message: StoreV1.Transaction) {
        self.init(
            id: message.transactionID, originalID: message.originalTransactionID, accountID: message.accountID,
            product: CatalogProduct(id: message.productID, type: message.productType, title: "", price: message.price, currency: message.currency),
            quantity: message.quantity, state: message.state, purchaseMs: message.purchaseDateMs, expiresMs: message.expiresDateMs,
            paymentMethod: "", paymentID: nil, environment: message.environment)
        receipt = message.signedReceipt
        finished = message.finished
        revokedMs = message.revocationDateMs
        revocationReason = message.revocationReason
        refundCreditShortfall = message.refundCreditShortfall
    }
}
