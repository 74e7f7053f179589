#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// `requests-bench outbox-enqueue [--threads 8] [--seconds 5] [--rounds 2] [--reopen-entries 10000]`: durable enqueues
// per second from N threads into a suspended outbox, one entry per call, with p50/p99 latency per call, against one
// `write` + `fsync` per call from one thread and against the journal alone (issue 47: the same threads appending, one
// call each, the record an outbox stores for such an entry, through the outbox's `Journal` in a folder beside the
// outbox's, for the same seconds; --rounds alternating pairs); then batches of 16; then the time from opening an
// outbox with 10,000 pending entries until its first POST reaches the server, and the resident memory per pending
// entry.

/// The enqueue benchmark's settings.
struct OutboxEnqueueSettings {
    var threads = 8
    var seconds = 5.0
    var reopenEntries = 10_000
    var batch = 16
    /// Pairs of runs, the outbox's enqueues and the journal alone, alternating (odd rounds start with the outbox).
    var rounds = 2

    static let smoke = OutboxEnqueueSettings(threads: 8, seconds: 0.2, reopenEntries: 1_000, rounds: 1)

    init(threads: Int = 8, seconds: Double = 5, reopenEntries: Int = 10_000, rounds: Int = 2) {
        self.threads = threads
        self.seconds = seconds
        self.reopenEntries = reopenEntries
        self.rounds = rounds
    }

    init(_ arguments: [String]) {
        var remaining = arguments[...]
        func number(_ flag: String) -> Double {
            guard let text = remaining.popFirst(), let number = Double(text), number > 0 else { fail("outbox-enqueue: \(flag) needs a positive number", code: 2) }
            return number
        }
        while let flag = remaining.popFirst() {
            switch flag {
            case "--threads": threads = max(1, Int(number(flag)))
            case "--seconds": seconds = number(flag)
            case "--reopen-entries": reopenEntries = max(1, Int(number(flag)))
            case "--rounds": rounds = max(1, Int(number(flag)))
            default: fail("outbox-enqueue: unknown argument \(flag)\n\(Options.usage)", code: 2)
            }
        }
    }
}

/// One enqueue run: entries stored, calls made, and each call's latency.
struct EnqueueRun {
    var entries = 0
    var calls = 0
    var seconds = Double.nan
    /// The process's CPU time (user + system) during the run.
    var cpuSeconds = Double.nan
    /// Seconds per call, sorted.
    var latencies: [Double] = []
    var errors = 0
    var firstError: String?

    var entriesPerSecond: Double { seconds > 0 && errors == 0 ? Double(entries) / seconds : .nan }
    /// The process's CPU time per entry stored, in µs.
    var cpuMicrosecondsPerEntry: Double { entries > 0 ? cpuSeconds * 1_000_000 / Double(entries) : .nan }
    func percentile(_ fraction: Double) -> Double {
        guard !latencies.isEmpty, errors == 0 else { return .nan }
        return latencies[min(latencies.count - 1, Int(Double(latencies.count) * fraction))]
    }

    /// Several runs as one: their entries over their seconds, every call's latency.
    static func pooled(_ runs: [EnqueueRun]) -> EnqueueRun {
        var run = EnqueueRun(seconds: 0, cpuSeconds: 0)
        for part in runs {
            run.cpuSeconds += part.cpuSeconds
            run.entries += part.entries
            run.calls += part.calls
            run.seconds += part.seconds
            run.latencies += part.latencies
            run.errors += part.errors
            run.firstError = run.firstError ?? part.firstError
        }
        if runs.isEmpty { run.seconds = .nan }
        run.latencies.sort()
        return run
    }
}

/// Collects the threads' results.
private final class EnqueueCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var run = EnqueueRun()
    /// Set before the threads are let go.
    private var endTime = 0.0

    var end: Double {
        get { lock.withLock { endTime } }
        set { lock.withLock { endTime = newValue } }
    }

    func add(entries: Int, latencies: [Double], errors: Int, firstError: String?) {
        lock.withLock {
            run.entries += entries
            run.calls += latencies.count
            run.latencies += latencies
            run.errors += errors
            run.firstError = run.firstError ?? firstError
        }
    }

    var result: EnqueueRun { lock.withLock { run } }
}

/// A new folder under the temporary directory.
private func benchFolder(_ name: String) -> URL {
    FileManager.default.temporaryDirectory.appendingPathComponent("requests-\(name)-\(getpid())-\(UUID().uuidString)")
}

/// `threads` threads enqueue for `seconds` into one suspended outbox, `batch` entries per call (each thread its own lane).
func measureEnqueues(threads: Int, seconds: Double, batch: Int, url: String) -> EnqueueRun {
    let folder = benchFolder("outbox-enqueue")
    defer { try? FileManager.default.removeItem(at: folder) }
    var options = OutboxOptions()
    options.startsSuspended = true
    let outbox: Outbox
    do {
        outbox = try Outbox(directory: folder, queue: OperationQueue(), session: makeOutboxSession(connections: 1), requestTypes: [OutboxNote.self], options: options)
    } catch {
        return EnqueueRun(errors: 1, firstError: "cannot open: \(error)")
    }
    defer { outbox.close() }
    return measureCalls(threads: threads, seconds: seconds) { number, call in
        let lane = "lane-\(number)"
        return (lane, (0..<batch).map { OutboxNote(url: url, lane: lane, seq: call * batch + $0) })
    } call: { lane, notes in
        if batch == 1 {
            try outbox.enqueue(notes[0], lane: lane)
        } else {
            try outbox.enqueue(contentsOf: notes, lane: lane)
        }
        return batch
    }
}

/// The journal alone (issue 47): `threads` threads append `record`, one per call, for `seconds`, through the outbox's
/// journal (`BenchmarkJournal`, the outbox's `Journal` with its options) in a new folder beside the outboxes'.
func measureJournalAppends(threads: Int, seconds: Double, record: Data) -> EnqueueRun {
    let folder = benchFolder("journal-alone")
    defer { try? FileManager.default.removeItem(at: folder) }
    let journal: BenchmarkJournal
    do {
        journal = try BenchmarkJournal(directory: folder)
    } catch {
        return EnqueueRun(errors: 1, firstError: "cannot open: \(error)")
    }
    defer { journal.close() }
    return measureCalls(threads: threads, seconds: seconds) { _, _ in
        [record]
    } call: { payloads in
        try journal.append(payloads)
        return 1
    }
}

/// `threads` threads each, in a loop for `seconds`, make an argument with `prepare(thread, call)` (untimed; `call`
/// counts the thread's calls from 0), then time `call(argument)`, which returns the entries it stored. Each call's
/// latency is kept; a thread stops at its first error.
private func measureCalls<Argument>(
    threads: Int, seconds: Double, prepare: @escaping @Sendable (_ thread: Int, _ call: Int) -> Argument,
    call body: @escaping @Sendable (Argument) throws -> Int
) -> EnqueueRun {
    let collector = EnqueueCollector()
    let ready = DispatchGroup(), done = DispatchGroup()
    let go = DispatchSemaphore(value: 0)
    for number in 0..<threads {
        ready.enter()
        done.enter()
        let thread = Thread {
            var latencies: [Double] = []
            latencies.reserveCapacity(100_000)
            var entries = 0, errors = 0, call = 0
            var firstError: String?
            ready.leave()
            go.wait()
            let end = collector.end
            while ResourceUsage.now() < end {
                let argument = prepare(number, call)
                let start = ResourceUsage.now()
                do {
                    entries += try body(argument)
                    latencies.append(ResourceUsage.now() - start)
                    call += 1
                } catch {
                    errors += 1
                    firstError = firstError ?? "\(error)"
                    break
                }
            }
            collector.add(entries: entries, latencies: latencies, errors: errors, firstError: firstError)
            done.leave()
        }
        thread.start()
    }
    ready.wait()
    let cpu = ResourceUsage.usage().cpuMicroseconds
    let begin = ResourceUsage.now()
    collector.end = begin + seconds
    for _ in 0..<threads { go.signal() }
    done.wait()
    var run = collector.result
    run.seconds = ResourceUsage.now() - begin
    run.cpuSeconds = (ResourceUsage.usage().cpuMicroseconds - cpu) / 1_000_000
    run.latencies.sort()
    return run
}

/// The floor for one durable write: `count` appends of 128 bytes, each followed by `fsync`, from one thread, in a
/// file beside the outboxes. Returns syncs per second and the median latency in seconds.
func measureFsync(count: Int) -> (perSecond: Double, median: Double) {
    let folder = benchFolder("fsync")
    defer { try? FileManager.default.removeItem(at: folder) }
    guard (try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)) != nil else { return (.nan, .nan) }
    let descriptor = open(folder.appendingPathComponent("probe").path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
    guard descriptor >= 0 else { return (.nan, .nan) }
    defer { close(descriptor) }
    let bytes = [UInt8](repeating: 0x2A, count: 128)
    var latencies: [Double] = []
    let begin = ResourceUsage.now()
    for _ in 0..<count {
        let start = ResourceUsage.now()
        guard write(descriptor, bytes, bytes.count) == bytes.count, fsync(descriptor) == 0 else { return (.nan, .nan) }
        latencies.append(ResourceUsage.now() - start)
    }
    return (Double(count) / (ResourceUsage.now() - begin), median(latencies))
}

/// Reopening an outbox with pending entries.
struct ReopenFigures {
    var entries = 0
    /// What the suspended open found pending.
    var resumed = 0
    var bytesPerEntry = Double.nan
    var initSeconds = Double.nan
    /// From the start of `Outbox.init` to the first POST's arrival at the server.
    var firstPostSeconds = Double.nan
    var problem: String?
}

/// The first arrival on a route.
private final class FirstArrival: @unchecked Sendable {
    private let condition = NSCondition()
    private var time: Double?

    func record() {
        condition.withLock {
            if time == nil { time = ResourceUsage.now() }
            condition.broadcast()
        }
    }

    func wait(seconds: Double) -> Double? {
        condition.withLock {
            let limit = Date(timeIntervalSinceNow: seconds)
            while time == nil, condition.wait(until: limit) {}
            return time
        }
    }
}

/// Fills an outbox with `entries` pending entries, then opens it suspended (resident memory before and after) and
/// opens it live (time until the server sees the first POST).
func measureReopen(entries: Int, server: LoopbackServer) -> ReopenFigures {
    var figures = ReopenFigures(entries: entries)
    let arrival = FirstArrival()
    let path = "/outbox-reopen/\(UUID().uuidString)"
    server.route(path) { _ in
        arrival.record()
        return LoopbackResponse(status: 201)
    }
    let url = server.url(path).absoluteString
    let folder = benchFolder("outbox-reopen")
    defer { try? FileManager.default.removeItem(at: folder) }
    let queue = OperationQueue()
    let session = makeOutboxSession(connections: 4)
    func open(suspended: Bool) throws -> Outbox {
        var options = OutboxOptions()
        options.startsSuspended = suspended
        return try Outbox(directory: folder, queue: queue, session: session, requestTypes: [OutboxNote.self], options: options)
    }
    do {
        let filling = try open(suspended: true)
        var seq = 0
        while seq < entries {
            let lane = "lane-\(seq / 100 % 8)"
            let count = min(100, entries - seq)
            try filling.enqueue(contentsOf: (seq..<seq + count).map { OutboxNote(url: url, lane: lane, seq: $0) }, lane: lane)
            seq += count
        }
        filling.close()
        ResourceUsage.trimHeap()
        let before = ResourceUsage.residentBytes()
        let held = try open(suspended: true)
        let after = ResourceUsage.residentBytes()
        figures.resumed = held.pendingCount
        held.close()
        if let before, let after { figures.bytesPerEntry = Double(after - before) / Double(entries) }
        ResourceUsage.trimHeap()
        let start = ResourceUsage.now()
        let live = try open(suspended: false)
        figures.initSeconds = ResourceUsage.now() - start
        if let first = arrival.wait(seconds: 30) {
            figures.firstPostSeconds = first - start
        } else {
            figures.problem = "no POST arrived within 30 s"
        }
        live.close()
    } catch {
        figures.problem = "\(error)"
    }
    return figures
}
#endif
