/// An account's customer at a payment processor that keeps customers (``PaymentProcessor/keepsCustomers``) and the
/// method saved to it, which the account's renewals and billing retries are charged to.
///
/// One per account and processor account (``processor``: the processor's name and mode, such as `stripe:test`,
/// so a test-mode customer is never charged with a live key). Created once, before the account's first
/// subscription payment; the saved method changes when a subscription's first payment saves its method or the
/// buyer replaces it.
public struct PaymentProfile: Hashable, Sendable {
    /// The account.
    public var accountID: String
    /// The processor and its mode: `stripe:test`, `stripe:live`.
    public var processor: String
    /// The processor's id for the customer (`cus_…`).
    public var customerID: String
    /// The method renewals charge (`pm_…`); empty until one is saved.
    public var paymentMethod: String
    /// When the profile was last written, milliseconds since 1970.
    public var updatedMs: Int64

    /// Creates a profile.
    public init(accountID: String, processor: String, customerID: String, paymentMethod: String = "", updatedMs: Int64)
    {
        self.accountID = accountID
        self.processor = processor
        self.customerID = customerID
        self.paymentMethod = paymentMethod
        self.updatedMs = updatedMs
    }
}
