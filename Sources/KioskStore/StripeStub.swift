// TEMPORARY stub until StripePaymentProcessor.swift lands.
public struct StripePaymentProcessor: PaymentProcessor {
    public init(secretKey: String, baseURL: String = "https://api.stripe.com") {}
    public var name: String { "stripe" }
    public var isSimulated: Bool { false }
    public func charge(_ request: PaymentRequest) async throws -> PaymentOutcome { throw PaymentProcessorError("stub") }
    public func approve(_ request: PaymentRequest) async throws -> PaymentOutcome { throw PaymentProcessorError("stub") }
    public func lookup(_ request: PaymentRequest) async throws -> PaymentLookup { .notCharged }
    public func refund(_ request: PaymentRequest, reason: String) async throws {}
}
