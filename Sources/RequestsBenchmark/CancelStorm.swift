#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// `requests-bench --storm [--rounds R] [--per-round N] [--load] [--url BASE] [--seed S] [--timeout T] [--label TEXT]
// [--kinds LIST] [--mix default|issue]`: the cancel storm. Starts nginx once (unless --url), then runs R rounds, each in a child process
// (`--storm-round`, CancelStormRound.swift) so that a crash (on Linux, Foundation's `TaskRegistry.swift:118` when a
// task's cancel meets its completion) ends only that round. With --load, two busy loops (`--storm-spin` children)
// run beside the rounds. Prints a table; exits 1 if a round crashed, hung or saw a completion run other than once.

/// What the storm's server serves: the parent's nginx (`NginxServer(executable:files:)`), or `--url`.
enum StormPaths {
    static let json = "/json"
    static let mebibyte = "/files/storm-1m.bin"
    static let large = "/files/storm-8m.bin"
    static let files = ["storm-1m.bin": 1 << 20, "storm-8m.bin": 8 << 20]
}

/// The kinds of request, picked uniformly. `download-1m` is a download of the 1 MiB file (the issue mix's); the
/// others fetch the 8 MiB one.
enum StormKind: String, CaseIterable {
    case json, body, download, download1m = "download-1m", resumable, resumableAsync = "resumable-async", stream, streamAsync = "stream-async"

    /// Today's mix (`all`, the default): every kind but `download-1m`.
    static let defaultMix: [StormKind] = [.json, .body, .download, .resumable, .resumableAsync, .stream, .streamAsync]
    /// The mix of issue 46 (item 3): a 78-byte JSON, a 1 MiB body, a 1 MiB download, and a resumable download (8 MiB)
    /// cancelled with a resume state, the next ones resumed from those states and cancelled again.
    static let issueMix: [StormKind] = [.json, .body, .download1m, .resumable]

    /// `all` (today's mix), `issue` (issue 46's), or a comma-separated list of kinds; `nil` when a name is unknown.
    static func parse(_ text: String) -> [StormKind]? {
        guard text != "all" else { return defaultMix }
        guard text != "issue" else { return issueMix }
        let kinds = text.split(separator: ",").map { StormKind(rawValue: String($0)) }
        guard !kinds.isEmpty, kinds.allSatisfy({ $0 != nil }) else { return nil }
        return kinds.compactMap { $0 }
    }
}

/// The child's one-line report, read by the parent.
struct StormRoundSummary: Codable {
    var seed: UInt64 = 0
    var requests = 0
    var cancels = 0
    /// Cancels that came after the completion had run (no-ops).
    var cancelsAfterCompletion = 0
    var ok = 0
    var cancelled = 0
    var errors = 0
    var errorKinds: [String: Int] = [:]
    var twice = 0
    var never = 0
    var lateElements = 0
    var resumeStates = 0
    var resumes = 0
    var resumesOK = 0
    var seconds = 0.0
    /// How late the cancels came after their planned moment: median, 99th percentile and largest, in ms.
    var cancelDelayMs: [Double] = []
    var hung = false
}

/// Routes the three storm modes; called from main.swift before anything else starts.
func runStormCommand(_ arguments: [String]) -> Never {
    switch arguments.first {
    case "--storm-round": runStormRound(Array(arguments.dropFirst()))
    case "--storm-spin": runStormSpin()
    default: runStorm(arguments.filter { $0 != "--storm" })
    }
}

/// What an interruption (SIGINT, SIGTERM, SIGHUP) stops and removes: the running round and the busy loops (by
/// process id), nginx, and the round's files. Handled on a dispatch queue, not in a signal handler, so it can clean up.
private final class StormCleanup: @unchecked Sendable {
    private let lock = NSLock()
    private var processes: [pid_t: Process] = [:]
    private var files: [URL] = []
    private var nginx: NginxServer?
    private var sources: [DispatchSourceSignal] = []

    func watchSignals() {
        for number in [SIGINT, SIGTERM, SIGHUP] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [self] in interrupt(number) }
            source.resume()
            lock.withLock { sources.append(source) }
        }
    }

    func track(_ process: Process) { lock.withLock { processes[process.processIdentifier] = process } }
    func untrack(_ process: Process) { lock.withLock { processes[process.processIdentifier] = nil } }
    func track(_ file: URL) { lock.withLock { files.append(file) } }
    func untrack(_ file: URL) { lock.withLock { files.removeAll { $0 == file } } }
    func setNginx(_ server: NginxServer?) { lock.withLock { nginx = server } }

    private func interrupt(_ number: Int32) {
        let (children, paths, server) = lock.withLock { (Array(processes.values), files, nginx) }
        children.forEach(stop)
        server?.stop()
        paths.forEach { try? FileManager.default.removeItem(at: $0) }
        log("storm: interrupted by signal \(number); stopped \(children.count) children\(server == nil ? "" : " and nginx")")
        exit(130)
    }
}

private let stormCleanup = StormCleanup()

/// A CPU-bound loop until the parent goes away (killed at the end, or orphaned if the parent was killed).
func runStormSpin() -> Never {
    let parent = getppid()
    var x = UInt64(truncatingIfNeeded: Int(getpid()))
    while true {
        for _ in 0..<2_000_000 { x = x &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407 }
        if getppid() != parent { exit(x == 42 ? 1 : 0) }
    }
}

private struct StormOptions {
    var rounds = 8
    var perRound = 3_000
    var load = false
    var baseURL: String?
    var seed = UInt64(Date().timeIntervalSince1970 * 1000) & 0xFFFF_FFFF
    var timeout: Double?
    var label = ""
    var kinds = "all"
    /// `no-cache` (`.ephemeral` without a URLCache, today's) or `ephemeral` (as Foundation makes it, the issue's).
    var session = "no-cache"

    init(_ arguments: [String]) {
        var remaining = arguments[...]
        func value(_ flag: String) -> String {
            guard let next = remaining.popFirst(), !next.hasPrefix("--") else { fail("\(flag) needs a value\n\(Options.usage)", code: 2) }
            return next
        }
        func positive(_ flag: String) -> Int {
            let text = value(flag)
            guard let number = Int(text), number > 0 else { fail("\(flag): not a positive number: \(text)", code: 2) }
            return number
        }
        while let flag = remaining.popFirst() {
            switch flag {
            case "--rounds": rounds = positive(flag)
            case "--per-round": perRound = positive(flag)
            case "--load": load = true
            case "--url": baseURL = value(flag)
            case "--seed": seed = UInt64(positive(flag))
            case "--timeout": timeout = Double(positive(flag))
            case "--label": label = value(flag)
            case "--mix":
                let mix = value(flag)
                guard ["default", "issue"].contains(mix) else { fail("--mix takes default or issue, not \(mix)", code: 2) }
                kinds = mix == "issue" ? "issue" : "all"
                session = mix == "issue" ? "ephemeral" : "no-cache"
            case "--session":
                session = value(flag)
                guard ["ephemeral", "no-cache"].contains(session) else { fail("--session takes ephemeral or no-cache, not \(session)", code: 2) }
            case "--kinds":
                kinds = value(flag)
                guard StormKind.parse(kinds) != nil else {
                    fail("--kinds takes all or some of \(StormKind.allCases.map(\.rawValue).joined(separator: ",")), not \(kinds)", code: 2)
                }
            default: fail("--storm: unknown argument \(flag)\n\(Options.usage)", code: 2)
            }
        }
    }
}

/// How one round ended.
private struct StormRound {
    enum Status: String {
        case ok, crashed, hung
        case exactlyOnce = "exactly-once"
    }
    var seed: UInt64
    var status: Status = .ok
    var how = ""
    var summary: StormRoundSummary?
    var issued = 0
    var seconds = 0.0
    var tail: [String] = []
    var leftoverFiles = 0
    var sanitizerReports = 0
}

/// Whether ThreadSanitizer's runtime is in this process.
private var threadSanitizerLoaded: Bool {
    #if canImport(Glibc)
    guard let handle = dlopen(nil, RTLD_NOW) else { return false }
    return dlsym(handle, "__tsan_init") != nil
    #else
    return false
    #endif
}

private func startChild(_ arguments: [String], environment: [String: String]? = nil, output: FileHandle?, errors: FileHandle?) -> Process? {
    let process = Process()
    process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments = arguments
    if let environment { process.environment = environment }
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = output ?? FileHandle.nullDevice
    process.standardError = errors ?? FileHandle.nullDevice
    do {
        try process.run()
    } catch {
        log("storm: could not start \(arguments.first ?? "a child"): \(error)")
        return nil
    }
    return process
}

private func stop(_ process: Process?) {
    guard let process, process.isRunning else { return }
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
}

private func countFiles(in folder: URL) -> Int {
    guard let enumerator = FileManager.default.enumerator(at: folder, includingPropertiesForKeys: nil) else { return 0 }
    return enumerator.allObjects.count
}

/// Runs one round in a child with its own temporary directory; kills it `grace` seconds after its own timeout.
private func runRound(number: Int, base: URL, options: StormOptions, timeout: Double) -> StormRound {
    var round = StormRound(seed: options.seed &+ UInt64(number))
    let temporary = FileManager.default.temporaryDirectory.appendingPathComponent("requests-storm-\(getpid())-\(number)")
    // Standard output and error go to files: the backtrace of a crash can be long, and nothing need read it meanwhile.
    let outputFile = URL(fileURLWithPath: temporary.path + ".stdout")
    let errorFile = URL(fileURLWithPath: temporary.path + ".stderr")
    // The `ephemeral` session's URLCache.shared keeps a disk cache under XDG_CACHE_HOME: the round's own, removed after it.
    let cacheFolder = URL(fileURLWithPath: temporary.path + ".cache")
    let paths = [temporary, outputFile, errorFile, cacheFolder]
    paths.forEach(stormCleanup.track)
    defer {
        paths.forEach { try? FileManager.default.removeItem(at: $0) }
        paths.forEach(stormCleanup.untrack)
    }
    guard (try? FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)) != nil,
        FileManager.default.createFile(atPath: outputFile.path, contents: nil), let output = try? FileHandle(forWritingTo: outputFile),
        FileManager.default.createFile(atPath: errorFile.path, contents: nil), let errors = try? FileHandle(forWritingTo: errorFile)
    else {
        return StormRound(seed: round.seed, status: .crashed, how: "could not create \(temporary.path)")
    }
    var environment = ProcessInfo.processInfo.environment
    environment["TMPDIR"] = temporary.path
    environment["XDG_CACHE_HOME"] = cacheFolder.path
    if threadSanitizerLoaded, environment["SWIFT_BACKTRACE"] == nil {
        // Under TSan, the backtracer's fork fails a TSan check and the half-started `swift-backtrace` hangs, holding
        // the child's descriptors.
        environment["SWIFT_BACKTRACE"] = "enable=no"
    }
    let arguments = [
        "--storm-round", "--url", base.absoluteString, "--per-round", String(options.perRound),
        "--seed", String(round.seed), "--timeout", String(Int(timeout)), "--kinds", options.kinds,
        "--session", options.session,
    ]
    let start = ResourceUsage.now()
    guard let process = startChild(arguments, environment: environment, output: output, errors: errors) else {
        return StormRound(seed: round.seed, status: .crashed, how: "could not start")
    }
    stormCleanup.track(process)
    var killed = false
    var ended = exitStatus(of: process)
    while ended == nil {
        if !killed, ResourceUsage.now() - start > timeout + 60 {
            kill(process.processIdentifier, SIGKILL)
            killed = true
        }
        usleep(50_000)
        ended = exitStatus(of: process)
    }
    stormCleanup.untrack(process)
    try? errors.close()
    try? output.close()
    round.seconds = ResourceUsage.now() - start
    let stdout = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
    let stderr = (try? String(contentsOf: errorFile, encoding: .utf8)) ?? ""
    // For a closer look at a crash (every thread's backtrace with SWIFT_BACKTRACE=threads=all): keep each round's log.
    if let folder = ProcessInfo.processInfo.environment["REQUESTS_STORM_LOGS"] {
        try? stderr.write(toFile: "\(folder)/round-\(round.seed).stderr", atomically: true, encoding: .utf8)
    }
    let lines = stderr.split(separator: "\n").map(String.init)
    round.sanitizerReports = lines.filter { $0.contains("WARNING: ThreadSanitizer") }.count
    round.issued = lines.compactMap { $0.hasPrefix("storm-round: issued ") ? Int($0.dropFirst(20)) : nil }.last ?? 0
    round.tail = crashLines(lines.filter { !$0.hasPrefix("storm-round: issued ") })
    round.summary = stdout.split(separator: "\n").last.flatMap { try? JSONDecoder().decode(StormRoundSummary.self, from: Data($0.utf8)) }
    if let summary = round.summary { round.issued = summary.requests }
    let (signalled, status) = ended ?? (false, 0)
    if killed {
        round.status = .hung
        round.how = "killed"
    } else if signalled {
        round.status = .crashed
        let names: [Int32: String] = [4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"]
        round.how = names[status] ?? "signal \(status)"
    } else if status == 0 || (status == 66 && round.sanitizerReports > 0 && round.summary?.hung == false) {
        // 66: ThreadSanitizer's exit status for a run that finished but reported races.
        round.status = .ok
        round.how = status == 0 ? "exit 0" : "exit 66 (TSan)"
        round.leftoverFiles = countFiles(in: temporary)
    } else if status == 3 {
        round.status = .exactlyOnce
        round.how = "exit 3"
    } else if status == 4 {
        round.status = .hung
        round.how = "exit 4"
    } else {
        round.status = .crashed
        round.how = "exit \(status)"
    }
    return round
}

/// How `process` ended (killed by a signal, and the signal or exit status), or `nil` while it runs. On Linux from
/// `waitid` without reaping it: Foundation learns of the exit when a socket the child holds closes, and a process the
/// child started (Swift's crash backtracer) can hold that socket for as long as it lives.
private func exitStatus(of process: Process) -> (signalled: Bool, status: Int32)? {
    #if canImport(Glibc)
    var info = siginfo_t()
    let pid = process.processIdentifier
    if waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, info._sifields._sigchld.si_pid == pid {
        return (info.si_code != CLD_EXITED, info._sifields._sigchld.si_status)
    }
    #endif
    guard !process.isRunning else { return nil }
    return (process.terminationReason == .uncaughtSignal, process.terminationStatus)
}

/// What to show of a failed round's standard error: the `Fatal error` line and the crashed thread's first frames
/// (from Swift's backtracer), else the last lines.
private func crashLines(_ lines: [String]) -> [String] {
    let fatal = lines.first { $0.contains("Fatal error") || $0.contains("Program crashed") || $0.contains("HANG") || $0.contains("EXACTLY-ONCE") }
    guard let crashed = lines.firstIndex(where: { $0.hasPrefix("Thread ") && $0.hasSuffix("crashed:") }) else {
        return Array(lines.suffix(6))
    }
    let after = lines[(crashed + 1)...]
    let end = after.firstIndex { $0.hasPrefix("Thread ") } ?? after.endIndex
    let frames = after[..<end].filter { !["", "..."].contains($0.trimmingCharacters(in: .whitespaces)) }.prefix(8)
    return (fatal.map { [$0] } ?? []) + [lines[crashed]] + frames
}

private func runStorm(_ arguments: [String]) -> Never {
    let options = StormOptions(arguments)
    #if DEBUG
    let build = "debug"
    #else
    let build = "release"
    #endif
    let sanitizer = threadSanitizerLoaded ? " + TSan" : ""
    let timeout = options.timeout ?? (120 + Double(options.perRound) * 0.05 * (threadSanitizerLoaded ? 4 : 1))
    stormCleanup.watchSignals()
    var nginx: NginxServer?
    var serverDescription: String
    let base: URL
    if let text = options.baseURL {
        guard let url = URL(string: text.hasSuffix("/") ? String(text.dropLast()) : text), url.host != nil else { fail("--url: not a base URL: \(text)", code: 2) }
        base = url
        serverDescription = "external server at \(url.absoluteString) (must serve \(StormPaths.json), \(StormPaths.mebibyte), \(StormPaths.large))"
    } else {
        guard let executable = NginxServer.findExecutable() else { fail("--storm needs nginx (apt-get install -y nginx-light), or --url", code: 2) }
        do {
            let server = try NginxServer(executable: executable, files: StormPaths.files)
            nginx = server
            base = server.baseURL
            serverDescription = "nginx (1 worker) at \(server.baseURL.absoluteString)"
        } catch {
            fail("storm: \(error)", code: 2)
        }
    }
    stormCleanup.setNginx(nginx)
    for path in [StormPaths.json, StormPaths.mebibyte, StormPaths.large] {
        if let problem = probe(base.appendingPathComponent(path)) {
            nginx?.stop()
            fail("storm: \(base.absoluteString)\(path) does not answer: \(problem)", code: 2)
        }
    }
    var spinners: [Process] = []
    if options.load {
        spinners = (0..<2).compactMap { _ in startChild(["--storm-spin"], output: nil, errors: nil) }
        guard spinners.count == 2 else {
            spinners.forEach(stop)
            nginx?.stop()
            fail("storm: could not start the busy loops", code: 2)
        }
        spinners.forEach(stormCleanup.track)
    }
    let mode = options.load ? "load (2 busy loops)" : "quiet"
    let what = "kinds \(options.kinds), session \(options.session), \(build)\(sanitizer), \(mode), seed \(options.seed)"
    log("storm: \(options.rounds) rounds × \(options.perRound) requests, \(what), \(serverDescription)")
    var rounds: [StormRound] = []
    for number in 0..<options.rounds {
        let round = runRound(number: number, base: base, options: options, timeout: timeout)
        log("  round \(number + 1): \(round.status.rawValue) (\(round.how)) in \(fixed(round.seconds, 1)) s, \(round.issued) requests")
        for line in round.status == .ok ? [] : round.tail { log("    | \(line)") }
        rounds.append(round)
    }
    spinners.forEach(stop)
    spinners.forEach(stormCleanup.untrack)
    stormCleanup.setNginx(nil)
    nginx?.stop()
    printStormTable(rounds, options: options, build: build + sanitizer, mode: mode, timeout: timeout, server: serverDescription)
    exit(rounds.contains { $0.status != .ok } ? 1 : 0)
}

private func printStormTable(_ rounds: [StormRound], options: StormOptions, build: String, mode: String, timeout: Double, server: String) {
    func row(_ cells: [String], _ widths: [Int]) -> String {
        zip(cells, widths).map { $0.padding(toLength: max($1, $0.count), withPad: " ", startingAt: 0) }.joined(separator: "  ")
    }
    let widths = [5, 10, 15, 7, 8, 7, 9, 5, 9, 6, 7, 8, 4, 14]
    let described = options.kinds == "all" ? "default mix" : options.kinds == "issue" ? "issue mix (json,body,download-1m,resumable)" : "kinds \(options.kinds)"
    let mix = described + (options.session == "ephemeral" ? ", .ephemeral session with its URLCache" : ", .ephemeral session without a URLCache")
    print("")
    print("cancel storm — \(build) build, \(mode), \(mix)\(options.label.isEmpty ? "" : ", label: \(options.label)")")
    print("\(server); 16 in flight, each request cancelled 0–4 ms after it is added; child timeout \(fixed(timeout, 0)) s")
    print("")
    print(row(["round", "seed", "result", "seconds", "requests", "cancels", "after end", "ok", "cancelled", "errors", "resumed", "tmp left", "TSan", "cancel late ms"], widths))
    for (number, round) in rounds.enumerated() {
        func count(_ value: KeyPath<StormRoundSummary, Int>) -> String { round.summary.map { grouped(Double($0[keyPath: value])) } ?? "—" }
        let requests = round.summary == nil ? "≤\(grouped(Double(min(options.perRound, round.issued + 250))))" : count(\.requests)
        let resumed = round.summary.map { "\($0.resumesOK)/\($0.resumes)" } ?? "—"
        let late = round.summary.map { $0.cancelDelayMs.map { fixed($0, 1) }.joined(separator: "/") } ?? "—"
        let result = round.status == .ok ? round.how : "\(round.status.rawValue): \(round.how)"
        let cells = [String(number + 1), String(round.seed), result, fixed(round.seconds, 1), requests, count(\.cancels)]
        let more = [count(\.cancelsAfterCompletion), count(\.ok), count(\.cancelled), count(\.errors), resumed]
        print(row(cells + more + [round.status == .ok ? String(round.leftoverFiles) : "—", String(round.sanitizerReports), late], widths))
    }
    let finished = rounds.compactMap(\.summary)
    let requests = finished.reduce(0) { $0 + $1.requests }
    let unfinished = rounds.filter { $0.summary == nil }
    let exactlyOnce = rounds.filter { $0.status == .exactlyOnce }.count
    let failures = finished.reduce(0) { $0 + $1.twice + $1.never + $1.lateElements }
    print("")
    let totalWidths = [6, 18, 8, 7, 4, 21, 12, 16, 20]
    print(row(["rounds", "requests", "cancels", "crashed", "hung", "exactly-once failures", "other errors", "build", "load"], totalWidths))
    print(
        row(
            [
                String(rounds.count),
                grouped(Double(requests)) + (unfinished.isEmpty ? "" : " + ≤\(grouped(Double(unfinished.reduce(0) { $0 + min(options.perRound, $1.issued + 250) })))"),
                grouped(Double(finished.reduce(0) { $0 + $1.cancels })),
                String(rounds.filter { $0.status == .crashed }.count), String(rounds.filter { $0.status == .hung }.count),
                "\(exactlyOnce) rounds (\(failures) calls)", grouped(Double(finished.reduce(0) { $0 + $1.errors })),
                build, mode,
            ], totalWidths))
    print("")
    print("\"cancels\" and \"after end\": cancels issued, and those that came after the completion had run; \"resumed\": resumed downloads that succeeded / resumed;")
    print("\"tmp left\": files left in the round's TMPDIR; \"cancel late\": how late cancels came after their planned moment, median/p99/max;")
    print("a crashed round's requests: its last progress line + 250 at most; \"cancels\" counts rounds that finished.")
    var kinds: [String: Int] = [:]
    for summary in finished { summary.errorKinds.forEach { kinds[$0.key, default: 0] += $0.value } }
    for (text, count) in kinds.sorted(by: { $0.value > $1.value }).prefix(5) { print("other error ×\(count): \(text)") }
    let crashes = Dictionary(grouping: rounds.filter { $0.status == .crashed }, by: { $0.tail.first ?? $0.how })
    for (line, group) in crashes.sorted(by: { $0.value.count > $1.value.count }) { print("crash ×\(group.count): \(line)") }
}
#endif
