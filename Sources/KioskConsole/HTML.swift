import Foundation

/// Server-rendered HTML: text is escaped where it is put in, so what a buyer or an operator typed (a refund
/// reason, a credential's name, a URL) is shown as text, never run as markup.
struct HTML: Sendable {
    /// The markup so far.
    private(set) var markup = ""

    /// `text`, escaped for an element's content or a quoted attribute value.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.unicodeScalars.append(character)
            }
        }
        return out
    }

    /// Appends markup as written (the caller's own, never input).
    mutating func raw(_ markup: String) { self.markup += markup }

    /// Appends `text`, escaped.
    mutating func text(_ text: String) { markup += Self.escape(text) }

    /// Appends `<tag attributes>` + escaped `text` + `</tag>`.
    mutating func element(_ tag: String, _ text: String, attributes: String = "") {
        markup += "<\(tag)\(attributes.isEmpty ? "" : " " + attributes)>\(Self.escape(text))</\(tag)>"
    }

    /// Appends a table: `headers`, then each row's cells as text.
    mutating func table(_ headers: [String], _ rows: [[String]], empty: String = "none") {
        guard !rows.isEmpty else {
            element("p", empty, attributes: "class=\"empty\"")
            return
        }
        raw("<table><thead><tr>")
        for header in headers { element("th", header) }
        raw("</tr></thead><tbody>")
        for row in rows {
            raw("<tr>")
            for cell in row { element("td", cell) }
            raw("</tr>")
        }
        raw("</tbody></table>")
    }

    /// Appends a form that POSTs `fields` (hidden) to `action` with the session's CSRF token, and a button.
    mutating func postButton(
        _ label: String, action: String, csrf: String, fields: [(String, String)] = [], visible: [FormField] = [],
        danger: Bool = false
    ) {
        raw("<form method=\"post\" action=\"\(Self.escape(action))\" class=\"inline\">")
        raw("<input type=\"hidden\" name=\"csrf\" value=\"\(Self.escape(csrf))\">")
        for (name, value) in fields {
            raw("<input type=\"hidden\" name=\"\(Self.escape(name))\" value=\"\(Self.escape(value))\">")
        }
        for field in visible {
            raw(
                "<input type=\"text\" name=\"\(Self.escape(field.name))\" placeholder=\"\(Self.escape(field.placeholder))\"\(field.required ? " required" : "") maxlength=\"\(field.maxLength)\">"
            )
        }
        raw("<button type=\"submit\"\(danger ? " class=\"danger\"" : "")>\(Self.escape(label))</button></form>")
    }
}

/// A text input of a form.
struct FormField: Sendable {
    var name: String
    var placeholder: String
    var required = true
    var maxLength = 500
}

/// An `application/x-www-form-urlencoded` body or query string, decoded: the first value of each name.
struct FormData: Sendable {
    private(set) var values: [String: String] = [:]

    /// Decodes `encoded` (`a=1&b=x+y`); a malformed escape leaves that pair out.
    init(_ encoded: String) {
        for pair in encoded.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.decode(parts[0]) else { continue }
            let value = parts.count > 1 ? Self.decode(parts[1]) : ""
            guard let value, values[name] == nil else { continue }
            values[name] = value
        }
    }

    private static func decode(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }

    /// The value of `name`, trimmed; nil when absent or empty.
    subscript(_ name: String) -> String? {
        let value = values[name]?.trimmingCharacters(in: .whitespacesAndNewlines)
        return value?.isEmpty == false ? value : nil
    }
}

/// The cookies of a `Cookie` header.
func cookies(_ header: String?) -> [String: String] {
    var found: [String: String] = [:]
    for pair in (header ?? "").split(separator: ";") {
        let parts = pair.split(separator: "=", maxSplits: 1)
        guard parts.count == 2 else { continue }
        let name = parts[0].trimmingCharacters(in: .whitespaces)
        if found[name] == nil { found[name] = parts[1].trimmingCharacters(in: .whitespaces) }
    }
    return found
}

/// A date and time for a table: UTC, to the second; "—" for none (0).
func formatTime(_ ms: Int64) -> String {
    guard ms > 0 else { return "—" }
    return Date(timeIntervalSince1970: Double(ms) / 1000).formatted(.iso8601)
}

/// A day (days since 1970, UTC) as `MM-DD`.
func formatDay(_ day: Int64) -> String {
    // "2026-11-29" less its year.
    String(Date(timeIntervalSince1970: Double(day) * 86_400).formatted(.iso8601.year().month().day()).dropFirst(5))
}
