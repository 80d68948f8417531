import Foundation
import KioskAPI

/// What the ledger keeps for an idempotency key: the outcome, as JSON, never its wire encoding. A replay
/// re-reads the transaction the outcome names and encodes the answer as the wire is now, so the stored form
/// does not depend on `kiosk.store.v1` and a transaction's later changes (an approval, a refund) show.
enum StoredAnswer: Codable, Hashable {
    /// A purchase that recorded (or, already owned, found) this transaction.
    case purchase(transactionID: String, alreadyOwned: Bool)
    /// A purchase refused or declined: nothing recorded but this.
    case failedPurchase(StoredFailure)
    /// A spend of credits, and the balance after it.
    case spend(balance: UInt64)

    /// A refused purchase's facts.
    struct StoredFailure: Codable, Hashable {
        var code: UInt32, reason: String, message: String, transactionID: String, accountID: String, productID: String
        var productType: Int32, quantity: UInt32, dateMs: Int64, price: String, currency: String, environment: Int32
    }

    init(_ outcome: PurchaseOutcome) {
        switch outcome.result {
        case .purchased(let record), .deferred(let record):
            self = .purchase(transactionID: record.id, alreadyOwned: outcome.alreadyOwned)
        case .failed(let failure):
            self = .failedPurchase(
                StoredFailure(
                    code: failure.code.rawValue, reason: failure.reason, message: failure.message,
                    transactionID: failure.transactionID,
                    accountID: failure.accountID, productID: failure.productID,
                    productType: failure.productType?.rawValue ?? 0,
                    quantity: failure.quantity, dateMs: failure.dateMs, price: failure.price,
                    currency: failure.currency,
                    environment: failure.environment.rawValue))
        }
    }

    /// The bytes the ledger keeps: JSON, which starts with `{` (a byte no `PurchaseResponse` or
    /// `SpendCreditsResponse` starts with: field 15, a group, is not used).
    func encoded() throws -> [UInt8] { Array(try JSONEncoder().encode(self)) }

    /// True for an answer kept as its wire bytes (a `PurchaseResponse` or `SpendCreditsResponse`), not JSON.
    static func isLegacy(_ bytes: [UInt8]) -> Bool { bytes.first != UInt8(ascii: "{") }

    static func decoded(_ bytes: [UInt8]) throws -> StoredAnswer {
        do {
            return try JSONDecoder().decode(StoredAnswer.self, from: Data(bytes))
        } catch {
            throw StoreError(.internalFailure, "the ledger's answer for an idempotency key does not decode: \(error)")
        }
    }
}

extension PurchaseOutcome {
    /// The environment a kept failure names.
    private static func environment(_ raw: Int32) throws -> StoreEnvironment {
        guard let environment = StoreEnvironment(rawValue: raw) else {
            throw LedgerError(.schema, "a kept answer names environment \(raw)")
        }
        return environment
    }

    /// A purchase's answer replayed from what the ledger kept for its key (inside the write that checks it).
    static func replaying(_ bytes: [UInt8], _ db: any StoreRepositories) throws -> PurchaseOutcome {
        if StoredAnswer.isLegacy(bytes) {
            return try PurchaseOutcome(replaying: try StoreV1.PurchaseResponse(serializedBytes: bytes))
        }
        switch try StoredAnswer.decoded(bytes) {
        case .purchase(let transactionID, let alreadyOwned):
            guard let record = try db.transaction(id: transactionID) else {
                throw StoreError(
                    .internalFailure,
                    "transaction \(transactionID), the answer kept for this idempotency key, is not in the ledger")
            }
            // A deferred purchase since declined is FAILED now: replayed as the failure it became.
            let result: Result =
                switch record.state {
                case .deferred: .deferred(record)
                case .failed: .failed(try FailedPurchase(record.message))
                default: .purchased(record)
                }
            return PurchaseOutcome(result: result, replayed: true, alreadyOwned: alreadyOwned)
        case .failedPurchase(let failure):
            return PurchaseOutcome(
                result: .failed(
                    FailedPurchase(
                        code: FailedPurchase.Code(rawValue: failure.code) ?? .unknown, reason: failure.reason,
                        message: failure.message,
                        transactionID: failure.transactionID, accountID: failure.accountID,
                        productID: failure.productID,
                        productType: ProductKind(rawValue: failure.productType), quantity: failure.quantity,
                        dateMs: failure.dateMs,
                        price: failure.price, currency: failure.currency,
                        environment: try Self.environment(failure.environment))),
                replayed: true)
        case .spend:
            throw StoreError(
                .keyReused, "this idempotency-key answered a spend of credits; use a new key for a new request")
        }
    }
}

extension SpendOutcome {
    /// A spend's answer replayed from what the ledger kept for its key.
    static func replaying(_ bytes: [UInt8]) throws -> SpendOutcome {
        if StoredAnswer.isLegacy(bytes) {
            return SpendOutcome(
                balance: try StoreV1.SpendCreditsResponse(serializedBytes: bytes).balance, replayed: true)
        }
        guard case .spend(let balance) = try StoredAnswer.decoded(bytes) else {
            throw StoreError(.keyReused, "this idempotency-key answered a purchase; use a new key for a new request")
        }
        return SpendOutcome(balance: balance, replayed: true)
    }
}
