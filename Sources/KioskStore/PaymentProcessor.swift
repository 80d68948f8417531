import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A charge the store asks a payment processor to make.
public struct PaymentRequest: Hashable, Sendable {
    /// A stable id for this payment: the same purchase retried (same account and
    /// idempotency key) gets the same id, so a processor that deduplicates on it
    /// never charges twice.
    public var paymentID: String
    /// The account paying.
    public var accountID: String
    /// The product bought.
    public var productID: String
    /// Units bought.
    public var quantity: UInt32
    /// The price of one unit, as a decimal string.
    public var unitPrice: String
    /// ISO 4217 currency code.
    public var currency: String
    /// The payment method the buyer chose, e.g. `test-card:4242424242424242`.
    public var paymentMethod: String
    /// True for the charge of an approved ask-to-buy request (``PaymentProcessor/approve(_:)``).
    public var isApproval: Bool
    /// True for a subscription renewal the store charges at the end of a period, without the buyer present
    /// (a merchant-initiated charge of the stored payment method).
    public var isRenewal: Bool

    /// Creates a request.
    public init(paymentID: String, accountID: String, productID: String, quantity: UInt32, unitPrice: String, currency: String, paymentMethod: String,
                isApproval: Bool = false, isRenewal: Bool = false) {
        self.isApproval = isApproval
        self.isRenewal = isRenewal
        self.paymentID = paymentID
        self.accountID = accountID
        self.productID = productID
        self.quantity = quantity
        self.unitPrice = unitPrice
        self.currency = currency
        self.paymentMethod = paymentMethod
    }

    /// The total, `unitPrice × quantity`, in the currency's minor unit (cents),
    /// or nil when the price is not a plain decimal with at most two decimals.
    public var amountMinorUnits: Int64? {
        let parts = unitPrice.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let whole = Int64(parts[0]), whole >= 0 else { return nil }
        var cents = whole * 100
        if parts.count == 2 {
            let fraction = parts[1]
            guard (1...2).contains(fraction.count), fraction.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int64(fraction) else { return nil }
            cents += fraction.count == 1 ? value * 10 : value
        }
        let (total, overflow) = cents.multipliedReportingOverflow(by: Int64(quantity))
        return overflow ? nil : total
    }
}

/// What a payment processor answered.
public enum PaymentOutcome: Hashable, Sendable {
    /// Charged; `reference` is the processor's id for the charge.
    case succeeded(reference: String)
    /// Refused; `reason` is machine-readable (`card_declined`, `insufficient_funds`, …).
    case declined(reason: String, message: String)
    /// The buyer cancelled.
    case cancelled
    /// Waiting for someone's approval (ask to buy); charge on ``PaymentProcessor/approve(_:)``.
    case deferred
}

/// What a processor knows of a payment id, asked when the store reconciles a
/// payment whose outcome it never recorded (it crashed, or the processor did
/// not answer).
public enum PaymentLookup: Hashable, Sendable {
    /// The payment was charged; record it.
    case charged(reference: String)
    /// The processor deferred it (ask to buy): record it as DEFERRED, charged when approved.
    case deferred
    /// Nothing was charged, and nothing will be for this id (a pending attempt
    /// was cancelled by the lookup if the processor had one).
    case notCharged
}

/// The processor could not say what happened (network error, 5xx, timeout):
/// the payment may or may not have been charged. The store keeps the
/// payment's intent open and reconciles it later with ``PaymentProcessor/lookup(_:)``.
public struct PaymentProcessorError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong.
    public var message: String
    /// Creates the error.
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Takes payments. The store ships ``SimulatedPaymentProcessor`` (sandbox) and
/// ``StripePaymentProcessor``; others plug in by conforming to this protocol.
///
/// Implementations must deduplicate on ``PaymentRequest/paymentID``: the store
/// asks again for the same payment when a client retries a purchase whose
/// outcome it never recorded. Throw ``PaymentProcessorError`` when the outcome
/// is unknown; never answer `declined` for a charge that may have gone through.
public protocol PaymentProcessor: Sendable {
    /// A short name for logs and errors: `simulated`, `stripe`, ….
    var name: String { get }
    /// True for processors that take no real money at all; production refuses them.
    var isSimulated: Bool { get }
    /// True when the processor is in its test mode (a Stripe `sk_test_` key): no real money moves, and a
    /// production store refuses it; a sandbox store refuses a processor that is not in test mode.
    var isTestMode: Bool { get }
    /// How long ``lookup(_:)`` may lag behind a charge (Stripe's search index: up to a minute); pending
    /// payments are not looked up before they are this old.
    var lookupDelay: Duration { get }
    /// Charges (or refuses, or defers) a payment.
    func charge(_ request: PaymentRequest) async throws -> PaymentOutcome
    /// Charges a deferred payment once it was approved.
    func approve(_ request: PaymentRequest) async throws -> PaymentOutcome
    /// Whether the payment with `request.paymentID` was charged. Must not charge.
    func lookup(_ request: PaymentRequest) async throws -> PaymentLookup
    /// Gives back a charged payment's money; asking twice refunds once.
    func refund(_ request: PaymentRequest, reason: String) async throws
}

extension PaymentProcessor {
    public var isTestMode: Bool { isSimulated }
    public var lookupDelay: Duration { .zero }
}

/// A payment processor for development and tests, driven by the payment method:
///
/// | payment method | outcome |
/// |---|---|
/// | `test-card:` followed by 12 or more digits, e.g. `test-card:4242424242424242` | charged |
/// | `test-card:4000000000000002` | declined: `card_declined` |
/// | `test-card:4000000000009995` | declined: `insufficient_funds` |
/// | `test-cancel` | cancelled by the user |
/// | `test-ask` | deferred until approved (ask to buy) |
/// | anything else | declined: `invalid_payment_method` |
///
/// It takes no money and keeps nothing: a lookup answers what a charge of the
/// same request would have answered, as a processor that remembers would.
/// Production refuses it.
///
/// For tests across processes, `chargeLog` names a file that gets one line
/// (the payment id) per charge and approval, appended with `O_APPEND`, and
/// `delay` slows every charge and approval down, to widen races.
public struct SimulatedPaymentProcessor: PaymentProcessor {
    /// A file that gets a line per charge, or nil.
    public var chargeLog: String?
    /// How long each charge and approval takes.
    public var delay: Duration

    /// Creates the simulated processor.
    public init(chargeLog: String? = nil, delay: Duration = .zero) {
        self.chargeLog = chargeLog
        self.delay = delay
    }

    /// Reads `KIOSK_SIMULATED_CHARGE_LOG` and `KIOSK_SIMULATED_DELAY_MS` from the environment (test aids).
    public static func fromEnvironment() -> SimulatedPaymentProcessor {
        let environment = ProcessInfo.processInfo.environment
        let delay = environment["KIOSK_SIMULATED_DELAY_MS"].flatMap(Int64.init).map { Duration.milliseconds($0) } ?? .zero
        return SimulatedPaymentProcessor(chargeLog: environment["KIOSK_SIMULATED_CHARGE_LOG"].flatMap { $0.isEmpty ? nil : $0 }, delay: delay)
    }

    private func charged(_ request: PaymentRequest) async -> PaymentOutcome {
        if let chargeLog {
            let fd = open(chargeLog, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
            if fd >= 0 {
                let line = Array((request.paymentID + "\n").utf8)
                _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
        }
        return .succeeded(reference: "sim_" + request.paymentID)
    }

    public var name: String { "simulated" }
    public var isSimulated: Bool { true }

    /// True for `test-card:`, `test-cancel` and `test-ask` methods, which only a sandbox store accepts.
    public static func isTestMethod(_ method: String) -> Bool {
        method.hasPrefix("test-card:") || method == "test-cancel" || method == "test-ask"
    }

    public func charge(_ request: PaymentRequest) async -> PaymentOutcome {
        if delay > .zero { try? await Task.sleep(for: delay) }
        if case .succeeded = outcome(request) { return await charged(request) }
        return outcome(request)
    }

    private func outcome(_ request: PaymentRequest) -> PaymentOutcome {
        let method = request.paymentMethod
        switch method {
        case "test-cancel":
            return .cancelled
        case "test-ask":
            return .deferred
        case "test-card:4000000000000002":
            return .declined(reason: "card_declined", message: "the card was declined")
        case "test-card:4000000000009995":
            return .declined(reason: "insufficient_funds", message: "the card has insufficient funds")
        default:
            let prefix = "test-card:"
            guard method.hasPrefix(prefix), method.count > prefix.count + 11,
                  method.dropFirst(prefix.count).allSatisfy({ $0.isASCII && $0.isNumber }) else {
                return .declined(reason: "invalid_payment_method",
                                 message: "unknown payment method \"\(method)\"; use test-card:<12 or more digits>, test-cancel or test-ask")
            }
            return .succeeded(reference: "sim_" + request.paymentID)
        }
    }

    public func approve(_ request: PaymentRequest) async -> PaymentOutcome {
        if delay > .zero { try? await Task.sleep(for: delay) }
        return await charged(request)
    }

    public func lookup(_ request: PaymentRequest) async -> PaymentLookup {
        if request.isApproval { return .charged(reference: "sim_" + request.paymentID) }  // an approval always charges
        switch outcome(request) {
        case .succeeded(let reference): return .charged(reference: reference)
        case .deferred: return .deferred
        default: return .notCharged
        }
    }

    public func refund(_ request: PaymentRequest, reason: String) async {}
}
