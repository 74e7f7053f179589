// swift-format-ignore-file
// Kept out of swift-format: the report-building code here uses aligned, hugging call layouts the formatter would rewrite.

// requests-bench: the library against raw URLSession, side by side, in one run.
//
//   swift run -c release requests-bench                       # nginx if installed, else the embedded server
//   swift run -c release requests-bench --server embedded
//   swift run -c release requests-bench --url http://127.0.0.1:8080 [--path /json]
//   swift run requests-bench --smoke                          # quick; exits non-zero if a section has no number
//   swift run -c release requests-bench --write docs/benchmarks.md
//
// Everything here runs on the main thread and waits on semaphores; the work itself runs on the
// sessions' delegate queues and the operation queues' threads, never on the main run loop.

// requests-bench starts child processes (Foundation's `Process`), nginx and servers, and reads /proc: it runs on
// macOS and Linux only. Every file of the target is inside `#if os(macOS) || os(Linux)`, so that an iOS, tvOS or
// watchOS build of the whole package still compiles; there it says so and exits.
#if os(macOS) || os(Linux)
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

// MARK: - Arguments

enum ServerChoice: String {
    case embedded, nginx
}

/// The parts of the benchmark; `--only` picks some.
enum Part: String, CaseIterable {
    case throughput, memory, cancel, decode, overhead, transfers, limits, streams, resume, cache, outbox
}

struct Options {
    var smoke = false
    var writePath: String?
    var baseURL: String?
    var path = "/json"
    var server: ServerChoice?
    var requests: Int?
    var rounds: Int?
    var only: Set<Part> = Set(Part.allCases)
    var concurrencies: [Int]?
    /// For a profiler: run one side of the throughput measurement only.
    var profileSide: String?

    static let usage = """
        usage: requests-bench [--smoke] [--write FILE.md] [--server embedded|nginx]
                              [--url http://host:port] [--path /json] [--requests N] [--rounds N]
                              [--only PARTS] [--concurrency LIST]
               requests-bench --soak [N] [--server-process]
               requests-bench --storm [--rounds R] [--per-round N] [--load] [--url BASE] [--seed S] [--timeout T]
                              [--label TEXT] [--kinds LIST] [--mix default|issue]
               requests-bench --fault-lab [--styles plain,delegate,library] [--rows NAMES] [--kinds NAMES] [--parallel N]
                              [--warm-up get|same]
               requests-bench outbox-kill [--entries 5000] [--kills 200] [--lanes 8] [--seed S] [--refusals 0.02]
               requests-bench outbox-files-kill [--entries 1000] [--kills 100] [--min-kib 256] [--max-kib 4096] [--lanes 4]
                              [--seed S]
               requests-bench outbox-files-memory [--mib 1024] [--form body|multipart]
               requests-bench outbox-coalesce-kill [--saves 10000] [--threads 8] [--kills 20] [--seed S]
               requests-bench outbox-enqueue [--threads 8] [--seconds 5] [--rounds 2] [--reopen-entries 10000]
               requests-bench outbox-drain [--entries 4000] [--lanes 4] [--concurrency 8] [--lost 0.02] [--refusals 0.05]
                              [--rounds 2] [--attempt-timeout 15] [--base-delay 0.05]
               requests-bench outbox-drain --against-direct [--entries 4000] [--lanes 4] [--concurrency 8] [--rounds 5]
                              [--enqueue-batch 100] [--no-warm-up] [--side outbox|direct]
               requests-bench post-keepalive [--requests 2000] [--rounds 5] [--concurrency 16,1] [--body-bytes 200]
                              [--no-embedded] [--idempotency-key]
               requests-bench wait-cpu [--requests 1,100] [--seconds 5] [--streams]
               requests-bench har-cost [--requests 2000] [--rounds 7] [--concurrency 16] [--sizes 1,16,64|none] [--max-entries 1000]
                              [--json-fields LIST] [--no-post] [--post-bytes 200] [--no-op-monitor] [--side without|with]
                              [--url BASE | --serve]

          --smoke            tiny counts; exits 0 only if every section produced a number and no check was violated
          --write FILE       also write the results as Markdown to FILE
          --server KIND      throughput server: nginx (default when installed) or embedded
          --url BASE         measure throughput against BASE + --path instead (an external server)
          --path PATH        path requested on --url (default /json)
          --requests N       requests per throughput run (default 2000, smoke 100)
          --rounds N         alternating rounds per concurrency (default 9, smoke 2)
          --only PARTS       comma-separated subset of throughput,memory,cancel,decode,overhead,transfers,limits,
                             streams,resume,cache,outbox
          --soak [N]         instead: N requests (100,000) with 1 % server faults and 5 % cancellations; checks
                             every completion runs once, nothing else fails and memory stays flat
          --server-process   with --soak: the loopback server runs in a child process (`--serve`), so that
                             only the client's memory is measured
          --storm            instead: the cancel storm. Starts nginx, then R rounds (8), each a child process that keeps 16
                             requests in flight until N (3,000) were added (JSON, 1 MiB bodies, downloads, resumable
                             downloads resumed from their ResumeState, streams; async forms too), cancelling each 0–4 ms
                             after adding it; checks every completion runs once. Prints crashed, hung and exactly-once
                             rounds; exits 1 if any. --load: two busy loops run beside it. --url BASE: a server serving
                             /json, /files/storm-1m.bin and /files/storm-8m.bin instead of nginx. --seed: the first
                             round's seed (the next rounds add 1). --timeout: a round's hang limit in seconds.
                             --label: free text for the table (the build and TSan are detected). --kinds: some of
                             json,body,download,download-1m,resumable,resumable-async,stream,stream-async (default
                             all: every kind but download-1m). --mix issue: issue 46's mix, json,body,download-1m,resumable
          --concurrency LIST throughput concurrencies (default 1,16,64)
          outbox-kill        instead: nothing lost, nothing doubled. Child processes (`outbox-child`) enqueue --entries
                             POSTs into an outbox on one folder, in --lanes lanes, printing an ack after each enqueue;
                             the parent SIGKILLs them at --kills random moments, restarting after the highest ack, and
                             lets the last one drain. The loopback server applies each Idempotency-Key once and answers
                             a share (--refusals) 503. Checks every ack was applied, no key had two bodies, nothing was
                             applied twice, lane order held; exits 1 if not
          outbox-files-kill  instead: issue 48's kill test with files. Children (`outbox-files-child`) enqueue entries whose
                             body is a file of --min-kib to --max-kib KiB; SIGKILLs as in outbox-kill. Checks every ack
                             arrived with its file's SHA-256 and no file is left in the outbox's folder; exits 1 if not
          outbox-files-memory instead: one entry with a --mib MiB file sent to the loopback sink; peak resident growth
                             (goal < 64 MiB), enqueue and upload times; exits 1 if missed or the bytes differ
          outbox-coalesce-kill instead: --saves saves of one draft (enqueue replacing: "draft") from --threads threads in
                             children (`outbox-coalesce-child`) through --kills SIGKILLs. Checks the server never
                             applied an older draft after a newer one and the last acknowledged one arrived
          outbox-enqueue     instead: durable enqueues/s and p50/p99 latency from --threads threads into a suspended
                             outbox for --seconds, one per call, against the journal alone (the same threads appending an
                             entry's record, issue 47's goal ≥ 0.8×), --rounds alternating pairs; then 16 per call; the
                             time from opening an outbox with --reopen-entries pending to its first POST; resident memory
                             per pending entry
          outbox-drain       instead: issue 46's drain row. Each round enqueues --entries POSTs (a small JSON body) into a
                             suspended outbox in --lanes lanes, resumes it (--concurrency entries at once) and times the drain
                             against the embedded server (in this process) three times: no faults; --lost of the keys lose
                             their answer on their first arrival (applied, then the connection closed unanswered); --refusals
                             of the keys answered 503 on their first arrival. The server applies each Idempotency-Key once.
                             Prints entries/s, lost ÷ no faults per round (goal ≥ 0.5), the re-sends the server saw; checks
                             every entry applied exactly once and nothing left pending; exits 1 if not.
                             --against-direct: issue 47's rows instead. Each of --rounds (5) rounds times, alternating,
                             the outbox drain without faults (entries enqueued untimed, --enqueue-batch per call, 0: a
                             lane per call) and the same POSTs sent directly with addRequest, each lane a chain, the
                             same queue width and connections; prints both rates, outbox ÷ direct (goal ≥ 0.9), and the
                             drain's journal group commits per removal (goal ≤ 1/8), with the counts to check with strace.
                             --side: time one side only (for a profiler such as callgrind)
          post-keepalive     instead: issue 46's POST row. nginx (1 worker) with two servers answering POST /post, one
                             with keepalive_requests 5 (Connection: close on the 5th answer), one with 1000; the library POSTs
                             a --body-bytes JSON through OperationQueue.addRequest, --requests per round, rounds alternating,
                             at each --concurrency; prints req/s, the ratio (goal ≥ 0.9) and the failures. Then the same
                             against the embedded server closing after 5 requests unannounced (unless --no-embedded). Exits 1
                             if a POST to nginx failed
          wait-cpu           instead: issue 51's row. --requests GETs (each count in turn) wait --seconds on a loopback
                             server in a child process; prints this process's CPU as a share of one core (goal ≤ 2 %).
                             REQUESTS_TRANSPORT=curl: on libcurl (Linux). --streams: idle streams instead (a byte,
                             then nothing), CPU and resident memory per stream (goal < 64 KiB)
          har-cost           instead: issue 49's row. nginx (1 worker) serves JSON arrays of --sizes KiB and answers POST /post;
                             --requests GETs of each size (then POSTs of a --post-bytes JSON) as DataRequests per round, on
                             two queues --concurrency wide, one without monitors and one with a HARRecorder (default
                             redaction, plus --json-fields; maximumBodyBytes 1 MiB; maximumEntries --max-entries), --rounds
                             rounds alternating which goes first. Prints req/s, CPU per request, with ÷ without (goal ≥ 0.95)
                             and how long harData() takes for the entries kept. --no-op-monitor: a third queue with a monitor
                             that does nothing. --side: run one queue only (for callgrind). --serve: only start that nginx,
                             print its base URL and serve until standard input closes; --url BASE: use such a server
                             instead of starting one (callgrind cannot start nginx). Exits 1 if a request failed
          --profile-side S   for perf: only run throughput side S (library, floor, raw-completion or raw-thread) for
                             --rounds runs of --requests at the first --concurrency, print req/s and CPU, exit
        """

    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    static func parse(_ arguments: [String]) throws -> Options {
        var options = Options()
        var remaining = arguments[...]
        func value(for flag: String) throws -> String {
            guard let next = remaining.popFirst(), !next.hasPrefix("--") else {
                throw UsageError(description: "\(flag) needs a value")
            }
            return next
        }
        func positive(for flag: String) throws -> Int {
            let text = try value(for: flag)
            guard let number = Int(text), number > 0 else { throw UsageError(description: "\(flag): not a positive number: \(text)") }
            return number
        }
        while let argument = remaining.popFirst() {
            switch argument {
            case "--smoke": options.smoke = true
            case "--write": options.writePath = try value(for: argument)
            case "--url": options.baseURL = try value(for: argument)
            case "--path":
                let path = try value(for: argument)
                options.path = path.hasPrefix("/") ? path : "/" + path
            case "--server":
                let text = try value(for: argument)
                guard let choice = ServerChoice(rawValue: text) else {
                    throw UsageError(description: "--server must be embedded or nginx, not \(text)")
                }
                options.server = choice
            case "--requests": options.requests = try positive(for: argument)
            case "--rounds": options.rounds = try positive(for: argument)
            case "--concurrency":
                let text = try value(for: argument)
                let values = text.split(separator: ",").map { Int($0) }
                guard !values.isEmpty, values.allSatisfy({ ($0 ?? 0) > 0 }) else {
                    throw UsageError(description: "--concurrency takes positive numbers such as 1,16,64, not \(text)")
                }
                options.concurrencies = values.compactMap { $0 }
            case "--only":
                let text = try value(for: argument)
                let parts = text.split(separator: ",").map { Part(rawValue: String($0)) }
                guard !parts.isEmpty, parts.allSatisfy({ $0 != nil }) else {
                    throw UsageError(description: "--only takes throughput,memory,cancel,decode,overhead,transfers,limits,streams,resume,cache,outbox, not \(text)")
                }
                options.only = Set(parts.compactMap { $0 })
            case "--profile-side":
                let side = try value(for: argument)
                guard ["library", "floor", "raw-completion", "raw-thread"].contains(side) else {
                    throw UsageError(description: "--profile-side takes library, floor, raw-completion or raw-thread, not \(side)")
                }
                options.profileSide = side
            case "--server-process": throw UsageError(description: "--server-process goes with --soak")
            case "-h", "--help":
                print(usage)
                exit(0)
            default:
                throw UsageError(description: "unknown argument: \(argument)")
            }
        }
        if options.baseURL != nil, options.server != nil {
            throw UsageError(description: "--url and --server exclude each other")
        }
        return options
    }
}

/// How much work each section does.
struct Counts {
    var requestsPerRun: Int
    var rounds: Int
    var warmup: Int
    var queued: Int
    var cancelled: Int
    var jsonBytes: Int
    var decodeRounds: Int
    var concurrencies = [1, 16, 64]
    let cancelConcurrency = 16

    static let full = Counts(requestsPerRun: 2000, rounds: 9, warmup: 300, queued: 100_000, cancelled: 10_000,
                             jsonBytes: 10_000_000, decodeRounds: 5)
    static let smoke = Counts(requestsPerRun: 100, rounds: 2, warmup: 20, queued: 1_000, cancelled: 500,
                              jsonBytes: 1_000_000, decodeRounds: 1)
}

func log(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

func fail(_ message: String, code: Int32) -> Never {
    log("requests-bench: \(message)")
    exit(code)
}

if CommandLine.arguments.dropFirst().first == "--transfer-child" {
    runTransferChild(Array(CommandLine.arguments.dropFirst(2)))
}

switch CommandLine.arguments.dropFirst().first {
case "--fault-lab": runFaultLab(Array(CommandLine.arguments.dropFirst(2)))
case "--fault-lab-cell": runFaultLabCell(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-child": runOutboxChild(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-kill": runOutboxKillCommand(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-files-child": runOutboxFilesChild(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-files-kill": runOutboxFilesKillCommand(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-files-memory": runOutboxFilesMemoryCommand(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-coalesce-child": runOutboxCoalesceChild(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-coalesce-kill": runOutboxCoalesceKillCommand(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-enqueue": runOutboxEnqueueCommand(Array(CommandLine.arguments.dropFirst(2)))
case "outbox-drain": runOutboxDrainCommand(Array(CommandLine.arguments.dropFirst(2)))
case "post-keepalive": runPostKeepaliveCommand(Array(CommandLine.arguments.dropFirst(2)))
case "wait-cpu": runWaitCPUCommand(Array(CommandLine.arguments.dropFirst(2)))
case "har-cost": runHARCostCommand(Array(CommandLine.arguments.dropFirst(2)))
default: break
}

if ["--storm-round", "--storm-spin"].contains(CommandLine.arguments.dropFirst().first) || CommandLine.arguments.contains("--storm") {
    runStormCommand(Array(CommandLine.arguments.dropFirst()))
}

if CommandLine.arguments.dropFirst().first == "--serve" {
    // For a soak in another process: prints the base URL, then serves until standard input closes.
    guard let server = try? LoopbackServer() else { fail("could not start the loopback server", code: 2) }
    FileHandle.standardOutput.write(Data((server.baseURL.absoluteString + "\n").utf8))
    _ = FileHandle.standardInput.readDataToEndOfFile()
    exit(0)
}

if CommandLine.arguments.contains("--soak") {
    let soakArguments = CommandLine.arguments.dropFirst().filter { $0 != "--soak" && $0 != "--server-process" }
    guard soakArguments.count <= 1, let count = soakArguments.first.map({ Int($0) }) ?? 100_000, count >= 1 else {
        fail("--soak takes a positive number of requests and --server-process, nothing else\n\(Options.usage)", code: 2)
    }
    let server: SoakServer
    do {
        server = CommandLine.arguments.contains("--server-process") ? try SoakServer.startProcess() : try SoakServer.inProcess()
    } catch {
        fail("could not start the loopback server: \(error)", code: 2)
    }
    log("soak: \(count) requests against \(server.description)…")
    runSoak(total: count, server: server)
}

let options: Options
do {
    options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    log("requests-bench: \(error)")
    log(Options.usage)
    exit(2)
}
var counts = options.smoke ? Counts.smoke : Counts.full
if let requests = options.requests { counts.requestsPerRun = requests }
if let rounds = options.rounds { counts.rounds = rounds }
if let concurrencies = options.concurrencies { counts.concurrencies = concurrencies }

#if DEBUG
let buildConfiguration = "debug"
#else
let buildConfiguration = "release"
#endif
let runStart = ResourceUsage.now()
let startDate = Date()
let loadAtStart = ResourceUsage.loadAverage()

// MARK: - Servers

/// One GET with a 10 s timeout; the error text, or `nil` on a 2xx answer.
func probe(_ url: URL) -> String? {
    let session = makeSession(maxConnectionsPerHost: 1)
    defer { session.finishTasksAndInvalidate() }
    var request = URLRequest(url: url)
    request.timeoutInterval = 10
    let outcome = ProbeOutcome()
    let done = DispatchSemaphore(value: 0)
    session.dataTask(with: request) { _, response, error in
        if let error {
            outcome.set("\(error.localizedDescription)")
        } else if let status = (response as? HTTPURLResponse)?.statusCode, !(200..<300).contains(status) {
            outcome.set("HTTP status \(status)")
        }
        done.signal()
    }.resume()
    guard done.wait(timeout: .now() + 15) == .success else { return "no answer within 15 s" }
    return outcome.message
}

final class ProbeOutcome: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: String?
    func set(_ message: String) { lock.withLock { stored = message } }
    var message: String? { lock.withLock { stored } }
}

let embedded: LoopbackServer
do {
    embedded = try LoopbackServer()
} catch {
    fail("cannot start the embedded LoopbackServer: \(error)", code: 1)
}

var nginx: NginxServer?
var throughputURL: URL
var serverDescription: String
var cpuNote: String
let embeddedCPUNote = "with the embedded server, the server's CPU is in this process and counted on both sides"

if let base = options.baseURL {
    let trimmed = base.hasSuffix("/") ? String(base.dropLast()) : base
    guard let url = URL(string: trimmed + options.path), let scheme = url.scheme?.lowercased(),
          scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty else {
        fail("--url must be an http(s) base URL such as http://127.0.0.1:8080, not \(base)", code: 2)
    }
    if let problem = probe(url) {
        fail("\(url.absoluteString) does not answer: \(problem)", code: 2)
    }
    throughputURL = url
    serverDescription = "external server at \(url.absoluteString)"
    cpuNote = "the server's CPU is not counted, unless it runs inside this process"
} else {
    throughputURL = embedded.url("/json")
    serverDescription = "embedded LoopbackServer (in-process, one thread per connection) at \(throughputURL.absoluteString)"
    cpuNote = embeddedCPUNote
    if options.server != .embedded {
        if let executable = NginxServer.findExecutable() {
            do {
                let server = try NginxServer(executable: executable)
                let url = server.baseURL.appendingPathComponent("json")
                if let problem = probe(url) {
                    server.stop()
                    log("requests-bench: nginx does not answer (\(problem)); falling back to the embedded server")
                    serverDescription += " — fallback: nginx did not answer"
                } else {
                    nginx = server
                    NginxServer.runningPID = server.processIdentifier
                    throughputURL = url
                    let version = (ResourceUsage.run(executable, ["-v"], includeStandardError: true) ?? "nginx")
                        .replacingOccurrences(of: "nginx version: nginx/", with: "nginx ")
                    serverDescription = "\(version) (separate process, 1 worker, keep-alive) at \(url.absoluteString)"
                    cpuNote = "with nginx, the server's CPU is in another process and NOT counted"
                }
            } catch {
                log("requests-bench: \(error); falling back to the embedded server")
                serverDescription += " — fallback: nginx did not start"
            }
        } else {
            log("requests-bench: nginx not found on PATH or at /usr/sbin/nginx; using the embedded server")
            serverDescription += " — fallback: nginx not installed (apt-get install -y nginx-light)"
        }
    }
}

// Stop nginx if the run is interrupted.
signal(SIGINT) { _ in
    if NginxServer.runningPID > 0 { kill(NginxServer.runningPID, SIGTERM) }
    _exit(130)
}

log("requests-bench (\(buildConfiguration) build\(options.smoke ? ", smoke" : ""))")
log("throughput server: \(serverDescription)")

// MARK: - Measurements

func timed<T>(_ title: String, _ body: () -> T) -> T {
    log(title + "…")
    let start = ResourceUsage.now()
    let value = body()
    log(String(format: "  done in %.1f s", ResourceUsage.now() - start))
    return value
}

if let side = options.profileSide {
    let concurrency = counts.concurrencies[0]
    let sides = ThroughputSides(url: throughputURL, concurrency: concurrency)
    let chosen: ThroughputSide = switch side {
    case "library": .library
    case "floor": .floor
    case "raw-thread": .raw(.fromOwnThread)
    default: .raw(.fromCompletionHandler)
    }
    for round in 0...counts.rounds {
        let result = sides.run(chosen, count: round == 0 ? counts.warmup : counts.requestsPerRun)
        if round > 0 {
            log(String(format: "%@ concurrency %d: %.0f req/s, %.1f µs CPU/request, %.1f switches/request, %d failures", side, concurrency,
                       result.requestsPerSecond, result.cpuMicrosecondsPerRequest, result.contextSwitchesPerRequest, result.failures))
        }
    }
    nginx?.stop()
    exit(0)
}

var sections: [Section] = []
if options.only.contains(.throughput) {
    let cells: [ThroughputCell] = timed("1–2. Throughput and CPU per request") {
        counts.concurrencies.map { concurrency in
            measureThroughput(url: throughputURL, concurrency: concurrency, requests: counts.requestsPerRun,
                              warmup: counts.warmup, rounds: counts.rounds, log: log)
        }
    }
    sections += throughputSections(cells, requestsPerRun: counts.requestsPerRun, rounds: counts.rounds,
                                   serverDescription: serverDescription, cpuNote: cpuNote)
}
nginx?.stop()
NginxServer.runningPID = 0

if options.only.contains(.memory) {
    let memory = timed("3. Resident memory per queued request (\(counts.queued) queued)") {
        measureQueuedMemory(url: embedded.url("/json"), count: counts.queued)
    }
    sections.append(memorySection(memory, queued: counts.queued))
}
if options.only.contains(.cancel) {
    let cancellation = timed("4. Cancellation latency (\(counts.cancelled) queued)") {
        var figures = CancellationFigures()
        figures.plain = measureCancellation(server: embedded, count: counts.cancelled,
                                            concurrency: counts.cancelConcurrency, suspend: false)
        log(String(format: "  plain: %.0f ms", figures.plain.latencySeconds * 1000))
        figures.suspended = measureCancellation(server: embedded, count: counts.cancelled,
                                                concurrency: counts.cancelConcurrency, suspend: true)
        log(String(format: "  suspended around the call: %.0f ms", figures.suspended.latencySeconds * 1000))
        let baseline = measureOperationCancellation(count: counts.cancelled, concurrency: counts.cancelConcurrency)
        figures.baselineCallSeconds = baseline.callSeconds
        figures.baselineDrainSeconds = baseline.drainSeconds
        figures.baselineStartedDuringCancel = baseline.startedDuringCancel
        return figures
    }
    sections.append(cancellationSection(cancellation, concurrency: counts.cancelConcurrency))
}
if options.only.contains(.decode) {
    let decode: DecodeFigures = timed("5. Decoding a \(counts.jsonBytes / 1_000_000) MB JSON body") {
        do {
            let body = try makeItemsJSON(targetBytes: counts.jsonBytes)
            return measureDecode(server: embedded, body: body, rounds: counts.decodeRounds)
        } catch {
            log("  could not generate the JSON: \(error)")
            return DecodeFigures()
        }
    }
    sections.append(decodeSection(decode, rounds: counts.decodeRounds))
}
if options.only.contains(.overhead) {
    let count = options.smoke ? 2_000 : 50_000
    let rounds = options.smoke ? 1 : 5
    sections.append(timed("6. Operation overhead without the network") { overheadSection(count: count, rounds: rounds) })
}
if options.only.contains(.transfers) {
    let bytes = options.smoke ? 16 << 20 : 1 << 30
    let (download, upload) = timed("7. Peak memory of a \(bytes >> 20) MiB download and upload") {
        (measureTransfer("download", bytes: bytes, base: embedded.baseURL), measureTransfer("upload", bytes: bytes, base: embedded.baseURL))
    }
    sections.append(transferSection(download: download, upload: upload, bytes: bytes))
}
if options.only.contains(.limits) {
    let bombBytes = options.smoke ? 128 << 20 : 1 << 30
    let hugeBytes = options.smoke ? 256 << 20 : 3 << 30
    let (bomb, huge, late) = timed("8. Hostile responses refused by the default limits") {
        (measureTransfer("gzip-bomb", bytes: bombBytes, base: embedded.baseURL),
         measureTransfer("huge", bytes: hugeBytes, base: embedded.baseURL),
         measureTransfer("deadline", bytes: 1000, base: embedded.baseURL))
    }
    sections.append(limitsSection(bomb: bomb, huge: huge, late: late, bombBytes: bombBytes, hugeBytes: hugeBytes))
}
if options.only.contains(.streams) {
    let bytes = options.smoke ? 16 << 20 : 1 << 30
    let events = options.smoke ? 5_000 : 100_000
    let figures = timed("9. Streams") {
        measureStreams(bytes: bytes, rounds: options.smoke ? 1 : 3, events: events, cancels: options.smoke ? 2 : 20, server: embedded)
    }
    sections.append(streamSection(figures, bytes: bytes, events: events))
}
if options.only.contains(.resume) {
    let bytes = options.smoke ? 16 << 20 : 1 << 30
    let figures = timed("10. Resumable downloads") {
        measureResume(bytes: bytes, cutBytes: options.smoke ? 16 << 20 : 256 << 20, runs: options.smoke ? 2 : 10, cutsPerRun: options.smoke ? 10 : 100, server: embedded)
    }
    sections.append(resumeSection(figures))
}
if options.only.contains(.cache) {
    let figures = timed("11. Response cache") { measureCache(requests: options.smoke ? 200 : 1_000, server: embedded) }
    sections.append(cacheSection(figures))
}
if options.only.contains(.outbox) {
    let kill = timed("12a. Outbox kill test") { runOutboxKillTest(options.smoke ? .smoke : OutboxKillSettings(), server: embedded) }
    sections.append(outboxKillSection(kill))
    let enqueue = timed("12b. Outbox enqueues and reopening") {
        measureOutboxEnqueue(options.smoke ? .smoke : OutboxEnqueueSettings(), server: embedded)
    }
    sections.append(outboxEnqueueSection(enqueue))
}
embedded.stop()
let runSeconds = ResourceUsage.now() - runStart

// MARK: - Table

let missing = sections.flatMap(\.missingNumbers)
let missed = sections.flatMap(\.missedGoals)
let violations = sections.flatMap(\.violations)

print("")
print("requests-bench — \(buildConfiguration) build\(options.smoke ? ", smoke counts" : ""), \(fixed(runSeconds, 1)) s")
print("")
print(plainTextTable(sections))
if missed.isEmpty {
    print("Every goal met.")
} else {
    print("Goals missed: " + missed.joined(separator: "; "))
}
if !missing.isEmpty {
    print("NO NUMBER for: " + missing.joined(separator: "; "))
}
if !violations.isEmpty {
    print("VIOLATED: " + violations.joined(separator: "; "))
}

// MARK: - Markdown

if let writePath = options.writePath {
    let arguments = CommandLine.arguments.dropFirst().joined(separator: " ")
    let command = buildConfiguration == "release"
        ? "swift run -c release requests-bench \(arguments)"
        : "swift run requests-bench \(arguments)"
    let dateFormatter = ISO8601DateFormatter()
    dateFormatter.formatOptions = [.withInternetDateTime]
    let processors = ProcessInfo.processInfo.activeProcessorCount
    let goalsLine = missed.isEmpty
        ? "Every goal was met in this run."
        : "**Goals missed in this run:** " + missed.joined(separator: "; ") + ". See the notes under each table."
    let markdown = """
        # Benchmarks

        Written by `requests-bench`; rerun the command to refresh it. The machine is noisy, so the throughput
        runs of the library and of raw `URLSession` alternate and the table gives medians.

        - **Command:** `\(command.trimmingCharacters(in: .whitespaces))` (\(buildConfiguration) build; the whole run took \(fixed(runSeconds, 0)) s)
        - **Date:** \(dateFormatter.string(from: startDate))
        - **Machine:** `\(ResourceUsage.uname())`; \(processors) cores (\(ResourceUsage.cpuModel())); \(ResourceUsage.memoryTotal()) memory
        - **Load:** 1-minute load average \(loadAtStart) at the start and \(ResourceUsage.loadAverage()) at the end (other work was running on the machine if it is well above 0)
        - **Swift:** \(ResourceUsage.swiftVersion())
        - **Throughput server:** \(serverDescription). Sections 3–5 use the embedded `LoopbackServer`.
        - **CPU accounting:** \(cpuNote).

        \(goalsLine)

        \(markdownTables(sections))
        """
    // The profile and the record of changes below the marker are written by hand, and kept.
    let marker = "<!-- Written by hand below this line; requests-bench keeps it. -->"
    var kept = ""
    if let existing = try? String(contentsOfFile: writePath, encoding: .utf8), let start = existing.range(of: marker)?.lowerBound {
        kept = "\n\n" + String(existing[start...])
    }
    do {
        let markdown = markdown.trimmingCharacters(in: .newlines) + kept
        let directory = URL(fileURLWithPath: writePath).deletingLastPathComponent()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try markdown.write(toFile: writePath, atomically: true, encoding: .utf8)
        log("wrote \(writePath)")
    } catch {
        fail("cannot write \(writePath): \(error)", code: 1)
    }
}

exit(missing.isEmpty && violations.isEmpty ? 0 : 1)
#else
import Foundation

FileHandle.standardError.write(Data("requests-bench runs on macOS and Linux only: it starts child processes and servers\n".utf8))
exit(2)
#endif
