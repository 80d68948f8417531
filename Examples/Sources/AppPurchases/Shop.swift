import Kiosk

/// An app's purchase logic on the Kiosk SDK: credit packs to spend, and a "pro" subscription that unlocks a
/// feature. Every purchase it makes is finished once delivered; whether pro is unlocked is asked of the
/// store (the account's current entitlements), never kept on the device.
///
/// ```swift
/// let shop = Shop(kiosk: try KioskClient(configuration: configuration))
/// switch try await shop.buyCredits("credits.5", quantity: 2) {
/// case .purchased: show(try await shop.creditBalance)
/// case .declined(let reason): tell("The card was declined: \(reason)")
/// case .pending, .cancelled, .notAllowed: break
/// }
/// if try await shop.isProUnlocked { enableProFeatures() }
/// ```
public struct Shop: Sendable {
    /// What became of a purchase.
    public enum Outcome: Hashable, Sendable {
        /// Bought, delivered and finished.
        case purchased(Transaction)
        /// Waiting for approval (ask to buy), or queued until the store can be reached: it arrives on the
        /// client's `transactionUpdates`.
        case pending
        /// The buyer cancelled.
        case cancelled
        /// The payment was refused (a declined card, insufficient funds), with the store's reason.
        case declined(String)
        /// The account may not make payments, with the store's reason.
        case notAllowed(String)
    }

    /// The SDK client the shop buys through.
    public let kiosk: KioskClient
    /// The subscription that unlocks pro.
    public let proProductID: String
    /// How the shop pays (a test card against a sandbox store).
    public let paymentMethod: String

    /// Creates a shop on `kiosk`.
    public init(
        kiosk: KioskClient, proProductID: String = "pro.monthly",
        paymentMethod: String = "test-card:4242424242424242"
    ) {
        self.kiosk = kiosk
        self.proProductID = proProductID
        self.paymentMethod = paymentMethod
    }

    // MARK: Credits

    /// The account's credits.
    public var creditBalance: UInt64 {
        get async throws { try await kiosk.creditBalance }
    }

    /// Buys `quantity` packs of the consumable `productID`; the credits are on the balance once it is
    /// `.purchased`.
    public func buyCredits(_ productID: String, quantity: UInt32 = 1) async throws -> Outcome {
        try await buy(productID, quantity: quantity, offer: nil)
    }

    /// Spends `amount` credits; returns the balance left, or nil when the account has too few (nothing spent).
    public func spendCredits(_ amount: Int64) async throws -> UInt64? {
        do {
            return try await kiosk.spendCredits(amount)
        } catch let error as KioskError where error.code == .insufficientCredits {
            return nil
        }
    }

    // MARK: Pro

    /// True while the account is entitled to the pro subscription, by the store's clock: paid for (or in
    /// its free trial, or its grace period), not refunded, not expired.
    public var isProUnlocked: Bool {
        get async throws {
            try await kiosk.currentEntitlements.contains { $0.productID == proProductID }
        }
    }

    /// Subscribes to pro, with its introductory offer (a free trial) when the account may still have it.
    /// - Throws: ``KioskError`` `productUnavailable` when the store does not sell the subscription.
    public func unlockPro() async throws -> Outcome {
        guard let pro = try await kiosk.products(for: [proProductID]).products.first else {
            throw KioskError(.productUnavailable, "the store does not sell \(proProductID)")
        }
        let eligible = try await kiosk.isEligibleForIntroOffer(pro)
        return try await buy(pro.id, quantity: 1, offer: eligible ? .introductory : nil)
    }

    /// Turns the pro subscription's auto-renew off: it stays unlocked to the end of the period paid for,
    /// then locks.
    public func cancelPro() async throws {
        for status in try await kiosk.subscriptionStatus()
        where status.productID == proProductID && status.isEntitled && status.willAutoRenew {
            try await kiosk.setAutoRenew(originalTransactionID: status.originalTransactionID, false)
        }
    }

    // MARK: Buying

    private func buy(_ productID: String, quantity: UInt32, offer: SubscriptionOffer?) async throws -> Outcome {
        let result: PurchaseResult
        do {
            result = try await kiosk.purchase(
                productID: productID, quantity: quantity, paymentMethod: paymentMethod, offer: offer)
        } catch let error as KioskError where error.code == .paymentInvalid {
            return .declined(error.message)
        } catch let error as KioskError where error.code == .paymentNotAllowed {
            return .notAllowed(error.message)
        }
        switch result {
        case .success(let transaction):
            // Credits are kept by the store and pro is asked of it: nothing to deliver here but the finish.
            try await kiosk.finish(transaction)
            return .purchased(transaction)
        case .pending:
            return .pending
        case .userCancelled:
            return .cancelled
        }
    }
}
