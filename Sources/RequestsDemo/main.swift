#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

// requests-demo: the library at work against a loopback server it starts itself,
// or against a server given with --url (which must serve the /demo/* routes; see --serve).

let usage = """
    usage: requests-demo [--url BASE_URL] [--serve]
      (no options)    start a loopback server in this process and run the demo against it
      --url BASE_URL  run the demo against a server that serves the demo routes
      --serve         only start a loopback server with the demo routes, print its URL, and keep serving
    """

/// Writes straight to standard output, unbuffered, so the progress bar redraws live even through a pipe.
func say(_ text: String, terminator: String = "\n") {
    FileHandle.standardOutput.write(Data((text + terminator).utf8))
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == "--outbox-child" {
    // The outbox step's child process (DemoOutbox.swift), not for people.
    runOutboxDemoChild(Array(arguments.dropFirst()))
}
var embeddedServer: LoopbackServer?

func startServer() -> LoopbackServer {
    do {
        let server = try LoopbackServer()
        DemoServer.addRoutes(to: server)
        return server
    } catch {
        FileHandle.standardError.write(Data("could not start the loopback server: \(error)\n".utf8))
        exit(1)
    }
}

if arguments.contains("--help") || arguments.contains("-h") {
    say(usage)
    exit(0)
} else if arguments.contains("--serve") {
    let server = startServer()
    say("Serving the demo routes at \(server.baseURL.absoluteString) (Ctrl-C to stop)")
    say("Run: swift run requests-demo --url \(server.baseURL.absoluteString)")
    while true { RunLoop.main.run(until: Date().addingTimeInterval(3600)) }
} else if let index = arguments.firstIndex(of: "--url") {
    guard index + 1 < arguments.count, let url = URL(string: arguments[index + 1]), url.scheme != nil else {
        FileHandle.standardError.write(Data("--url needs a base URL such as http://127.0.0.1:8080\n\(usage)\n".utf8))
        exit(2)
    }
    DemoServer.baseURL = URL(string: url.absoluteString.hasSuffix("/") ? String(url.absoluteString.dropLast()) : url.absoluteString) ?? url
    say("Requests demo against \(DemoServer.baseURL.absoluteString)\n")
} else if arguments.isEmpty {
    let server = startServer()
    embeddedServer = server
    DemoServer.baseURL = server.baseURL
    say("Requests demo against a loopback server at \(server.baseURL.absoluteString)\n")
} else {
    FileHandle.standardError.write(Data("unknown arguments: \(arguments.joined(separator: " "))\n\(usage)\n".utf8))
    exit(2)
}

let session: URLSession = {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    return URLSession(configuration: configuration)
}()
let queue = OperationQueue()
queue.maxConcurrentOperationCount = 8
/// What the queue's monitor saw: the checks count attempts here, whatever the server.
let attemptLog = AttemptLog()
queue.requestPolicies = RequestPolicies(monitors: [attemptLog])
/// Set on the main queue only, so that a step can tell that it runs there.
let mainQueueKey = DispatchSpecificKey<Bool>()
DispatchQueue.main.setSpecific(key: mainQueueKey, value: true)

/// Runs the main run loop (which `OperationQueue.main` needs in a command-line tool) until `done` holds.
func runUntil(timeout: TimeInterval = 30, _ done: () -> Bool) {
    let deadline = Date().addingTimeInterval(timeout)
    while !done() && Date() < deadline {
        RunLoop.main.run(until: Date().addingTimeInterval(0.01))
    }
}

func section(_ title: String) {
    say("── \(title) " + String(repeating: "─", count: max(0, 60 - title.count)))
}

func describe(_ error: Error) -> String {
    if let error = error as? RequestQueueError { return error.description }
    return String(describing: error)
}

var failures = 0
@MainActor
func check(_ ok: Bool, _ message: String) {
    say("  \(ok ? "✓" : "✗") \(message)")
    if !ok { failures += 1 }
}

// 1. login → token → profile → UI update on the main queue
section("1. Chain: login → profile → UI update")
do {
    let token = queue.addRequest(LoginRequest(user: "ada"), session: session)
    let profile = queue.addRequest(after: token, session: session) { ProfileRequest(token: $0.token) }
    var uiText: String?
    var ranOnMainQueue = false
    var bothHadFinished = false
    profile.whenFinished { result in  // runs on OperationQueue.main
        ranOnMainQueue = Thread.isMainThread && DispatchQueue.getSpecific(key: mainQueueKey) == true
        bothHadFinished = token.isFinished && profile.isFinished
        switch result {
        case let .success(profile): uiText = "Hello, \(profile.name)! You have \(profile.recipes) recipes."
        case let .failure(error): uiText = "Could not load the profile: \(describe(error))"
        }
    }
    runUntil { uiText != nil }
    say("  login    → token \((try? token.result?.get())?.token ?? "none")")
    say("  profile  → built from the token, sent with Authorization: Bearer …")
    say("  UI (main)→ \(uiText ?? "timed out")")
    say("  the UI step ran on the main thread and queue: \(ranOnMainQueue); login and profile had finished: \(bothHadFinished)")
    check(
        ranOnMainQueue && bothHadFinished && (try? token.result?.get()) != nil && (try? profile.result?.get())?.name == "Ada Lovelace",
        "the UI step ran on the main queue after both requests")
}

// 2. a batch of 50 with a live progress bar
section("2. Batch of 50 requests, 8 at a time, with live progress")
do {
    let batch = queue.addBatch((1...50).map { RecipeRequest(id: String($0)) }, session: session)
    var lastDrawn = -1
    func draw(_ done: Int) {
        let width = 30
        let filled = done * width / 50
        say("\r  [\(String(repeating: "█", count: filled))\(String(repeating: "·", count: width - filled))] \(done)/50", terminator: "")
    }
    runUntil {
        let done = Int(batch.progress.completedUnitCount)
        if done != lastDrawn { draw(done); lastDrawn = done }
        return batch.isFinished
    }
    draw(Int(batch.progress.completedUnitCount))
    say("")
    let results = (try? batch.result?.get()) ?? []
    let names = results.compactMap { try? $0.get().name }
    say("  results in input order: \(names.prefix(3).joined(separator: ", ")) … \(names.last ?? "")")
    check(results.count == 50 && names == (1...50).map { "Recipe \($0)" }, "50 results, in input order")
}

// 3. cancellation: completes at once, without waiting for the server
section("3. Cancellation")
do {
    let started = Date()
    var outcome: String?
    var completions = 0
    var wasCancellation = false
    let slow = queue.addRequest(PathRequest(path: "/delay/10000"), session: session, completionQueue: .main) { result in
        completions += 1
        if case let .failure(error) = result {
            outcome = describe(error)
            if case .cancelled? = error as? RequestQueueError { wasCancellation = true }
        } else {
            outcome = "succeeded"
        }
    }
    runUntil(timeout: 0.3) { false }
    slow.cancel()
    runUntil { outcome != nil && slow.isFinished }
    let elapsed = Date().timeIntervalSince(started)
    say("  a request the server holds for 10 s, cancelled after 0.3 s")
    say("  completion after \(String(format: "%.2f", elapsed)) s: \(outcome ?? "none"); completions: \(completions)")
    check(
        elapsed < 5 && completions == 1 && wasCancellation && slow.isFinished,
        "completed once, with cancellation, without waiting for the server")
}

// 4. a 404 with the server's error payload decoded
section("4. 404 with the server's error payload")
do {
    var payload: ServerError?
    var status: Int?
    let missing = queue.addRequest(PathRequest(path: "/demo/missing"), session: session)
    runUntil { missing.isFinished }
    if case let .failure(error)? = missing.result, let requestError = error as? RequestQueueError {
        status = requestError.statusCode
        payload = requestError.responseBody.flatMap { try? JSONDecoder().decode(ServerError.self, from: $0) }
        say("  error: \(requestError.description)")
    }
    say("  decoded payload: error=\"\(payload?.error ?? "?")\" code=\(payload?.code ?? "?")")
    check(status == 404 && payload?.code == "E404", "the status error carries the body, which decodes")
}

// 5. de-duplication: 20 identical requests, one network call
section("5. De-duplication")
do {
    let callers = (0..<20).map { _ in queue.addSharedRequest(RecipeRequest(id: "shared"), session: session) }
    runUntil { callers.allSatisfy(\.isFinished) }
    let succeeded = callers.filter { (try? $0.result?.get()) != nil }.count
    let sent = embeddedServer?.requestCount(path: "/demo/recipe")
    let attempts = attemptLog.attemptsSent("recipe-shared")
    say("  20 callers, \(succeeded) results; the queue's monitor saw \(attempts) request(s) sent")
    if let sent { say("  the server has seen \(sent) /demo/recipe requests in all (50 from the batch + 1)") }
    check(succeeded == 20 && attempts == 1 && (sent == nil || sent == 51), "20 callers shared one network call")
}

// 6. async/await, still an operation of the queue
section("6. async/await")
do {
    final class Outcome: @unchecked Sendable { var text: String? }
    /// Hands the queue to the task: swift-corelibs-foundation marks `OperationQueue` Sendable, Apple's SDKs may
    /// not (and Swift 6 mode then rejects the capture); an operation queue is safe to use from any thread.
    struct SharedQueue: @unchecked Sendable { let queue: OperationQueue }
    let outcome = Outcome()
    let asyncQueue = SharedQueue(queue: queue)
    Task.detached {
        do {
            let recipe = try await asyncQueue.queue.response(for: RecipeRequest(id: "async"), session: session)
            outcome.text = recipe.name
        } catch {
            outcome.text = "error: \(error)"
        }
    }
    runUntil { outcome.text != nil }
    // The queue's monitor sees only what the queue runs, with its policies.
    let attempts = attemptLog.attemptsSent("recipe-async")
    say("  let recipe = try await queue.response(for: RecipeRequest(id: \"async\")) → \(outcome.text ?? "none")")
    say("  the queue's monitor saw it sent \(attempts) time(s)")
    check(outcome.text == "Recipe async" && attempts == 1, "awaited a request that ran as an operation of the queue")
}

// 7. a 503 with Retry-After, retried inside the same operation
section("7. A 503 that is retried")
do {
    let started = Date()
    var completions = 0
    var delivered: Recipe?
    let busy = queue.addRequest(BusyRecipeRequest(), session: session, completionQueue: .main) { result in
        completions += 1
        delivered = try? result.get()
    }
    runUntil { busy.isFinished && completions > 0 }
    let elapsed = Date().timeIntervalSince(started)
    let attempts = attemptLog.attemptsSent("busy")
    let received = embeddedServer?.requestCount(path: "/demo/busy")
    say("  first answer: 503 with Retry-After: 1; the policy waits, then sends again")
    say("  result after \(String(format: "%.1f", elapsed)) s and \(attempts) attempts: \(delivered?.name ?? "failed"); completions: \(completions)")
    check(
        delivered != nil && (try? busy.result?.get()) != nil && completions == 1 && attempts == 2 && (received == nil || received == 2),
        "one operation, one completion, two attempts")
}

// 8. policies: an expired token refreshed once for five concurrent requests, and a redacted log
section("8. Token refresh and a request log")
do {
    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var value = 0
        var count: Int { lock.lock(); defer { lock.unlock() }; return value }
        func increment() { lock.lock(); value += 1; lock.unlock() }
    }
    let refreshes = Counter()
    let tokens = TokenAuthenticator(token: "expired") { _, completion in
        refreshes.increment()
        session.dataTask(with: DemoServer.url("/demo/refresh")) { data, _, error in
            completion(
                Result {
                    if let error { throw error }
                    return try JSONDecoder().decode(Token.self, from: data ?? Data()).token
                })
        }.resume()
    }
    let lines = LogLines()
    let vaultLog = AttemptLog()
    let policyQueue = OperationQueue()
    policyQueue.requestPolicies = RequestPolicies(
        authenticator: tokens,
        monitors: [RequestLogger(redaction: Redaction(queryItems: ["api_key"]), write: lines.append), vaultLog]
    )
    let vault = (1...5).map { _ in policyQueue.addRequest(VaultRequest(), session: session) }
    runUntil { vault.allSatisfy(\.isFinished) && vaultLog.summaries("vault").count == 5 }
    lines.values.forEach { say("  " + $0) }
    let succeeded = vault.filter { (try? $0.result?.get()) != nil }.count
    let attempts = vaultLog.summaries("vault").map(\.attempts)
    say("  5 requests sent with an expired token; refreshes: \(refreshes.count); succeeded: \(succeeded); attempts: \(attempts)")
    // The log shows each request once, with the API key redacted and no token.
    let redacted = lines.values.count == 5 && lines.values.allSatisfy { $0.contains("api_key=<redacted>") && !$0.contains("demo-secret") && !$0.contains("Bearer") }
    check(
        refreshes.count == 1 && succeeded == 5 && attempts.count == 5 && attempts.allSatisfy { $0 <= 2 } && redacted,
        "one refresh for all five, each request resent at most once, secrets redacted")
}

// 9. a download to a file with a live progress bar
section("9. Download with progress")
do {
    let destination = FileManager.default.temporaryDirectory.appendingPathComponent("requests-demo-\(UUID().uuidString).bin")
    defer { try? FileManager.default.removeItem(at: destination) }
    let download = queue.addRequest(DemoDownload(destination: destination), session: session)
    var lastDrawn = -1
    var partialCounts = Set<Int64>()  // the byte counts seen before the end
    func draw(_ fraction: Double) {
        let width = 30
        let filled = Int(fraction * Double(width))
        say("\r  [\(String(repeating: "█", count: filled))\(String(repeating: "·", count: width - filled))] \(Int(fraction * 100))%", terminator: "")
    }
    runUntil {
        let percent = Int(download.progress.fractionCompleted * 100)
        if percent != lastDrawn { draw(download.progress.fractionCompleted); lastDrawn = percent }
        let done = download.progress.completedUnitCount
        if done > 0 && done < 8_000_000 { partialCounts.insert(done) }
        return download.isFinished
    }
    draw(download.progress.fractionCompleted)
    say("")
    // The server's byte i is i % 256: the file must hold exactly those bytes.
    let bytes = (try? Data(contentsOf: destination)) ?? Data()
    let intact = bytes.count == 8_000_000 && bytes.withUnsafeBytes { raw in raw.indices.allSatisfy { raw[$0] == UInt8(truncatingIfNeeded: $0) } }
    let progress = download.progress
    say("  8 MB written to \(destination.lastPathComponent) as it arrived; progress \(progress.completedUnitCount) of \(progress.totalUnitCount) bytes")
    say("  \(bytes.count) bytes on disk, each as sent: \(intact); progress seen at \(partialCounts.count) byte counts on the way")
    check(
        (try? download.result?.get()) == destination && intact && progress.completedUnitCount == 8_000_000
            && progress.totalUnitCount == 8_000_000 && !partialCounts.isEmpty,
        "the file holds every byte, and the progress moved with them")
}

// 10. server-sent events with a live ticker, and one reconnection with Last-Event-ID
section("10. Server-sent events: a live ticker that reconnects")
do {
    let tickerQueue = OperationQueue()
    let reconnections = LogLines()
    tickerQueue.requestPolicies = RequestPolicies(monitors: [
        ReconnectionPrinter { line in
            reconnections.append(line)
            DispatchQueue.main.async { say("\r  ↻ " + line + String(repeating: " ", count: 12)) }
        }
    ])
    var ids: [String] = []
    var outcome: Result<StreamSummary, Error>?
    tickerQueue.addRequest(TickerRequest(), session: session, completionQueue: .main) { event in
        ids.append(event.id ?? "?")
        if let tick = try? JSONDecoder().decode(Tick.self, from: Data(event.data.utf8)) {
            say("\r  \(tick.symbol) \(tick.price)  (event \(event.id ?? "?"))      ", terminator: "")
        }
    } completion: {
        outcome = $0
    }
    runUntil { outcome != nil }
    say("")
    let summary = try? outcome?.get()
    say("  events \(ids.joined(separator: " ")) over \(summary?.connections ?? 0) connections")
    check(
        ids == (1...10).map(String.init) && summary?.connections == 2
            && reconnections.values.contains("reconnecting with Last-Event-ID: 5"),
        "every event once, in order, across a dropped connection resumed from its Last-Event-ID")
}

// 11. an outbox: a child process killed half-way, a second one sends what it left
section("11. An outbox survives a kill")
runOutboxStep(session: session)

say("")
say(failures == 0 ? "All demo steps behaved as described." : "\(failures) demo step(s) did not behave as described.")
withExtendedLifetime(embeddedServer) {}
exit(failures == 0 ? 0 : 1)
