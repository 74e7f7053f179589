#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

// `requests-bench har-cost [--requests 2000] [--rounds 7] [--concurrency 16] [--sizes 1,16,64|none] [--max-entries 1000]
//                          [--json-fields LIST] [--no-post] [--post-bytes 200] [--no-op-monitor] [--side without|with]
//                          [--url BASE | --serve]`:
// issue 49's row "recording costs at most 5 % of throughput at C=16 for bodies up to 64 KiB". nginx (1 worker) serves
// JSON arrays of each size (`application/json`) and answers `POST /post`; the library GETs them as `DataRequest`s (the
// raw body, nothing decoded: the cheapest request, so the recorder's share is the largest), all of a round's requests
// added at once to a queue `--concurrency` wide. Each case runs on two queues, each with its own session: one without
// monitors, one with a `HARRecorder` in `requestPolicies.monitors` (the default redaction and `maximumBodyBytes`,
// 1 MiB; `maximumEntries` `--max-entries`, the "keep the last N for a bug report" use). The rounds alternate which
// goes first, after a warm-up of each. Prints req/s, CPU per request and with ÷ without per case, then the time
// `harData()` takes for the entries kept. For callgrind, which cannot start nginx from the process it traces:
// `har-cost --serve` starts nginx with the files and prints its base URL (until standard input closes), and
// `har-cost --url BASE --side with` runs against it.

/// The recording row's settings.
struct HARCostSettings {
    var requests = 2_000
    var rounds = 7
    var concurrency = 16
    var sizesKiB = [1, 16, 64]
    var maximumEntries = 1_000
    var jsonFields: Set<String> = []
    var post = true
    var postBytes = 200
    /// A third side with a monitor that does nothing: what any monitor costs, apart from the recording.
    var noOpMonitor = false
    /// For a profiler: run only this side ("without" or "with").
    var side: String?
    /// A server started by `har-cost --serve` (valgrind cannot start nginx from inside the process it traces).
    var baseURL: URL?
    /// Only start nginx, print its base URL, and serve until standard input closes.
    var serve = false

    init(_ arguments: [String]) {
        var flags = FlagReader(arguments, mode: "har-cost")
        while let flag = flags.nextFlag() {
            switch flag {
            case "--requests": requests = max(1, flags.number(flag))
            case "--rounds": rounds = max(1, flags.number(flag))
            case "--concurrency": concurrency = max(1, flags.number(flag))
            case "--max-entries": maximumEntries = flags.number(flag)
            case "--post-bytes": postBytes = max(20, flags.number(flag))
            case "--no-post": post = false
            case "--no-op-monitor": noOpMonitor = true
            case "--serve": serve = true
            case "--url":
                let text = flags.value(flag)
                guard let url = URL(string: text.hasSuffix("/") ? String(text.dropLast()) : text), url.scheme == "http" else {
                    fail("har-cost: --url takes a base URL such as http://127.0.0.1:8080, not \(text)", code: 2)
                }
                baseURL = url
            case "--json-fields": jsonFields = Set(flags.value(flag).split(separator: ",").map(String.init))
            case "--sizes":
                let text = flags.value(flag)
                let values = text.split(separator: ",").compactMap { Int($0) }.filter { $0 >= 0 }
                guard !values.isEmpty || text == "none" else {
                    fail("har-cost: --sizes takes sizes in KiB such as 1,16,64, or none, not \(text)", code: 2)
                }
                sizesKiB = values
            case "--side":
                let text = flags.value(flag)
                guard ["without", "with"].contains(text) else { fail("har-cost: --side takes without or with, not \(text)", code: 2) }
                side = text
            default: fail("har-cost: unknown argument \(flag)\n\(Options.usage)", code: 2)
            }
        }
    }
}

/// A monitor that does nothing: the cost of the event delivery alone.
private final class NoOpMonitor: RequestEventMonitor {}

/// A side of the comparison: a session and a queue, with or without a recorder.
private final class HARCostSide {
    let name: String
    let session: URLSession
    let queue = OperationQueue()
    let recorder: HARRecorder?

    init(name: String, concurrency: Int, recorder: HARRecorder?, monitor: (any RequestEventMonitor)? = nil) {
        self.name = name
        self.recorder = recorder
        session = makeSession(maxConnectionsPerHost: concurrency)
        queue.maxConcurrentOperationCount = concurrency
        queue.name = "requests-bench.har-cost.\(name)"
        if let recorder { queue.requestPolicies.monitors.append(recorder) }
        if let monitor { queue.requestPolicies.monitors.append(monitor) }
    }

    func close() {
        _ = waitUntilDrained(queue, seconds: 10)
        session.finishTasksAndInvalidate()
    }
}

/// One timed round.
private struct HARCostRound {
    var requestsPerSecond = Double.nan
    var cpuMicrosecondsPerRequest = Double.nan
    var failures = 0
}

/// What one case (a GET of one size, or the POST) sends.
private enum HARCostCase {
    case get(URL, bytes: Int)
    case post(URL, body: Data)

    var name: String {
        switch self {
        case let .get(_, bytes): "GET, \(bytes >> 10) KiB JSON body"
        case let .post(_, body): "POST, \(body.count) B JSON body"
        }
    }

    func add(to side: HARCostSide, index: Int, countdown: Countdown) {
        switch self {
        case let .get(url, bytes):
            side.queue.addRequest(RawBytesRequest(url: url, identifier: String(index)), session: side.session) { result in
                if case let .success(data) = result { countdown.done(ok: data.count == bytes) } else { countdown.done(ok: false) }
            }
        case let .post(url, body):
            side.queue.addRequest(KeepalivePost(url: url, identifier: String(index), body: body), session: side.session) { result in
                if case let .success(answer) = result { countdown.done(ok: answer.ok) } else { countdown.done(ok: false) }
            }
        }
    }
}

/// `count` requests of `kind` through `side`, all added at once.
private func harCostRound(_ kind: HARCostCase, side: HARCostSide, count: Int) -> HARCostRound {
    let countdown = Countdown(count)
    let before = ResourceUsage.usage()
    let start = ResourceUsage.now()
    for index in 0..<count { kind.add(to: side, index: index, countdown: countdown) }
    let completed = countdown.wait(seconds: max(120, Double(count) / 10))
    let seconds = ResourceUsage.now() - start
    let cpu = ResourceUsage.usage().cpuMicroseconds - before.cpuMicroseconds
    var round = HARCostRound(failures: countdown.failureCount)
    if completed {
        round.requestsPerSecond = Double(count) / seconds
        round.cpuMicrosecondsPerRequest = cpu / Double(count)
    } else {
        round.failures += 1
    }
    return round
}

/// The figures of one case.
private struct HARCostResult {
    let name: String
    /// Per side, in the order of the sides: the rounds.
    var rounds: [[HARCostRound]]
    /// Entries the recorder kept, and how long `harData()` took for them (seconds) and its size.
    var entries = 0
    var harDataSeconds = Double.nan
    var harDataBytes = 0
    /// This process's resident memory after the rounds, before `harData()`, with the recorder's entries kept.
    var residentBytes = 0
}

/// Warms each side up, then runs `rounds` rounds of each, alternating which goes first.
private func measureHARCost(_ kind: HARCostCase, settings: HARCostSettings) -> HARCostResult {
    let redaction = Redaction(jsonFields: settings.jsonFields)
    let makeRecorder = { HARRecorder(redaction: redaction, maximumEntries: settings.maximumEntries) }
    var sides = [
        HARCostSide(name: "without", concurrency: settings.concurrency, recorder: nil),
        HARCostSide(name: "with", concurrency: settings.concurrency, recorder: makeRecorder()),
    ]
    if settings.noOpMonitor {
        sides.append(HARCostSide(name: "no-op monitor", concurrency: settings.concurrency, recorder: nil, monitor: NoOpMonitor()))
    }
    if let only = settings.side { sides = sides.filter { $0.name == only } }
    defer { sides.forEach { $0.close() } }
    for side in sides { _ = harCostRound(kind, side: side, count: max(100, settings.requests / 4)) }
    var result = HARCostResult(name: kind.name, rounds: sides.map { _ in [] })
    for round in 0..<settings.rounds {
        for offset in sides.indices {
            let index = (round + offset) % sides.count
            let figures = harCostRound(kind, side: sides[index], count: settings.requests)
            result.rounds[index].append(figures)
            log(
                "  \(kind.name), round \(round + 1)/\(settings.rounds), \(sides[index].name): \(grouped(figures.requestsPerSecond)) req/s, "
                    + "\(grouped(figures.cpuMicrosecondsPerRequest)) µs CPU/request, failures \(figures.failures)")
        }
    }
    ResourceUsage.trimHeap()
    result.residentBytes = ResourceUsage.residentBytes() ?? 0
    if let recorder = sides.compactMap(\.recorder).first {
        result.entries = recorder.entryCount
        let start = ResourceUsage.now()
        let data = try? recorder.harData()
        result.harDataSeconds = ResourceUsage.now() - start
        result.harDataBytes = data?.count ?? 0
    }
    return result
}

/// `requests-bench har-cost …`: exits 1 if a request failed.
func runHARCostCommand(_ arguments: [String]) -> Never {
    let settings = HARCostSettings(arguments)
    let files = Dictionary(uniqueKeysWithValues: settings.sizesKiB.map { ("body-\($0)k.json", $0 << 10) })
    var nginx: NginxServer?
    if settings.baseURL == nil {
        guard let executable = NginxServer.findExecutable() else { fail("har-cost: nginx not found (apt-get install -y nginx-light)", code: 2) }
        do {
            nginx = try NginxServer(executable: executable, jsonFiles: files)
        } catch {
            fail("har-cost: \(error)", code: 2)
        }
        NginxServer.runningPID = nginx?.processIdentifier ?? 0
        signal(SIGINT) { _ in
            if NginxServer.runningPID > 0 { kill(NginxServer.runningPID, SIGTERM) }
            _exit(130)
        }
    }
    guard let base = settings.baseURL ?? nginx?.baseURL else { fail("har-cost: no server", code: 2) }
    if settings.serve {
        FileHandle.standardOutput.write(Data((base.absoluteString + "\n").utf8))
        _ = FileHandle.standardInput.readDataToEndOfFile()
        nginx?.stop()
        exit(0)
    }
    let loadAtStart = ResourceUsage.loadAverage()
    var cases = settings.sizesKiB.map {
        HARCostCase.get(base.appendingPathComponent("json-files/body-\($0)k.json"), bytes: $0 << 10)
    }
    if settings.post {
        cases.append(.post(base.appendingPathComponent("post"), body: KeepalivePost.body(bytes: settings.postBytes)))
    }
    log(
        "har-cost: \(settings.requests) requests per round, \(settings.rounds) rounds, concurrency \(settings.concurrency), "
            + "HARRecorder(maximumEntries: \(settings.maximumEntries)\(settings.jsonFields.isEmpty ? "" : ", jsonFields \(settings.jsonFields.sorted())")), "
            + "server at \(base.absoluteString); load \(loadAtStart)")
    let results = cases.map { measureHARCost($0, settings: settings) }
    nginx?.stop()
    NginxServer.runningPID = 0
    let loadAtEnd = ResourceUsage.loadAverage()

    print("")
    print(
        "har-cost: \(grouped(Double(settings.requests))) requests per round, \(settings.rounds) alternating rounds, concurrency "
            + "\(settings.concurrency), \(nginx == nil ? "server at \(base.absoluteString)" : "nginx (1 worker)"); HARRecorder with the default redaction"
            + (settings.jsonFields.isEmpty ? "" : " and jsonFields \(settings.jsonFields.sorted().joined(separator: ","))")
            + ", maximumBodyBytes 1 MiB, maximumEntries \(settings.maximumEntries)")
    print("load average (1 min): \(loadAtStart) at the start, \(loadAtEnd) at the end")
    var failures = 0
    var worst = Double.infinity
    for result in results {
        failures += result.rounds.joined().reduce(0) { $0 + $1.failures }
        let medians = result.rounds.map { median($0.map(\.requestsPerSecond)) }
        let cpu = result.rounds.map { median($0.map(\.cpuMicrosecondsPerRequest)) }
        let names = settings.side.map { [$0] } ?? (["without", "with"] + (settings.noOpMonitor ? ["no-op monitor"] : []))
        print("\(result.name):")
        for (index, name) in names.enumerated() {
            print(
                "  \(name): \(result.rounds[index].map { grouped($0.requestsPerSecond) }.joined(separator: " / ")) req/s "
                    + "(median \(grouped(medians[index])), CPU \(grouped(cpu[index], decimals: 1)) µs/request)")
        }
        if settings.side == nil {
            let perRound = zip(result.rounds[1], result.rounds[0]).map { $0.requestsPerSecond / $1.requestsPerSecond }
            let ratio = medians[1] / medians[0]
            worst = min(worst, ratio.isNaN ? 0 : ratio)
            print(
                "  with ÷ without: \(fixed(ratio, 3)) (per round \(perRound.map { fixed($0, 2) }.joined(separator: ", ")), "
                    + "median of those \(fixed(median(perRound), 3))); CPU \(signed(cpu[1] - cpu[0], 1)) µs/request")
            if settings.noOpMonitor {
                print("  no-op monitor ÷ without: \(fixed(medians[2] / medians[0], 3))")
            }
        }
        if !result.harDataSeconds.isNaN {
            print(
                "  harData() of the \(result.entries) entries kept: \(grouped(result.harDataSeconds * 1000, decimals: 1)) ms, "
                    + "\(grouped(Double(result.harDataBytes) / 1024)) KiB; resident before it \(grouped(Double(result.residentBytes) / 1_048_576)) MiB")
        }
    }
    print("| Case | Without | With | With ÷ without |")
    print("|---|---:|---:|---:|")
    if settings.side == nil {
        for result in results {
            let medians = result.rounds.map { median($0.map(\.requestsPerSecond)) }
            print("| \(result.name) | \(grouped(medians[0])) req/s | \(grouped(medians[1])) req/s | **\(fixed(medians[1] / medians[0], 3))** |")
        }
        print("Goal (with ≥ 0.95× without, every case): \(worst >= 0.95 ? "met" : "MISSED") (worst \(fixed(worst, 3)))")
    }
    print("Command: \(benchCommandLine())")
    print(failures == 0 ? "No request failed." : "FAILED: \(failures) requests failed")
    exit(failures == 0 ? 0 : 1)
}
#endif
