import KioskAPI
import KioskStoreCore

/// A request whose free-text fields are checked against ``FieldLimits`` before the store acts on it.
protocol BoundedRequest {
    /// Throws ``StoreError`` INVALID_ARGUMENT (3) naming the first field over its limit.
    func checkLimits() throws
}

extension FieldLimits {
    /// ``check(_:_:max:)`` as the store's INVALID_ARGUMENT.
    static func require(_ value: String, _ field: String, max limit: Int) throws {
        do { try check(value, field, max: limit) } catch { throw StoreError.invalid(error.description) }
    }

    static func require(_ value: [UInt8], _ field: String, max limit: Int) throws {
        do { try check(value, field, max: limit) } catch { throw StoreError.invalid(error.description) }
    }

    static func requireProductIDs(_ ids: [String]) throws {
        guard ids.count <= productIDsPerRequest else {
            throw StoreError.invalid("product_ids lists \(ids.count) ids; at most \(productIDsPerRequest) are accepted")
        }
        for id in ids { try require(id, "product_ids", max: productID) }
    }

    /// The `idempotency-key` metadata, when present.
    static func requireIdempotencyKey(_ key: String?) throws {
        if let key { try require(key, "idempotency-key", max: idempotencyKey) }
    }
}

extension StoreV1.ListProductsRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.requireProductIDs(productIDs) }
}

extension StoreV1.PurchaseRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(productID, "product_id", max: FieldLimits.productID)
        try FieldLimits.require(paymentMethod, "payment_method", max: FieldLimits.paymentMethod)
        if let offer {
            try FieldLimits.require(offer.offerID, "offer.offer_id", max: FieldLimits.offerField)
            try FieldLimits.require(offer.keyID, "offer.key_id", max: FieldLimits.offerField)
            try FieldLimits.require(offer.nonce, "offer.nonce", max: FieldLimits.offerField)
            try FieldLimits.require(offer.signature, "offer.signature", max: FieldLimits.offerSignature)
        }
    }
}

extension StoreV1.UnfinishedRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(pageToken, "page_token", max: FieldLimits.pageToken) }
}

extension StoreV1.RestoreRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(pageToken, "page_token", max: FieldLimits.pageToken) }
}

extension StoreV1.HistoryRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(pageToken, "page_token", max: FieldLimits.pageToken) }
}

extension StoreV1.FinishRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(transactionID, "transaction_id", max: FieldLimits.transactionID)
    }
}

extension StoreV1.VerifyReceiptRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(signedReceipt, "signed_receipt", max: FieldLimits.signedReceipt)
    }
}

extension StoreV1.AccessTokenRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(audience, "audience", max: FieldLimits.audience) }
}

extension StoreV1.SubscriptionStatusRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(originalTransactionID, "original_transaction_id", max: FieldLimits.transactionID)
    }
}

extension StoreV1.SetAutoRenewRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(originalTransactionID, "original_transaction_id", max: FieldLimits.transactionID)
    }
}

extension StoreV1.SetPaymentMethodRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(paymentMethod, "payment_method", max: FieldLimits.paymentMethod)
    }
}

extension StoreV1.GetTransactionRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(transactionID, "transaction_id", max: FieldLimits.transactionID)
    }
}

extension StoreV1.ListTransactionsRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.requireProductIDs(productIDs)
        try FieldLimits.require(pageToken, "page_token", max: FieldLimits.pageToken)
        try FieldLimits.require(revision, "revision", max: FieldLimits.pageToken)
    }
}

extension StoreV1.RequestRefundRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(transactionID, "transaction_id", max: FieldLimits.transactionID)
        try FieldLimits.require(reason, "reason", max: FieldLimits.reason)
    }
}

extension StoreV1.RefundRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(transactionID, "transaction_id", max: FieldLimits.transactionID)
        try FieldLimits.require(reason, "reason", max: FieldLimits.reason)
    }
}

extension StoreV1.DenyRefundRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(transactionID, "transaction_id", max: FieldLimits.transactionID)
        try FieldLimits.require(reason, "reason", max: FieldLimits.reason)
    }
}

extension StoreV1.ListRefundRequestsRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(pageToken, "page_token", max: FieldLimits.pageToken) }
}

extension StoreV1.ApproveRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(transactionID, "transaction_id", max: FieldLimits.transactionID)
    }
}

extension StoreV1.ExtendSubscriptionRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(originalTransactionID, "original_transaction_id", max: FieldLimits.transactionID)
        try FieldLimits.require(reason, "reason", max: FieldLimits.reason)
    }
}

extension StoreV1.ExtendSubscriptionsRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(productID, "product_id", max: FieldLimits.productID)
        try FieldLimits.require(reason, "reason", max: FieldLimits.reason)
        try FieldLimits.require(jobID, "job_id", max: FieldLimits.offerField)
    }
}

extension StoreV1.GetExtensionJobRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(jobID, "job_id", max: FieldLimits.offerField) }
}

extension StoreV1.GrantEntitlementRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(accountID, "account_id", max: FieldLimits.transactionID)
        try FieldLimits.require(entitlementID, "entitlement_id", max: FieldLimits.offerField)
        try FieldLimits.require(reason, "reason", max: FieldLimits.reason)
    }
}

extension StoreV1.RedeemOfferCodeRequest: BoundedRequest {
    func checkLimits() throws {
        try FieldLimits.require(code, "code", max: FieldLimits.offerField)
        try FieldLimits.require(paymentMethod, "payment_method", max: FieldLimits.paymentMethod)
    }
}

extension StoreV1.CreateOfferCodesRequest: BoundedRequest {
    func checkLimits() throws {
        for (value, field) in [
            (batchID, "batch_id"), (customCode, "custom_code"), (price, "price"), (period, "period"),
        ] {
            try FieldLimits.require(value, field, max: FieldLimits.offerField)
        }
        try FieldLimits.require(productID, "product_id", max: FieldLimits.productID)
    }
}

extension StoreV1.RevokeOfferCodesRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(batchID, "batch_id", max: FieldLimits.offerField) }
}

extension StoreV1.RetireKeyRequest: BoundedRequest {
    func checkLimits() throws { try FieldLimits.require(keyID, "key_id", max: FieldLimits.offerField) }
}
