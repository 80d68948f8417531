import KioskAPI
import KioskStoreCore

// Saved payment methods: what renewals and billing retries are charged to.
//
// A processor that keeps customers (Stripe) charges a renewal only to a method saved to the buyer's customer for
// off-session use: the store keeps one customer per account and processor account (``PaymentProfile``, created
// before the account's first subscription payment), asks that payment to save its method, and renews with the
// saved one; a subscription with none is declined without asking the processor (billing retry, until the buyer
// saves one). Other processors renew with the subscription's last payment method, as it is.
extension Store {
    /// The profile key of the store's processor: its name and mode (`stripe:test`, `stripe:live`).
    var paymentProfileKey: String {
        let processor = configuration.paymentProcessor
        return "\(processor.name):\(processor.isTestMode ? "test" : "live")"
    }

    /// The reason a renewal is declined with when the processor keeps customers and the account has no saved method.
    static let methodNotSavedReason = "payment_method_not_saved"

    /// The account's customer at the processor: the one the ledger keeps, else a new one, kept. Two calls racing
    /// for a new account both ask the processor (which answers one customer per account) and keep the first.
    func paymentProfile(accountID: String) async throws -> PaymentProfile {
        let key = paymentProfileKey
        let kept = try await ledger.paymentProfile(account: accountID, processor: key)
        if let kept, !kept.customerID.isEmpty { return kept }
        // A profile without a customer is one the store forgot (``forgetCustomer``): a new generation of customer,
        // the same for every process that reads the same forgotten profile.
        let customer = try await processorCall("create_customer") {
            try await configuration.paymentProcessor.createCustomer(
                accountID: accountID, generation: kept.map { String($0.updatedMs) } ?? "")
        }
        let nowMs = now
        return try await ledger.write(account: accountID) { db -> PaymentProfile in
            if let kept = try db.paymentProfile(account: accountID, processor: key), !kept.customerID.isEmpty {
                return kept
            }
            let profile = PaymentProfile(accountID: accountID, processor: key, customerID: customer, updatedMs: nowMs)
            try db.savePaymentProfile(profile)
            return profile
        }
    }

    /// Forgets the account's customer `customerID` (the processor answered that it has no such customer, or no longer
    /// one): the saved method goes with it, and the next subscription payment or saved method makes a new customer.
    func forgetCustomer(accountID: String, customerID: String) async throws {
        let key = paymentProfileKey
        let nowMs = now
        try await ledger.write(account: accountID) { db in
            guard var profile = try db.paymentProfile(account: accountID, processor: key),
                profile.customerID == customerID
            else { return }
            profile.customerID = ""
            profile.paymentMethod = ""
            profile.updatedMs = nowMs
            try db.savePaymentProfile(profile)
        }
    }

    /// The processor's answer to a purchase's or an approval's charge (``firstPaymentRequest(_:)``). A subscription's
    /// first payment of nothing (a free trial, an upgrade fully credited) on a processor that keeps customers still
    /// saves the buyer's method for the renewals, without a charge: a method the processor refuses fails the purchase.
    func chargeFirstPayment(_ intent: PaymentIntent, approving: Bool = false) async throws -> PaymentOutcome {
        let processor = configuration.paymentProcessor
        let request = try await firstPaymentRequest(intent)
        if PaymentIntentLifecycle.plan(for: request.amount) == .nothingToCharge {
            // Nothing to charge is never sent to the processor; only a method to save for the renewals is.
            guard savesMethod(intent) else { return .succeeded(reference: Self.noChargeReference) }
            let profile = try await paymentProfile(accountID: intent.accountID)
            switch try await processor.saveMethod(
                intent.paymentMethod, customer: profile.customerID, accountID: intent.accountID)
            {
            case .saved(let method):
                return .succeeded(reference: Self.noChargeReference, savedMethod: method)
            case .declined(let reason, let message):
                if reason == PaymentOutcome.customerMissingReason {
                    try await forgetCustomer(accountID: intent.accountID, customerID: profile.customerID)
                }
                return .declined(reason: reason, message: message)
            }
        }
        let outcome =
            approving ? try await processor.approve(request) : try await processorCharge(request)
        if case .declined(PaymentOutcome.customerMissingReason, _) = outcome, let customer = request.customer {
            try await forgetCustomer(accountID: intent.accountID, customerID: customer)
        }
        return outcome
    }

    /// The processor's request for a purchase's or an approval's charge: a subscription's first payment on a
    /// processor that keeps customers goes to the account's customer and saves its method.
    func firstPaymentRequest(_ intent: PaymentIntent) async throws -> PaymentRequest {
        var request = intent.request
        guard savesMethod(intent), PaymentIntentLifecycle.plan(for: request.amount) != .nothingToCharge else {
            return request
        }
        request.customer = try await paymentProfile(accountID: intent.accountID).customerID
        request.savesMethod = true
        return request
    }

    /// True for a subscription's payment on a processor that keeps customers: its first payment saves its method
    /// to the account's customer, for the renewals.
    func savesMethod(_ intent: PaymentIntent) -> Bool {
        configuration.paymentProcessor.keepsCustomers && intent.productType == .autoRenewableSubscription
    }

    /// Inside the write that records a subscription's first payment: the method the processor saved becomes the
    /// one the account's renewals charge.
    func keepSavedMethod(
        _ method: String?, for intent: PaymentIntent, nowMs: Int64, _ db: any StoreRepositories
    )
        throws
    {
        guard let method, !method.isEmpty, savesMethod(intent),
            var profile = try db.paymentProfile(account: intent.accountID, processor: paymentProfileKey)
        else { return }
        profile.paymentMethod = method
        profile.updatedMs = nowMs
        try db.savePaymentProfile(profile)
    }

    /// What a renewal is charged to, read inside the write that starts it: the customer and its saved method when
    /// the processor keeps customers (nil customer or empty method: none saved), else the subscription's method.
    func renewalMethod(
        for row: Subscription, _ db: any StoreRepositories
    ) throws -> (
        method: String, customer: String?
    ) {
        guard configuration.paymentProcessor.keepsCustomers else { return (row.paymentMethod, nil) }
        guard let profile = try db.paymentProfile(account: row.accountID, processor: paymentProfileKey),
            !profile.customerID.isEmpty
        else {
            return ("", nil)
        }
        return (profile.paymentMethod, profile.customerID)
    }

    /// A buyer's new payment method for renewals, as saved.
    public struct SavedMethod: Hashable, Sendable {
        /// The method renewals and billing retries now charge (the processor's id for it).
        public var paymentMethod: String
        /// The account's live subscriptions (active, in grace or in billing retry) it applies to.
        public var subscriptions: Int
    }

    /// Replaces the payment method the account's renewals and billing retries are charged to. A processor that
    /// keeps customers saves it to the account's customer first (nothing is charged); one it refuses changes
    /// nothing.
    /// - Throws: ``StoreError`` 3 for an empty method; 9 when the processor refuses it (the reason in the message);
    ///   14 when the processor does not answer.
    public func setPaymentMethod(account: AccountRecord, paymentMethod: String) async throws -> SavedMethod {
        guard !paymentMethod.isEmpty else {
            throw StoreError.invalid("payment_method is required, e.g. \"test-card:4242424242424242\"")
        }
        try requireRealPaymentsInProduction()
        try requireServedProcessor()
        let processor = configuration.paymentProcessor
        let saving: MethodSaving
        var profile: PaymentProfile?
        do {
            if processor.keepsCustomers { profile = try await paymentProfile(accountID: account.id) }
            var answer = try await processor.saveMethod(
                paymentMethod, customer: profile?.customerID, accountID: account.id)
            if case .declined(PaymentOutcome.customerMissingReason, _) = answer, let stale = profile {
                // The kept customer is gone at the processor: a new one, asked once more.
                try await forgetCustomer(accountID: account.id, customerID: stale.customerID)
                profile = try await paymentProfile(accountID: account.id)
                answer = try await processor.saveMethod(
                    paymentMethod, customer: profile?.customerID, accountID: account.id)
            }
            saving = answer
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(
                .processorUnavailable,
                "the payment processor did not answer (\(error)); the saved payment method is unchanged: try again")
        }
        guard case .saved(let saved) = saving else {
            if case .declined(let reason, let message) = saving {
                throw StoreError(.conflict, "the payment processor refused the payment method (\(reason)): \(message)")
            }
            throw StoreError(.conflict, "the payment processor refused the payment method")
        }
        let nowMs = now
        let key = paymentProfileKey
        let customerProfile = profile
        let products = catalog.products.filter { $0.type == .autoRenewableSubscription }.map(\.id)
        let count = try await ledger.write(account: account.id) { db -> Int in
            let live = try db.subscriptions(accountID: account.id, productIDs: products).filter(\.isLive)
            if let customerProfile {
                var kept = try db.paymentProfile(account: account.id, processor: key) ?? customerProfile
                kept.paymentMethod = saved
                kept.updatedMs = nowMs
                try db.savePaymentProfile(kept)
            } else {
                for var row in live where row.paymentMethod != saved {
                    row.paymentMethod = saved
                    try db.saveSubscription(row, nowMs: nowMs)
                }
            }
            return live.count
        }
        return SavedMethod(paymentMethod: saved, subscriptions: count)
    }
}
