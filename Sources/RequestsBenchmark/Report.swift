#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation

/// Whether a figure meets its goal.
enum Verdict: String {
    case pass
    case miss
    /// No goal: the figure is for information.
    case info = "—"
    /// The measurement did not produce a number.
    case failed = "no number"
    /// A correctness check failed (the outbox kill test lost or doubled an entry): the run fails.
    case violated = "VIOLATED"
}

/// One line of the results table.
struct Row {
    let measure: String
    let library: String
    let baseline: String
    let comparison: String
    let goal: String
    let verdict: Verdict
}

/// A titled group of rows.
struct Section {
    /// A short name for summaries, such as "Throughput".
    let name: String
    let title: String
    var rows: [Row]
    var notes: [String] = []

    /// "Throughput, concurrency 16" for each row that missed its goal.
    var missedGoals: [String] { rows.filter { $0.verdict == .miss }.map { "\(name): \($0.measure)" } }
    /// The same for rows without a number.
    var missingNumbers: [String] { rows.filter { $0.verdict == .failed }.map { "\(name): \($0.measure)" } }
    /// The same for rows whose correctness check failed.
    var violations: [String] { rows.filter { $0.verdict == .violated }.map { "\(name): \($0.measure)" } }
}

private let headers = ["Measure", "Library (Requests)", "Baseline", "Library vs baseline", "Goal", "Result"]

private func cells(_ row: Row) -> [String] {
    [row.measure, row.library, row.baseline, row.comparison, row.goal, row.verdict.rawValue]
}

/// The sections as a plain-text table, padded to column widths.
func plainTextTable(_ sections: [Section]) -> String {
    let allRows = sections.flatMap(\.rows).map(cells)
    let widths = headers.indices.map { column in
        ([headers[column]] + allRows.map { $0[column] }).map(\.count).max() ?? 0
    }
    func line(_ values: [String]) -> String {
        zip(values, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }
            .joined(separator: " | ").trimmingCharacters(in: .whitespaces)
    }
    let rule = widths.map { String(repeating: "-", count: $0) }.joined(separator: "-+-")
    var text = line(headers) + "\n" + rule + "\n"
    for section in sections {
        text += "\(section.title)\n"
        for row in section.rows { text += line(cells(row)) + "\n" }
        for note in section.notes { text += "    \(note)\n" }
    }
    return text
}

/// The sections as Markdown: one table per section, followed by its notes.
func markdownTables(_ sections: [Section]) -> String {
    func escape(_ text: String) -> String { text.replacingOccurrences(of: "|", with: "\\|") }
    var text = ""
    for section in sections {
        text += "### \(section.title)\n\n"
        text += "| " + headers.joined(separator: " | ") + " |\n"
        text += "|" + headers.map { _ in "---" }.joined(separator: "|") + "|\n"
        for row in section.rows {
            let values = cells(row).map(escape)
            let result = row.verdict == .miss || row.verdict == .violated ? "**\(values[5])**" : values[5]
            text += "| " + (values.prefix(5) + [result]).joined(separator: " | ") + " |\n"
        }
        if !section.notes.isEmpty {
            text += "\n" + section.notes.map { "- \($0)" }.joined(separator: "\n") + "\n"
        }
        text += "\n"
    }
    return text
}

// MARK: - Number formatting

/// `1234.5` → `"1,235"` (or `"n/a"` for nan).
func grouped(_ value: Double, decimals: Int = 0) -> String {
    guard value.isFinite else { return "n/a" }
    let text = String(format: "%.\(decimals)f", abs(value))
    let parts = text.split(separator: ".", maxSplits: 1)
    var digits = Array(parts[0])
    var index = digits.count - 3
    while index > 0 {
        digits.insert(",", at: index)
        index -= 3
    }
    let fraction = parts.count > 1 ? "." + parts[1] : ""
    return (value < 0 ? "-" : "") + String(digits) + fraction
}

/// `value` with `decimals` digits, or `"n/a"` for nan.
func fixed(_ value: Double, _ decimals: Int) -> String {
    value.isFinite ? String(format: "%.\(decimals)f", value) : "n/a"
}

/// `+12.3` / `-4.0`.
func signed(_ value: Double, _ decimals: Int) -> String {
    value.isFinite ? String(format: "%+.\(decimals)f", value) : "n/a"
}

/// The verdict for `value` against a goal, `failed` if any of `inputs` is not a number.
func verdict(_ inputs: [Double], passes: Bool) -> Verdict {
    inputs.allSatisfy(\.isFinite) ? (passes ? .pass : .miss) : .failed
}
#endif
