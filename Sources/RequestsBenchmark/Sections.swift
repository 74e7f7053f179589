// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
import Foundation

/// The goals the figures are held to.
enum Goals {
    /// Library throughput ÷ raw `URLSession` throughput.
    static let throughputRatio = 0.98
    /// Library throughput ÷ the Operation floor's.
    static let floorThroughputRatio = 0.99
    /// Extra CPU per request over the Operation floor, in µs.
    static let cpuOverFloorMicroseconds = 10.0
    /// Resident bytes per queued request.
    static let bytesPerQueuedRequest = 2048.0
    /// From `cancelAllOperations()` to the last completion handler, in seconds.
    static let cancellationLatency = 1.0
}

/// Sections 1 (throughput) and 2 (CPU per request): the library against the Operation floor, and against raw
/// `URLSession`.
func throughputSections(_ cells: [ThroughputCell], requestsPerRun: Int, rounds: Int,
                        serverDescription: String, cpuNote: String) -> [Section] {
    var throughput = Section(
        name: "Throughput",
        title: "1. Throughput: requests/s, median of \(rounds) alternating rounds of \(grouped(Double(requestsPerRun))) requests per side",
        rows: [], notes: ["Server: \(serverDescription)."])
    var cpu = Section(name: "CPU per request", title: "2. CPU per request: getrusage(RUSAGE_SELF) user+system time ÷ requests, median", rows: [])
    for cell in cells {
        let library = cell.requestsPerSecond(.library), floor = cell.requestsPerSecond(.floor)
        let toFloor = library / floor
        throughput.rows.append(Row(
            measure: "Concurrency \(cell.concurrency), against the Operation floor",
            library: "\(grouped(library)) req/s",
            baseline: "\(grouped(floor)) req/s (Operation floor)",
            comparison: "ratio \(fixed(toFloor, 3))",
            goal: "ratio ≥ \(Goals.floorThroughputRatio)",
            verdict: verdict([toFloor], passes: toFloor >= Goals.floorThroughputRatio)))
        let faster = cell.fasterRaw
        let toRaw = library / cell.requestsPerSecond(.raw(faster))
        throughput.rows.append(Row(
            measure: "Concurrency \(cell.concurrency), against raw URLSession",
            library: "\(grouped(library)) req/s",
            baseline: "\(grouped(cell.requestsPerSecond(.raw(faster)))) req/s (\(faster.name))",
            comparison: "ratio \(fixed(toRaw, 3)); floor ÷ raw \(fixed(floor / cell.requestsPerSecond(.raw(faster)), 3))",
            goal: "ratio ≥ \(Goals.throughputRatio)",
            verdict: verdict([toRaw], passes: toRaw >= Goals.throughputRatio)))
        let rawMedians = RawStrategy.allCases.map {
            "\(grouped(cell.requestsPerSecond(.raw($0)))) req/s \($0.name.replacingOccurrences(of: "raw URLSession, ", with: ""))"
        }
        throughput.notes.append("Concurrency \(cell.concurrency): raw medians \(rawMedians.joined(separator: ", ")); "
            + "library ÷ floor in each round: \(cell.roundRatiosToFloor.map { fixed($0, 2) }.joined(separator: ", ")) "
            + "(median \(fixed(median(cell.roundRatiosToFloor), 3))); library ÷ the faster raw run of each round: "
            + "\(cell.roundRatiosToRaw.map { fixed($0, 2) }.joined(separator: ", ")) (median \(fixed(median(cell.roundRatiosToRaw), 3)))"
            + (cell.failures > 0 ? "; \(cell.failures) requests FAILED" : ""))

        let overFloor = cell.cpuPerRequest(.library) - cell.cpuPerRequest(.floor)
        cpu.rows.append(Row(
            measure: "Concurrency \(cell.concurrency)",
            library: "\(grouped(cell.cpuPerRequest(.library))) µs",
            baseline: "\(grouped(cell.cpuPerRequest(.floor))) µs (Operation floor); raw \(grouped(cell.cpuPerRequest(.raw(cell.thriftierRaw)))) µs",
            comparison: "\(signed(overFloor, 1)) µs over the floor",
            goal: "≤ \(Int(Goals.cpuOverFloorMicroseconds)) µs more",
            verdict: verdict([overFloor], passes: overFloor <= Goals.cpuOverFloorMicroseconds)))
    }
    throughput.notes.append("All sides: a URLSession each (the raw strategies share one), .ephemeral, urlCache nil, "
        + "httpMaximumConnectionsPerHost = concurrency, warmed up first; each round runs every side once, starting with "
        + "the next one. Every side decodes the 78-byte JSON into the same struct. Library: all requests of a run added at "
        + "once to an OperationQueue with maxConcurrentOperationCount = concurrency (a DecodableRequest). "
        + "Operation floor: the same, with bare asynchronous Operations, each resuming a raw data task in start() and "
        + "finishing from its completion handler after decoding there (on the session's delegate queue). "
        + "Raw: `concurrency` data tasks with completion handlers kept in flight, each next one created either inside the "
        + "completion handler (on the session's serial delegate queue; no hop) or by a thread of the benchmark's own that "
        + "each completion wakes. The raw baseline is the faster of the two.")
    cpu.notes.append("CPU time is this whole process's: \(cpuNote).")
    cpu.notes.append("The raw figure is the raw strategy with the lower CPU per request.")
    cpu.notes.append("Context switches per request (getrusage voluntary + involuntary, median), library / floor / raw: "
        + cells.map {
            "concurrency \($0.concurrency): \(fixed($0.switchesPerRequest(.library), 1)) / \(fixed($0.switchesPerRequest(.floor), 1)) / "
                + fixed($0.switchesPerRequest(.raw($0.thriftierRaw)), 1)
        }.joined(separator: "; ") + ".")
    return [throughput, cpu]
}

/// Section 3: resident memory per queued request.
func memorySection(_ memory: MemoryFigures, queued: Int) -> Section {
    var section = Section(
        name: "Memory",
        title: "3. Resident memory per queued request: RSS delta with \(grouped(Double(queued))) on a suspended queue",
        rows: [])
    section.rows.append(Row(
        measure: "Each with its own identifier",
        library: "\(grouped(memory.requestBytes)) B",
        baseline: "\(grouped(memory.blockOperationBytes)) B (BlockOperation)",
        comparison: "\(signed(memory.requestBytes - memory.blockOperationBytes, 0)) B",
        goal: "≤ \(grouped(Goals.bytesPerQueuedRequest)) B",
        verdict: verdict([memory.requestBytes, memory.blockOperationBytes],
                         passes: memory.requestBytes <= Goals.bytesPerQueuedRequest)))
    section.rows.append(Row(
        measure: "All with the same identifier",
        library: "\(grouped(memory.sharedIdentifierRequestBytes)) B",
        baseline: "\(grouped(memory.blockOperationBytes)) B (BlockOperation)",
        comparison: "\(signed(memory.sharedIdentifierRequestBytes - memory.blockOperationBytes, 0)) B",
        goal: "≤ \(grouped(Goals.bytesPerQueuedRequest)) B",
        verdict: verdict([memory.sharedIdentifierRequestBytes],
                         passes: memory.sharedIdentifierRequestBytes <= Goals.bytesPerQueuedRequest)))
    section.rows.append(Row(
        measure: "Then cancel all, resume, drain",
        library: "\(fixed(memory.libraryDrainSeconds, 2)) s",
        baseline: "\(fixed(memory.blockDrainSeconds, 2)) s (BlockOperation)",
        comparison: "",
        goal: "",
        verdict: memory.drained && memory.completions == memory.expectedCompletions ? .info : .failed))
    section.notes.append(ResourceUsage.residentSource + ". A library request here is "
        + "a DataRequest holding a URL, with a completion closure, on a session that is never used. "
        + "Completions after the cancel: \(grouped(Double(memory.completions))) of \(grouped(Double(memory.expectedCompletions))).")
    return section
}

/// Section 4: cancellation latency and exactly-once completions.
func cancellationSection(_ figures: CancellationFigures, concurrency: Int) -> Section {
    let plain = figures.plain, suspended = figures.suspended
    var section = Section(
        name: "Cancellation",
        title: "4. Cancellation: \(grouped(Double(plain.requests))) queued at concurrency \(concurrency) to /delay/5000 "
            + "(embedded server), \(concurrency) of them in flight, then cancelAllOperations()",
        rows: [])
    section.rows.append(Row(
        measure: "cancelAllOperations() → last completion",
        library: "\(grouped(plain.latencySeconds * 1000, decimals: 1)) ms",
        baseline: "\(grouped(figures.baselineDrainSeconds * 1000, decimals: 1)) ms (plain async Operation)",
        comparison: "\(grouped(Double(plain.sentDuringCancel))) more sent during the call",
        goal: "< \(Int(Goals.cancellationLatency * 1000)) ms",
        verdict: verdict([plain.latencySeconds], passes: plain.latencySeconds < Goals.cancellationLatency)))
    section.rows.append(Row(
        measure: "Completion handlers run",
        library: "\(grouped(Double(plain.totalCompletions))) calls for \(grouped(Double(plain.distinctCompletions))) "
            + "of \(grouped(Double(plain.requests))) requests",
        baseline: "",
        comparison: "\(grouped(Double(plain.cancelledResults))) with .cancelled",
        goal: "each exactly once",
        verdict: plain.distinctCompletions == 0 ? .failed : (plain.exactlyOnce ? .pass : .miss)))
    section.rows.append(Row(
        measure: "Same, queue suspended around the call",
        library: "\(grouped(suspended.latencySeconds * 1000, decimals: 1)) ms",
        baseline: "",
        comparison: "\(grouped(Double(suspended.sentDuringCancel))) more sent during the call",
        goal: "",
        verdict: suspended.latencySeconds.isFinite && suspended.exactlyOnce ? .info : .failed))
    section.notes.append("The cancelAllOperations() call itself took \(grouped(plain.cancelCallSeconds * 1000, decimals: 1)) ms; "
        + "the queue was empty \(grouped(plain.drainSeconds * 1000, decimals: 1)) ms after it began. "
        + "\(plain.inFlightAtCancel) requests were at the server when it was called; "
        + "\(grouped(Double(plain.sentDuringCancel))) more reached the server while it ran.")
    if plain.sentDuringCancel * 10 > plain.requests {
        section.notes.append("Most queued requests were started, and sent, while cancelAllOperations() ran. The queue "
            + "cancels in order; each cancelled request that was executing frees a slot, and the queue starts the next one, "
            + "not yet cancelled, which sends it. Cancelling an executing request also calls URLSessionTask.cancel() on the "
            + "cancelling thread, which on swift-corelibs-foundation waits (DispatchQueue.sync) for the session's internal "
            + "queue, busy with the requests being started, so the cancel loop runs at the pace of the network. "
            + "The baseline below has the same cascade at no cost, because starting one of its operations does nothing.")
    }
    section.notes.append("Suspended: `isSuspended = true; cancelAllOperations(); isSuspended = false`: "
        + "\(grouped(Double(suspended.totalCompletions))) completions for \(grouped(Double(suspended.distinctCompletions))) "
        + "of \(grouped(Double(suspended.requests))) requests, \(grouped(Double(suspended.cancelledResults))) with .cancelled; "
        + "the call took \(grouped(suspended.cancelCallSeconds * 1000, decimals: 1)) ms.")
    section.notes.append("Baseline: \(grouped(Double(plain.requests))) minimal asynchronous Operations (no network) at the same "
        + "concurrency, \(concurrency) executing, each finishing as soon as it is cancelled: the call took "
        + "\(grouped(figures.baselineCallSeconds * 1000, decimals: 1)) ms, the queue was empty "
        + "\(grouped(figures.baselineDrainSeconds * 1000, decimals: 1)) ms after it began, and the queue started "
        + "\(grouped(Double(figures.baselineStartedDuringCancel))) of them while the call ran.")
    return section
}

/// Section 5: decoding a large JSON body.
func decodeSection(_ decode: DecodeFigures, rounds: Int) -> Section {
    let megabytes = Double(decode.bytes) / 1_000_000
    var section = Section(
        name: "Decoding",
        title: "5. Decoding \(fixed(megabytes, 1)) MB of JSON (\(grouped(Double(decode.items))) small objects) "
            + "from the embedded server, median of \(rounds)",
        rows: [])
    let alone = decode.megabytesPerSecond(decode.decoderOnlySeconds)
    let inside = decode.megabytesPerSecond(decode.decodeInsideLibrarySeconds)
    let endToEnd = decode.megabytesPerSecond(decode.endToEndSeconds)
    let transfer = decode.megabytesPerSecond(decode.transferSeconds)
    section.rows.append(Row(
        measure: "Decode only",
        library: "\(grouped(inside, decimals: 1)) MB/s (timed in processData)",
        baseline: "\(grouped(alone, decimals: 1)) MB/s (JSONDecoder alone)",
        comparison: "ratio \(fixed(inside / alone, 2))",
        goal: "",
        verdict: (inside / alone).isFinite ? .info : .failed))
    section.rows.append(Row(
        measure: "DecodableRequest, transfer + decode",
        library: "\(grouped(endToEnd, decimals: 1)) MB/s",
        baseline: "\(grouped(alone, decimals: 1)) MB/s (JSONDecoder alone)",
        comparison: "ratio \(fixed(endToEnd / alone, 2))",
        goal: "",
        verdict: (endToEnd / alone).isFinite ? .info : .failed))
    section.rows.append(Row(
        measure: "Transfer only (DataRequest, raw body)",
        library: "\(grouped(transfer, decimals: 1)) MB/s",
        baseline: "",
        comparison: "",
        goal: "",
        verdict: transfer.isFinite ? .info : .failed))
    section.notes.append(String(
        format: "Per body: JSONDecoder alone %.0f ms, decode in processData %.0f ms, DecodableRequest %.0f ms, transfer only %.0f ms.",
        decode.decoderOnlySeconds * 1000, decode.decodeInsideLibrarySeconds * 1000,
        decode.endToEndSeconds * 1000, decode.transferSeconds * 1000))
    return section
}
#endif
