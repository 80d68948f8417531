import Foundation

/// A subscription period as an ISO 8601 duration of one unit: `P7D`, `P1W`, `P1M`, `P1Y`.
public struct SubscriptionPeriod: Hashable, Sendable, CustomStringConvertible {
    /// The calendar unit.
    public enum Unit: String, Sendable {
        case day = "D", week = "W", month = "M", year = "Y"
    }

    /// How many units.
    public var count: Int
    /// Which unit.
    public var unit: Unit

    /// Parses `P<n><D|W|M|Y>`; nil for anything else.
    public init?(iso8601 text: String) {
        guard text.count >= 3, text.first == "P", let unit = Unit(rawValue: String(text.last!)),
            let count = Int(text.dropFirst().dropLast()), count > 0, count <= 1000
        else { return nil }
        self.count = count
        self.unit = unit
    }

    public var description: String { "P\(count)\(unit.rawValue)" }

    /// The instant one period after `startMs`, with the period shortened `timeScale` times
    /// (a sandbox store's ``StoreConfiguration/timeScale``: 720 makes a month an hour).
    public func end(fromMs startMs: Int64, timeScale: Double) -> Int64 {
        let full = end(fromMs: startMs)
        guard timeScale > 1 else { return full }
        return startMs + max(1, Int64((Double(full - startMs) / timeScale).rounded()))
    }

    /// The instant one period after `startMs`, in UTC, in milliseconds since 1970.
    public func end(fromMs startMs: Int64) -> Int64 {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let start = Date(timeIntervalSince1970: Double(startMs) / 1000)
        var components = DateComponents()
        switch unit {
        case .day: components.day = count
        case .week: components.day = 7 * count
        case .month: components.month = count
        case .year: components.year = count
        }
        let end = calendar.date(byAdding: components, to: start) ?? start
        return Int64((end.timeIntervalSince1970 * 1000).rounded())
    }
}
