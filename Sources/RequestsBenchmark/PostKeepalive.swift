#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// `requests-bench post-keepalive [--requests 2000] [--rounds 5] [--concurrency 16,1] [--body-bytes 200] [--no-embedded] [--idempotency-key]`:
// issue 46's row "POST throughput against a server that closes each kept-alive connection after 5 requests ≥ 0.9× the
// same server keeping connections open". One nginx (1 worker) with two server blocks on two ports, both answering
// `POST /post` with `{"ok":true}`: one with `keepalive_requests 5` (it says `Connection: close` on the 5th answer and
// closes), one with `keepalive_requests 1000`. The library POSTs a JSON body through `OperationQueue.addRequest`,
// all of a round's requests added at once to a queue `--concurrency` wide; the rounds alternate between the two
// servers (after a warm-up of each). Then the same against the embedded LoopbackServer (in this process) with
// `ConnectionPolicy(closeAfterRequests: 5)`, which closes after the 5th answer without saying so (the next request can
// race the close), and without a policy.

/// The POST row's settings.
struct PostKeepaliveSettings {
    var requests = 2_000
    var rounds = 5
    var concurrencies = [16, 1]
    var bodyBytes = 200
    var embedded = true
    /// Each POST carries an `Idempotency-Key`: it may be sent twice, so it shares kept-alive connections (without
    /// one, on Linux each POST has a connection of its own).
    var idempotencyKey = false

    init(_ arguments: [String]) {
        var flags = FlagReader(arguments, mode: "post-keepalive")
        while let flag = flags.nextFlag() {
            switch flag {
            case "--requests": requests = max(1, flags.number(flag))
            case "--rounds": rounds = max(1, flags.number(flag))
            case "--body-bytes": bodyBytes = max(20, flags.number(flag))
            case "--no-embedded": embedded = false
            case "--idempotency-key": idempotencyKey = true
            case "--concurrency":
                let text = flags.value(flag)
                let values = text.split(separator: ",").compactMap { Int($0) }.filter { $0 > 0 }
                guard !values.isEmpty else { fail("post-keepalive: --concurrency takes positive numbers such as 16,1, not \(text)", code: 2) }
                concurrencies = values
            default: fail("post-keepalive: unknown argument \(flag)\n\(Options.usage)", code: 2)
            }
        }
    }
}

/// The answer of `/post`.
struct PostAnswer: Decodable, Sendable {
    let ok: Bool
}

/// A POST of a JSON body of about `bodyBytes`, decoded as a ``PostAnswer``: a plain POST (no `Idempotency-Key`), which
/// the library never sends twice.
struct KeepalivePost: DecodableRequest {
    typealias Success = PostAnswer
    typealias Failure = Error
    let url: URL
    let identifier: String
    let body: Data
    /// Sent as the `Idempotency-Key` when set.
    var key: String?

    /// `{"seq":17,"text":"xxx…"}` padded to `bytes`.
    static func body(bytes: Int) -> Data {
        let head = #"{"seq":17,"text":""#, tail = #""}"#
        return Data((head + String(repeating: "x", count: max(0, bytes - head.utf8.count - tail.utf8.count)) + tail).utf8)
    }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = body
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let key { request.setValue("\"\(key)\"", forHTTPHeaderField: "Idempotency-Key") }
        completion(.success(request))
    }
}

/// Failures by kind: the URLError code, or the error's type.
private final class FailureTally: @unchecked Sendable {
    private let lock = NSLock()
    private var kinds: [String: Int] = [:]

    func add(_ error: Error) {
        let kind: String
        if let urlError = error as? URLError {
            kind = urlError.code == .networkConnectionLost ? "networkConnectionLost (-1005)" : "URLError \(urlError.code.rawValue)"
        } else {
            kind = String(describing: error).split(separator: "\n").first.map { String($0.prefix(80)) } ?? "?"
        }
        lock.withLock { kinds[kind, default: 0] += 1 }
    }

    var counts: [String: Int] { lock.withLock { kinds } }
}

/// One timed round of POSTs.
struct PostRound {
    var requestsPerSecond = Double.nan
    var cpuMicrosecondsPerRequest = Double.nan
    var failures: [String: Int] = [:]
    var failureCount: Int { failures.values.reduce(0, +) }
}

/// `count` POSTs through `queue`, all added at once.
private func postRound(queue: OperationQueue, session: URLSession, url: URL, count: Int, body: Data, keyed: Bool) -> PostRound {
    let countdown = Countdown(count)
    let tally = FailureTally()
    let before = ResourceUsage.usage()
    let start = ResourceUsage.now()
    for index in 0..<count {
        let post = KeepalivePost(url: url, identifier: String(index), body: body, key: keyed ? "post-\(index)-\(start)" : nil)
        queue.addRequest(post, session: session) { result in
            switch result {
            case .success(let answer): countdown.done(ok: answer.ok)
            case .failure(let error):
                tally.add(error)
                countdown.done(ok: false)
            }
        }
    }
    let completed = countdown.wait(seconds: max(120, Double(count) / 10))
    let seconds = ResourceUsage.now() - start
    let cpu = ResourceUsage.usage().cpuMicroseconds - before.cpuMicroseconds
    var round = PostRound(failures: tally.counts)
    if completed {
        round.requestsPerSecond = Double(count) / seconds
        round.cpuMicrosecondsPerRequest = cpu / Double(count)
    } else {
        round.failures["not completed in time", default: 0] += 1
    }
    let wrong = countdown.failureCount - tally.counts.values.reduce(0, +)
    if wrong > 0 { round.failures["answered, but not {\"ok\":true}", default: 0] += wrong }
    return round
}

/// A server to POST to, and what it is.
private struct PostTarget {
    let name: String
    let url: URL
    /// Set before the target's rounds (the embedded server's policy).
    var prepare: () -> Void = {}
}

/// Warms each target up, then runs `rounds` rounds of each, alternating which goes first. Returns the rounds of each.
private func measurePosts(_ targets: [PostTarget], concurrency: Int, settings: PostKeepaliveSettings) -> [[PostRound]] {
    let body = KeepalivePost.body(bytes: settings.bodyBytes)
    // Each target its own session and queue, so that no connection of one is reused for the other.
    let sides = targets.map { _ in (makeSession(maxConnectionsPerHost: concurrency), OperationQueue()) }
    for (_, queue) in sides { queue.maxConcurrentOperationCount = concurrency }
    defer { sides.forEach { $0.0.finishTasksAndInvalidate() } }
    for (index, target) in targets.enumerated() {
        target.prepare()
        _ = postRound(queue: sides[index].1, session: sides[index].0, url: target.url, count: max(50, settings.requests / 10), body: body, keyed: settings.idempotencyKey)
    }
    var results = targets.map { _ in [PostRound]() }
    for round in 0..<settings.rounds {
        for offset in targets.indices {
            let index = (round + offset) % targets.count
            targets[index].prepare()
            let result = postRound(queue: sides[index].1, session: sides[index].0, url: targets[index].url, count: settings.requests, body: body, keyed: settings.idempotencyKey)
            results[index].append(result)
            log(
                "  concurrency \(concurrency), round \(round + 1)/\(settings.rounds), \(targets[index].name): \(grouped(result.requestsPerSecond)) req/s, "
                    + "\(grouped(result.cpuMicrosecondsPerRequest)) µs CPU/request, failures \(result.failureCount)")
        }
    }
    return results
}

/// Prints one comparison: the rounds of `closing` against those of `open`, per round and as medians.
private func report(_ title: String, names: (String, String), rounds: (closing: [PostRound], open: [PostRound]), goal: Double?) -> Bool {
    let closing = rounds.closing.map(\.requestsPerSecond), open = rounds.open.map(\.requestsPerSecond)
    let ratios = zip(closing, open).map { $0 / $1 }
    let ratio = median(closing) / median(open)
    print(title)
    print(
        "  \(names.0): \(closing.map { grouped($0) }.joined(separator: " / ")) req/s (median \(grouped(median(closing))), "
            + "CPU \(grouped(median(rounds.closing.map(\.cpuMicrosecondsPerRequest)))) µs/request)")
    print(
        "  \(names.1): \(open.map { grouped($0) }.joined(separator: " / ")) req/s (median \(grouped(median(open))), "
            + "CPU \(grouped(median(rounds.open.map(\.cpuMicrosecondsPerRequest)))) µs/request)")
    var met = true
    if let goal {
        met = ratio.isFinite && ratio >= goal
        print("  ratio of medians \(fixed(ratio, 2)) (per round \(ratios.map { fixed($0, 2) }.joined(separator: ", "))); goal ≥ \(fixed(goal, 1)): \(met ? "met" : "MISSED")")
    } else {
        print("  ratio of medians \(fixed(ratio, 2)) (per round \(ratios.map { fixed($0, 2) }.joined(separator: ", ")))")
    }
    for (name, side) in [(names.0, rounds.closing), (names.1, rounds.open)] {
        var failures: [String: Int] = [:]
        for round in side { failures.merge(round.failures, uniquingKeysWith: +) }
        let total = failures.values.reduce(0, +)
        let detail = failures.sorted { $0.value > $1.value }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        print("  failures, \(name): \(total) in \(side.count) rounds" + (total > 0 ? " (\(detail))" : ""))
    }
    return met
}

/// `requests-bench post-keepalive …`: nginx, then the embedded server; exits 1 if nginx's side failed a request.
func runPostKeepaliveCommand(_ arguments: [String]) -> Never {
    let settings = PostKeepaliveSettings(arguments)
    guard let executable = NginxServer.findExecutable() else { fail("post-keepalive: nginx not found (apt-get install -y nginx-light)", code: 2) }
    let nginx: NginxServer
    do {
        nginx = try NginxServer(executable: executable, postServers: [5, 1000])
    } catch {
        fail("post-keepalive: \(error)", code: 2)
    }
    NginxServer.runningPID = nginx.processIdentifier
    signal(SIGINT) { _ in
        if NginxServer.runningPID > 0 { kill(NginxServer.runningPID, SIGTERM) }
        _exit(130)
    }
    let closingURL = nginx.postBaseURLs[0].appendingPathComponent("post"), openURL = nginx.postBaseURLs[1].appendingPathComponent("post")
    log("post-keepalive: \(settings.requests) POSTs of \(settings.bodyBytes) B per round, \(settings.rounds) rounds, concurrency \(settings.concurrencies)")
    log("  nginx (1 worker): keepalive_requests 5 at \(closingURL.absoluteString), 1000 at \(openURL.absoluteString)")
    var nginxResults: [Int: [[PostRound]]] = [:]
    for concurrency in settings.concurrencies {
        nginxResults[concurrency] = measurePosts(
            [PostTarget(name: "nginx keepalive_requests 5", url: closingURL), PostTarget(name: "nginx keepalive_requests 1000", url: openURL)],
            concurrency: concurrency, settings: settings)
    }
    nginx.stop()
    NginxServer.runningPID = 0

    var embeddedResults: [Int: [[PostRound]]] = [:]
    if settings.embedded, let server = try? LoopbackServer() {
        server.route("/post") { _ in .json(NginxServer.postAnswer) }
        let url = server.url("/post")
        log("  embedded LoopbackServer (this process): closeAfterRequests 5 (unannounced) and no policy, at \(url.absoluteString)")
        for concurrency in settings.concurrencies {
            embeddedResults[concurrency] = measurePosts(
                [
                    PostTarget(name: "embedded, closes after 5", url: url) { server.connectionPolicy = ConnectionPolicy(closeAfterRequests: 5) },
                    PostTarget(name: "embedded, keeps open", url: url) { server.connectionPolicy = nil },
                ], concurrency: concurrency, settings: settings)
        }
        server.stop()
    }

    print("")
    print(
        "post-keepalive: \(grouped(Double(settings.requests))) POSTs of a \(settings.bodyBytes)-byte JSON per round, \(settings.rounds) alternating rounds; "
            + "library (OperationQueue.addRequest), one session and queue per server"
            + (settings.idempotencyKey ? "; each POST with an Idempotency-Key" : "; plain POSTs (no Idempotency-Key)"))
    var met = true, nginxFailures = 0
    for concurrency in settings.concurrencies {
        guard let results = nginxResults[concurrency] else { continue }
        let goalMet = report(
            "nginx, concurrency \(concurrency):", names: ("keepalive_requests 5", "keepalive_requests 1000"), rounds: (results[0], results[1]), goal: 0.9)
        met = met && goalMet
        nginxFailures += results.joined().reduce(0) { $0 + $1.failureCount }
    }
    for concurrency in settings.concurrencies {
        guard let results = embeddedResults[concurrency] else { continue }
        _ = report(
            "embedded LoopbackServer, concurrency \(concurrency):", names: ("closes after 5, unannounced", "keeps open"), rounds: (results[0], results[1]),
            goal: nil)
    }
    print("Goal (nginx keepalive_requests 5 ≥ 0.9× keepalive_requests 1000, every concurrency): \(met ? "met" : "MISSED")")
    print("Command: \(benchCommandLine())")
    print(nginxFailures == 0 ? "No POST to nginx failed." : "FAILED: \(nginxFailures) POSTs to nginx failed")
    exit(nginxFailures == 0 ? 0 : 1)
}
#endif
