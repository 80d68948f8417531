import Foundation
import KioskAPI

/// An event as JSON: what `kiosk-store events` prints and webhooks send.
public enum EventJSON {
    /// The event's fields as a JSON object: `event_id`, `type` ("REFUNDED"), `account_id`, … (empty and zero fields left out).
    public static func object(_ event: EventRecord, environment: StoreEnvironment) -> [String: Any] {
        var object: [String: Any] = [
            "event_id": event.id, "type": event.type.shortName, "created_ms": event.createdMs, "environment": environment.name,
        ]
        if !event.accountID.isEmpty { object["account_id"] = event.accountID }
        if !event.transactionID.isEmpty { object["transaction_id"] = event.transactionID }
        if !event.originalTransactionID.isEmpty { object["original_transaction_id"] = event.originalTransactionID }
        if !event.productID.isEmpty { object["product_id"] = event.productID }
        if !event.reason.isEmpty { object["reason"] = event.reason }
        if event.creditShortfall > 0 { object["credit_shortfall"] = event.creditShortfall }
        if event.type == .autoRenewChanged { object["auto_renew"] = event.autoRenew }
        if !event.price.isEmpty { object["price"] = event.price }
        if event.expirationReason != .unspecified { object["expiration_reason"] = "\(event.expirationReason)" }
        return object
    }

    /// One line of JSON, keys sorted.
    public static func line(_ event: EventRecord, environment: StoreEnvironment) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: object(event, environment: environment), options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
