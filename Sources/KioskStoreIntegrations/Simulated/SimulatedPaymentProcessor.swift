import Foundation
import KioskStoreCore

#if canImport(Glibc)
import Glibc
#endif

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
        let delay =
            environment["KIOSK_SIMULATED_DELAY_MS"].flatMap(Int64.init).map { Duration.milliseconds($0) } ?? .zero
        return SimulatedPaymentProcessor(
            chargeLog: environment["KIOSK_SIMULATED_CHARGE_LOG"].flatMap { $0.isEmpty ? nil : $0 }, delay: delay)
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
                method.dropFirst(prefix.count).allSatisfy({ $0.isASCII && $0.isNumber })
            else {
                return .declined(
                    reason: "invalid_payment_method",
                    message:
                        "unknown payment method \"\(method)\"; use test-card:<12 or more digits>, test-cancel or test-ask"
                )
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
        case .succeeded(let reference, _): return .charged(reference: reference)
        case .deferred: return .deferred
        default: return .notCharged
        }
    }

    public func refund(_ request: PaymentRequest, reason: String) async {}

    /// Saves a `test-card:` method that a charge would take; a declining card is refused with its decline, as a
    /// processor that checks the card when it saves it; `test-cancel`, `test-ask` and anything else are not cards.
    public func saveMethod(_ method: String, customer: String?, accountID: String) async -> MethodSaving {
        let request = PaymentRequest(
            paymentID: "", accountID: accountID, productID: "", quantity: 1, unitPrice: "0", currency: "USD",
            paymentMethod: method)
        guard method.hasPrefix("test-card:") else {
            return .declined(
                reason: "invalid_payment_method",
                message: "\"\(method)\" is not a card to save for renewals; use test-card:<12 or more digits>")
        }
        switch outcome(request) {
        case .succeeded: return .saved(method: method)
        case .declined(let reason, let message): return .declined(reason: reason, message: message)
        default: return .declined(reason: "invalid_payment_method", message: "\"\(method)\" cannot be saved")
        }
    }
}
