#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation
import RequestsTestServer

/// The outbox's goals (issue 37).
enum OutboxGoals {
    static let enqueuesPerSecond = 20_000.0
    static let p99Seconds = 0.005
    static let firstPostSeconds = 1.0
    static let bytesPerEntry = 2048.0
}

/// What the enqueue benchmark measured.
struct OutboxEnqueueFigures {
    var settings: OutboxEnqueueSettings
    var single = EnqueueRun()
    var batched = EnqueueRun()
    var fsyncPerSecond = Double.nan
    var fsyncMedian = Double.nan
    var reopen = ReopenFigures()
}

/// Runs the enqueue benchmark and the reopen measurement against `server`.
func measureOutboxEnqueue(_ settings: OutboxEnqueueSettings, server: LoopbackServer) -> OutboxEnqueueFigures {
    var figures = OutboxEnqueueFigures(settings: settings)
    let url = server.url("/outbox-enqueue").absoluteString
    (figures.fsyncPerSecond, figures.fsyncMedian) = measureFsync(count: settings.seconds < 1 ? 50 : 500)
    figures.single = measureEnqueues(threads: settings.threads, seconds: settings.seconds, batch: 1, url: url)
    log("  enqueue(_:): \(grouped(figures.single.entriesPerSecond)) entries/s")
    figures.batched = measureEnqueues(threads: settings.threads, seconds: settings.seconds, batch: settings.batch, url: url)
    log("  enqueue(contentsOf:) × \(settings.batch): \(grouped(figures.batched.entriesPerSecond)) entries/s")
    figures.reopen = measureReopen(entries: settings.reopenEntries, server: server)
    return figures
}

private func milliseconds(_ seconds: Double) -> String { "\(fixed(seconds * 1000, 2)) ms" }

/// The enqueue benchmark's table.
func outboxEnqueueSection(_ figures: OutboxEnqueueFigures) -> Section {
    let settings = figures.settings, single = figures.single, batched = figures.batched, reopen = figures.reopen
    let threads = "\(settings.threads) thread\(settings.threads == 1 ? "" : "s")"
    var section = Section(
        name: "Outbox enqueue",
        title: "12b. Outbox: durable enqueues from \(threads) for \(fixed(settings.seconds, 1)) s into a suspended outbox; "
            + "reopening with \(grouped(Double(settings.reopenEntries))) pending",
        rows: [])
    let fsyncFloor = "\(grouped(figures.fsyncPerSecond)) fsyncs/s (1 thread, 128 B write + fsync)"
    let perFsync = single.entriesPerSecond / figures.fsyncPerSecond
    section.rows.append(
        Row(
            measure: "\(threads), enqueue(_:), one entry per call", library: "\(grouped(single.entriesPerSecond)) entries/s",
            baseline: fsyncFloor, comparison: "\(fixed(perFsync, 1)) × the fsync rate",
            goal: "≥ \(grouped(OutboxGoals.enqueuesPerSecond))/s",
            verdict: verdict([single.entriesPerSecond], passes: single.entriesPerSecond >= OutboxGoals.enqueuesPerSecond)))
    section.rows.append(
        Row(
            measure: "enqueue(_:) latency per call", library: "p50 \(milliseconds(single.percentile(0.5))), p99 \(milliseconds(single.percentile(0.99)))",
            baseline: "fsync alone: median \(milliseconds(figures.fsyncMedian))", comparison: "\(grouped(Double(single.calls))) calls",
            goal: "p99 < \(milliseconds(OutboxGoals.p99Seconds))",
            verdict: verdict([single.percentile(0.99)], passes: single.percentile(0.99) < OutboxGoals.p99Seconds)))
    section.rows.append(
        Row(
            measure: "\(threads), enqueue(contentsOf:), \(settings.batch) per call", library: "\(grouped(batched.entriesPerSecond)) entries/s",
            baseline: "", comparison: "\(fixed(batched.entriesPerSecond / single.entriesPerSecond, 1)) × one per call", goal: "",
            verdict: batched.entriesPerSecond.isFinite ? .info : .failed))
    section.rows.append(
        Row(
            measure: "enqueue(contentsOf:) latency per call", library: "p50 \(milliseconds(batched.percentile(0.5))), p99 \(milliseconds(batched.percentile(0.99)))",
            baseline: "", comparison: "\(grouped(Double(batched.calls))) calls", goal: "",
            verdict: batched.percentile(0.99).isFinite ? .info : .failed))
    section.rows.append(
        Row(
            measure: "Reopen with \(grouped(Double(reopen.entries))) pending → first POST at the server",
            library: milliseconds(reopen.firstPostSeconds), baseline: "Outbox.init took \(milliseconds(reopen.initSeconds))",
            comparison: "\(grouped(Double(reopen.resumed))) found pending", goal: "< \(fixed(OutboxGoals.firstPostSeconds, 0)) s",
            verdict: reopen.resumed == reopen.entries
                ? verdict([reopen.firstPostSeconds], passes: reopen.firstPostSeconds < OutboxGoals.firstPostSeconds) : .failed))
    section.rows.append(
        Row(
            measure: "Resident memory per pending entry", library: "\(grouped(reopen.bytesPerEntry)) B",
            baseline: "", comparison: "RSS delta of opening, suspended", goal: "< \(grouped(OutboxGoals.bytesPerEntry)) B",
            verdict: reopen.resumed == reopen.entries
                ? verdict([reopen.bytesPerEntry], passes: reopen.bytesPerEntry < OutboxGoals.bytesPerEntry) : .failed))
    section.notes.append(
        "Each thread enqueues into its own lane, in a loop, an `OutboxNote` (a Codable POST of `lane:seq`, about 120 bytes "
            + "encoded); the outbox is opened with `startsSuspended = true`, so nothing is sent meanwhile. Latency: the time of "
            + "one `enqueue` call, which returns once the entry is on disk. The folder is under \(FileManager.default.temporaryDirectory.path).")
    section.notes.append(
        "Reopen: \(grouped(Double(reopen.entries))) entries in 8 lanes, stored by an outbox that was then closed; "
            + "memory: \(ResourceUsage.residentSource), RSS before and after `Outbox.init` with `startsSuspended`; "
            + "first POST: from the start of a second, live `Outbox.init` to the arrival of its first request at the embedded server.")
    for (name, run) in [("enqueue(_:)", single), ("enqueue(contentsOf:)", batched)] where run.errors > 0 {
        section.notes.append("\(name) FAILED \(run.errors) times: \(run.firstError ?? "")")
    }
    if let problem = reopen.problem { section.notes.append("Reopen FAILED: \(problem)") }
    return section
}

/// `requests-bench outbox-enqueue …`: prints the table, exits 1 when a row has no number.
func runOutboxEnqueueCommand(_ arguments: [String]) -> Never {
    let settings = OutboxEnqueueSettings(arguments)
    guard let server = try? LoopbackServer() else { fail("outbox-enqueue: could not start the loopback server", code: 2) }
    log("outbox-enqueue: \(settings.threads) threads, \(settings.seconds) s per run, reopen with \(settings.reopenEntries)…")
    let section = outboxEnqueueSection(measureOutboxEnqueue(settings, server: server))
    server.stop()
    print("")
    print(plainTextTable([section]))
    print("Command: \(benchCommandLine())")
    exit(section.missingNumbers.isEmpty ? 0 : 1)
}
#endif
