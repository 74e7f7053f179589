#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

// `requests-bench wait-cpu [--requests 1,100] [--seconds 5] [--streams]`: issue 51's rows "CPU while requests wait on
// a slow server" and, with `--streams`, "CPU and memory of idle streams": each stream reads `/trickle/2?chunk=1&
// interval=600000` (a byte, then nothing for ten minutes), its first byte arrives before the measurement starts,
// resident memory is read before the streams open and once they have, and they are cancelled at the end. A loopback server in a child process (`--serve`, so that only this process's CPU is counted) answers
// `/delay/N` after N ms; for each count, that many GETs are added at once to a queue as wide, on a session with as many
// connections, and the process's user + system CPU is measured from before the first is added to after the last
// completes. The transport is the library's choice: URLSession, or libcurl with `REQUESTS_TRANSPORT=curl` on Linux.

/// Runs the row and exits: 1 when a request failed.
func runWaitCPUCommand(_ arguments: [String]) -> Never {
    var counts = [1, 100]
    var seconds = 5.0
    var streams = false
    var remaining = arguments[...]
    while let flag = remaining.popFirst() {
        switch flag {
        case "--requests":
            guard let list = remaining.popFirst().map({ $0.split(separator: ",").compactMap { Int($0) } }), !list.isEmpty, list.allSatisfy({ $0 > 0 })
            else { fail("wait-cpu: --requests needs a list of positive numbers", code: 2) }
            counts = list
        case "--seconds":
            guard let value = remaining.popFirst().flatMap(Double.init), value > 0 else { fail("wait-cpu: --seconds needs a positive number", code: 2) }
            seconds = value
        case "--streams": streams = true
        default: fail("wait-cpu: unknown argument \(flag)", code: 2)
        }
    }
    let server: SoakServer
    do {
        server = try SoakServer.startProcess()
    } catch {
        fail("wait-cpu: could not start the loopback server: \(error)", code: 2)
    }
    let transport = ProcessInfo.processInfo.environment["REQUESTS_TRANSPORT"] == "curl" ? "libcurl (REQUESTS_TRANSPORT=curl)" : "URLSession"
    if streams {
        print("wait-cpu --streams: \(transport); each stream idle after its first byte, measured for \(seconds) s")
        print("| idle streams | CPU (user + system) | share of one core | resident memory per stream | goals |")
        print("|---|---|---|---|---|")
        for count in counts { measureIdleStreams(count, seconds: seconds, server: server) }
        print("Command: " + (["requests-bench"] + CommandLine.arguments.dropFirst()).joined(separator: " "))
        exit(0)
    }
    print("wait-cpu: \(transport); the server answers after \(seconds) s")
    print("| requests waiting | wall | CPU (user + system) | share of one core | goal |")
    print("|---|---|---|---|---|")
    var failed = 0
    for count in counts {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.httpMaximumConnectionsPerHost = count
        configuration.timeoutIntervalForRequest = seconds + 30
        let session = URLSession(configuration: configuration)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = count
        // A warm-up on the same session: the first request's setup is not waiting.
        failed += waitAll([RawBytesRequest(url: server.url("/json"), identifier: "warm-up")], on: queue, session: session)
        let requests = (0..<count).map { RawBytesRequest(url: server.url("/delay/\(Int(seconds * 1000))?n=\($0)"), identifier: "wait \($0)") }
        let before = ResourceUsage.userAndSystemMicroseconds()
        let start = ResourceUsage.now()
        failed += waitAll(requests, on: queue, session: session)
        let wall = ResourceUsage.now() - start
        let after = ResourceUsage.userAndSystemMicroseconds()
        let cpu = (after.user + after.system - before.user - before.system) / 1e6
        let share = cpu / wall * 100
        print(String(format: "| %d | %.2f s | %.3f s | %.1f %% | ≤ 2 %% |", count, wall, cpu, share))
        session.finishTasksAndInvalidate()
    }
    print("Command: " + (["requests-bench"] + CommandLine.arguments.dropFirst()).joined(separator: " "))
    exit(failed == 0 ? 0 : 1)
}

/// A stream that stays open: one byte, then nothing.
private struct IdleStream: StreamRequest, Sendable {
    let url: URL
    let identifier: String
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(URLRequest(url: url))) }
}

/// Opens `count` idle streams, waits for each one's first byte, measures CPU for `seconds` and the resident memory
/// they added, then cancels them and waits for their completions.
private func measureIdleStreams(_ count: Int, seconds: Double, server: SoakServer) {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    configuration.httpMaximumConnectionsPerHost = count
    configuration.timeoutIntervalForRequest = 3_600
    let session = URLSession(configuration: configuration)
    let queue = OperationQueue()
    queue.maxConcurrentOperationCount = count
    let firstBytes = DispatchGroup(), ended = DispatchGroup()
    let before = ResourceUsage.residentBytes() ?? 0
    var operations: [Operation] = []
    for index in 0..<count {
        firstBytes.enter()
        ended.enter()
        let first = FirstTime()
        let request = IdleStream(url: server.url("/trickle/2?chunk=1&interval=600000&n=\(index)"), identifier: "idle \(index)")
        operations.append(
            queue.addRequest(request, session: session, receive: { _ in if first.take() { firstBytes.leave() } }) { _ in
                if first.take() { firstBytes.leave() }
                ended.leave()
            })
    }
    firstBytes.wait()
    let resident = (ResourceUsage.residentBytes() ?? 0) - before
    let start = ResourceUsage.now()
    let cpuBefore = ResourceUsage.userAndSystemMicroseconds()
    Thread.sleep(forTimeInterval: seconds)
    let cpuAfter = ResourceUsage.userAndSystemMicroseconds()
    let wall = ResourceUsage.now() - start
    let cpu = (cpuAfter.user + cpuAfter.system - cpuBefore.user - cpuBefore.system) / 1e6
    operations.forEach { $0.cancel() }
    ended.wait()
    session.finishTasksAndInvalidate()
    print(String(format: "| %d | %.3f s in %.2f s | %.1f %% | %d B | ≤ 2 %%, < 64 KiB |", count, cpu, wall, cpu / wall * 100, resident / max(1, count)))
}

/// True the first time only.
private final class FirstTime: @unchecked Sendable {
    private let lock = NSLock()
    private var taken = false
    func take() -> Bool {
        lock.withLock {
            defer { taken = true }; return !taken
        }
    }
}

/// Adds every request at once and waits for all; returns how many failed.
private func waitAll(_ requests: [RawBytesRequest], on queue: OperationQueue, session: URLSession) -> Int {
    let group = DispatchGroup()
    let failures = Counter()
    for request in requests {
        group.enter()
        queue.addRequest(request, session: session) { result in
            if case .failure = result { failures.add() }
            group.leave()
        }
    }
    group.wait()
    return failures.value
}

private final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
#endif
