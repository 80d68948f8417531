import KioskStoreCore

/// What the admin console charts: per day (UTC), over a window.
public struct DailyActivity: Hashable, Sendable {
    /// The first day of the window: days since 1970-01-01 (UTC).
    public var firstDay: Int64
    /// Days in the window, the first one included.
    public var days: Int
    /// Purchases (and renewals) made each day, by day offset from ``firstDay``.
    public var purchases: [Int64]
    /// Transactions revoked each day: refunds, disputes, and the old transaction of an upgrade.
    public var refunds: [Int64]
    /// Revenue in minor units of each currency (ISO 4217 code) each day: what was charged (unit price × quantity),
    /// refunds not taken off.
    public var revenue: [String: [Int64]]

    /// A window of `days` days from `firstDay`, all zero.
    public init(firstDay: Int64, days: Int) {
        self.firstDay = firstDay
        self.days = days
        purchases = Array(repeating: 0, count: days)
        refunds = Array(repeating: 0, count: days)
        revenue = [:]
    }
}

extension Ledger {
    /// One day in milliseconds.
    public static let dayMs: Int64 = 86_400_000

    /// Purchases, refunds and revenue per day over the `days` days that end with the day of `nowMs` (UTC).
    public func dailyActivity(days: Int, nowMs: Int64) async throws -> DailyActivity {
        let days = max(1, min(days, 366))
        let lastDay = nowMs / Self.dayMs
        let firstDay = lastDay - Int64(days) + 1
        let sinceMs = firstDay * Self.dayMs
        return try await backend.read { db in
            var activity = DailyActivity(firstDay: firstDay, days: days)
            for row in try db.fetchAll(
                """
                SELECT purchase_ms / \(Self.dayMs) AS day, currency, price, COUNT(*) AS n, CAST(SUM(quantity) AS BIGINT) AS units
                FROM transactions
                WHERE state = ? AND purchase_ms >= ? GROUP BY 1, 2, 3
                """, [Int64(TransactionState.purchased.rawValue), sinceMs])
            {
                let day = Int(try row["day"] as Int64 - activity.firstDay)
                guard day >= 0, day < days else { continue }
                let count: Int64 = try row["n"]
                activity.purchases[day] += count
                guard let money = Money(decimal: try row["price"], currency: try row["currency"]) else { continue }
                // The unit price times the units bought.
                let amount = money.minorUnits.multipliedReportingOverflow(by: try row["units"] as Int64)
                guard !amount.overflow else { continue }
                activity.revenue[money.currency, default: Array(repeating: 0, count: days)][day] &+= amount.partialValue
            }
            for row in try db.fetchAll(
                "SELECT revoked_ms / \(Self.dayMs) AS day, COUNT(*) AS n FROM transactions WHERE revoked_ms >= ? GROUP BY 1",
                [max(sinceMs, 1)])
            {
                let day = Int(try row["day"] as Int64 - activity.firstDay)
                guard day >= 0, day < days else { continue }
                activity.refunds[day] += try row["n"] as Int64
            }
            return activity
        }
    }

    /// The newest events an operator caused (``EventRecord/actor`` set), newest first, at most `limit`.
    public func operatorEvents(limit: Int) async throws -> [EventRecord] {
        try await backend.read { db in
            try db.fetchAll("SELECT * FROM events WHERE actor <> '' ORDER BY id DESC LIMIT ?", [Int64(max(limit, 0))])
                .map(EventRecord.init(row:))
        }
    }
}
