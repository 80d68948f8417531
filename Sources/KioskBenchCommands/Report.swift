import Foundation
import Histogram

/// The outcome of one bench run, printed as a table or JSON.
struct Report {
    var title: String
    var fields: [(String, Any)] = []
    var result: LoadResult?
    var errorLimit = 0.001

    var failedTooMuch: Bool {
        guard let result, result.calls > 0 else { return false }
        return Double(result.failed) / Double(result.calls) > errorLimit
    }

    func percentile(_ p: Double) -> Double {
        guard let histogram = result?.histogram, histogram.totalCount > 0 else { return 0 }
        return Double(histogram.valueAtPercentile(p)) / 1000
    }

    var json: String {
        var object: [String: Any] = ["benchmark": title]
        for (key, value) in fields { object[key] = value }
        if let result {
            object["calls"] = result.calls
            object["calls_per_second"] = (result.callsPerSecond * 10).rounded() / 10
            object["errors"] = result.failed
            object["errors_by_kind"] = result.errors
            object["failed_too_many"] = failedTooMuch
            object["latency_us"] = [
                "p50": percentile(50), "p90": percentile(90), "p99": percentile(99), "p99.9": percentile(99.9),
                "max": Double(result.histogram.max) / 1000, "mean": (result.histogram.mean / 1000 * 10).rounded() / 10,
            ]
        }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    var table: String {
        var lines: [String] = []
        if failedTooMuch, let result {
            lines.append("FAILED: \(result.failed) of \(result.calls) calls failed (more than 0.1%)")
        }
        lines.append("== \(title)")
        for (key, value) in fields { lines.append(pad(key) + "\(value)") }
        if let result {
            lines.append(pad("calls") + "\(result.calls) in \(String(format: "%.2f", result.elapsed.seconds)) s")
            lines.append(pad("calls/s") + String(format: "%.0f", result.callsPerSecond))
            lines.append(
                pad("errors")
                    + (result.errors.isEmpty
                        ? "0" : result.errors.map { "\($0.key): \($0.value)" }.sorted().joined(separator: ", ")))
            lines.append(
                pad("latency µs")
                    + String(
                        format: "p50 %.0f  p90 %.0f  p99 %.0f  p99.9 %.0f  max %.0f",
                        percentile(50), percentile(90), percentile(99), percentile(99.9),
                        Double(result.histogram.max) / 1000))
        }
        return lines.joined(separator: "\n")
    }

    private func pad(_ key: String) -> String {
        key.padding(toLength: max(22, key.count + 2), withPad: " ", startingAt: 0)
    }

    /// Writes HdrHistogram's percentile distribution (values in microseconds).
    func writeHistogram(to path: String) throws {
        guard let histogram = result?.histogram else { return }
        var text = ""
        histogram.outputPercentileDistribution(to: &text, outputValueUnitScalingRatio: 1000)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

/// Latency by percentile, log scales, one line per run: an SVG.
enum LatencyPlot {
    /// (label, [(percentile 0…100, latency µs)]) per run.
    static func svg(_ runs: [(String, [(Double, Double)])]) -> String {
        let width = 760.0
        let height = 440.0
        let left = 70.0
        let right = 20.0
        let top = 30.0
        let bottom = 60.0
        let plotWidth = width - left - right
        let plotHeight = height - top - bottom
        // x: percentile as log10(1 / (1 - p)), from 0 (p0) to 5 (p99.999).
        func x(_ p: Double) -> Double { left + min(log10(1 / max(1 - p / 100, 1e-5)), 5) / 5 * plotWidth }
        let values = runs.flatMap { $0.1.map(\.1) }.filter { $0 > 0 }
        let low = floor(log10(values.min() ?? 1))
        let high = ceil(log10(max(values.max() ?? 10, 10)))
        func y(_ v: Double) -> Double {
            top + plotHeight - (log10(max(v, pow(10, low))) - low) / max(high - low, 1) * plotHeight
        }
        let colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
        var svg =
            #"<svg xmlns="http://www.w3.org/2000/svg" width="\#(Int(width))" height="\#(Int(height))" font-family="sans-serif" font-size="12">"#
        svg += #"<rect width="100%" height="100%" fill="white"/>"#
        for (i, label) in ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"].enumerated() {
            let px = left + Double(i) / 5 * plotWidth
            svg += #"<line x1="\#(px)" y1="\#(top)" x2="\#(px)" y2="\#(top + plotHeight)" stroke="lightgray"/>"#
            svg += #"<text x="\#(px)" y="\#(top + plotHeight + 18)" text-anchor="middle">\#(label)</text>"#
        }
        var decade = low
        while decade <= high {
            let py = y(pow(10, decade))
            svg += #"<line x1="\#(left)" y1="\#(py)" x2="\#(left + plotWidth)" y2="\#(py)" stroke="lightgray"/>"#
            svg += #"<text x="\#(left - 6)" y="\#(py + 4)" text-anchor="end">\#(formatMicros(pow(10, decade)))</text>"#
            decade += 1
        }
        svg += #"<text x="\#(left + plotWidth / 2)" y="\#(height - 18)" text-anchor="middle">percentile</text>"#
        svg +=
            #"<text x="16" y="\#(top + plotHeight / 2)" transform="rotate(-90 16 \#(top + plotHeight / 2))" text-anchor="middle">latency</text>"#
        for (index, (label, points)) in runs.enumerated() {
            let color = colors[index % colors.count]
            let path = points.filter { $0.0 < 100 }.map { "\(x($0.0)),\(y($0.1))" }.joined(separator: " ")
            svg += #"<polyline fill="none" stroke="\#(color)" stroke-width="2" points="\#(path)"/>"#
            svg += #"<text x="\#(left + 10)" y="\#(top + 16 + Double(index) * 16)" fill="\#(color)">\#(label)</text>"#
        }
        return svg + "</svg>\n"
    }

    static func formatMicros(_ value: Double) -> String {
        value >= 1_000_000
            ? "\(Int(value / 1_000_000)) s" : value >= 1000 ? "\(Int(value / 1000)) ms" : "\(Int(value)) µs"
    }

    /// The (percentile, value) points of an HdrHistogram percentile distribution file.
    static func points(fromDistribution text: String) -> [(Double, Double)] {
        text.split(separator: "\n").compactMap { line in
            let columns = line.split(separator: " ", omittingEmptySubsequences: true)
            guard columns.count >= 2, let value = Double(columns[0]), let fraction = Double(columns[1]) else {
                return nil
            }
            return (fraction * 100, value)
        }
    }

    static func points(_ histogram: Histogram<UInt64>) -> [(Double, Double)] {
        var text = ""
        histogram.outputPercentileDistribution(to: &text, outputValueUnitScalingRatio: 1000)
        return points(fromDistribution: text)
    }
}
