/// Charts as SVG, drawn on the server: no script, no style sheet of their own (presentation attributes only, which
/// the console's Content-Security-Policy allows), each with a `<title>` and its numbers in text.
enum SVGChart {
    /// A series of bars.
    struct Series: Sendable {
        var name: String
        var color: String
        var values: [Int64]
    }

    /// Bars per day, the series side by side in each day; `labels` under every seventh day back from the last;
    /// `format` writes a value.
    static func bars(
        title: String, labels: [String], series: [Series], format: (Int64) -> String = { String($0) }
    ) -> String {
        let width = 720.0
        let height = 220.0
        let left = 64.0
        let bottom = 28.0
        let top = 12.0
        let count = max(labels.count, 1)
        let maximum = max(series.flatMap(\.values).max() ?? 0, 1)
        let slot = (width - left - 8) / Double(count)
        let barWidth = max(1, (slot - 2) / Double(max(series.count, 1)))
        let plot = height - bottom - top
        var svg =
            "<svg class=\"chart\" role=\"img\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" width=\"\(Int(width))\" height=\"\(Int(height))\" xmlns=\"http://www.w3.org/2000/svg\">"
        svg += "<title>\(HTML.escape(title))</title>"
        // The axis and the top value.
        svg += line(left, top, left, height - bottom) + line(left, height - bottom, width - 8, height - bottom)
        svg += text(left - 6, top + 10, format(maximum), anchor: "end")
        svg += text(left - 6, height - bottom, "0", anchor: "end")
        for (index, label) in labels.enumerated() where (labels.count - 1 - index) % 7 == 0 {
            svg += text(left + slot * (Double(index) + 0.5), height - 8, label, anchor: "middle")
        }
        for (seriesIndex, one) in series.enumerated() {
            for (index, value) in one.values.enumerated() where value > 0 {
                let barHeight = plot * Double(value) / Double(maximum)
                let x = left + slot * Double(index) + 1 + barWidth * Double(seriesIndex)
                let y = height - bottom - barHeight
                svg +=
                    "<rect x=\"\(fixed(x))\" y=\"\(fixed(y))\" width=\"\(fixed(barWidth))\" height=\"\(fixed(barHeight))\" fill=\"\(one.color)\"><title>\(HTML.escape("\(one.name) \(labels[safe: index] ?? ""): \(format(value))"))</title></rect>"
            }
        }
        svg += "</svg>"
        return svg + legend(series.map { ($0.name, $0.color) })
    }

    /// Horizontal bars, one per labelled value.
    static func horizontal(title: String, items: [(label: String, value: Int64)], color: String) -> String {
        let width = 720.0
        let row = 26.0
        let left = 170.0
        let height = max(row * Double(items.count) + 8, 34)
        let maximum = max(items.map(\.value).max() ?? 0, 1)
        var svg =
            "<svg class=\"chart\" role=\"img\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" width=\"\(Int(width))\" height=\"\(Int(height))\" xmlns=\"http://www.w3.org/2000/svg\">"
        svg += "<title>\(HTML.escape(title))</title>"
        if items.isEmpty { svg += text(8, 22, "none", anchor: "start") }
        for (index, item) in items.enumerated() {
            let y = 4 + row * Double(index)
            let barWidth = (width - left - 60) * Double(item.value) / Double(maximum)
            svg += text(left - 8, y + 16, item.label, anchor: "end")
            svg +=
                "<rect x=\"\(fixed(left))\" y=\"\(fixed(y + 3))\" width=\"\(fixed(max(barWidth, item.value > 0 ? 1 : 0)))\" height=\"\(fixed(row - 8))\" fill=\"\(color)\"></rect>"
            svg += text(left + barWidth + 6, y + 16, String(item.value), anchor: "start")
        }
        return svg + "</svg>"
    }

    private static func legend(_ entries: [(String, String)]) -> String {
        guard entries.count > 1 else { return "" }
        return "<p class=\"legend\">"
            + entries.map {
                "<span class=\"key\"><svg width=\"10\" height=\"10\" xmlns=\"http://www.w3.org/2000/svg\"><rect width=\"10\" height=\"10\" fill=\"\($0.1)\"></rect></svg> \(HTML.escape($0.0))</span>"
            }
            .joined(separator: " ") + "</p>"
    }

    private static func line(_ x1: Double, _ y1: Double, _ x2: Double, _ y2: Double) -> String {
        "<line x1=\"\(fixed(x1))\" y1=\"\(fixed(y1))\" x2=\"\(fixed(x2))\" y2=\"\(fixed(y2))\" stroke=\"#888\" stroke-width=\"1\"></line>"
    }

    private static func text(_ x: Double, _ y: Double, _ content: String, anchor: String) -> String {
        "<text x=\"\(fixed(x))\" y=\"\(fixed(y))\" font-size=\"11\" font-family=\"sans-serif\" fill=\"#333\" text-anchor=\"\(anchor)\">\(HTML.escape(content))</text>"
    }

    private static func fixed(_ value: Double) -> String {
        let tenths = (value * 10).rounded()
        return tenths.truncatingRemainder(dividingBy: 10) == 0
            ? String(Int(tenths / 10)) : String(Double(Int(tenths)) / 10)
    }
}

extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}
