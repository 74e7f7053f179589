// Cancel-meets-completion probe (issue 46, item 3), raw URLSession, no Requests.
// One process runs --tasks data tasks against BASE (/json and /files/storm-1m.bin), --inflight at a time, on a session
// with a delegate whose queue runs each block at once (as Requests' CallbackQueue does on Linux), and cancels every
// task exactly once, from a thread of its own, a random 0..--cancel-max-ms after resume().
//   --cache none       ephemeral configuration without a URLCache
//   --cache async      ephemeral configuration as Foundation makes it (a 4 MiB in-memory URLCache): a data task's
//                      protocol is created when the cache lookup answers, from a background queue
//   --cache logged     the same, through a URLCache subclass that only logs the lookup's answer around corelibs' own
//   --cache immediate  the same URLCache behind a subclass that answers the lookup at once (Requests' fix)
// --log writes one line per event to stderr as it happens: R resume returned, C0/C1 cancel() entered/returned,
// L0/L1 the lookup's answer entered/returned (its callbacks queue the blocks), D didCompleteWithError (code, or 0).
// Exit 0 when every task completed; a crash is Foundation's.
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif

var base = "http://127.0.0.1:18046"
var cacheMode = "async"
var total = 3000
var inflight = 16
var cancelMaxMs = 6.0
var logEvents = false
var arguments = CommandLine.arguments.dropFirst()[...]
while let flag = arguments.popFirst() {
    switch flag {
    case "--url": base = arguments.popFirst() ?? base
    case "--cache": cacheMode = arguments.popFirst() ?? cacheMode
    case "--tasks": total = Int(arguments.popFirst() ?? "") ?? total
    case "--inflight": inflight = Int(arguments.popFirst() ?? "") ?? inflight
    case "--cancel-max-ms": cancelMaxMs = Double(arguments.popFirst() ?? "") ?? cancelMaxMs
    case "--log": logEvents = true
    default: print("unknown \(flag)"); exit(2)
    }
}
let start = DispatchTime.now().uptimeNanoseconds
func log(_ text: @autoclosure () -> String) {
    guard logEvents else { return }
    let line = "\(String(format: "%.3f", Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6)) \(text())\n"
    line.withCString { _ = write(2, $0, strlen($0)) }
}

final class InlineQueue: OperationQueue, @unchecked Sendable {
    private let running = NSLock()
    override func addOperation(_ block: @escaping @Sendable () -> Void) { running.withLock(block) }
}

final class LoggedLookupCache: URLCache, @unchecked Sendable {
    let cache: URLCache
    init(_ cache: URLCache) {
        self.cache = cache
        super.init(memoryCapacity: 0, diskCapacity: 0, diskPath: NSTemporaryDirectory())
    }
    override func getCachedResponse(for dataTask: URLSessionDataTask, completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void) {
        let id = dataTask.taskIdentifier
        cache.getCachedResponse(for: dataTask) { response in
            log("L0 \(id)")
            completionHandler(response)
            log("L1 \(id)")
        }
    }
    override func cachedResponse(for request: URLRequest) -> CachedURLResponse? { cache.cachedResponse(for: request) }
    override func storeCachedResponse(_ r: CachedURLResponse, for request: URLRequest) { cache.storeCachedResponse(r, for: request) }
    override func storeCachedResponse(_ r: CachedURLResponse, for dataTask: URLSessionDataTask) { cache.storeCachedResponse(r, for: dataTask) }
    override func removeCachedResponse(for request: URLRequest) { cache.removeCachedResponse(for: request) }
    override func removeCachedResponse(for dataTask: URLSessionDataTask) { cache.removeCachedResponse(for: dataTask) }
}

final class ImmediateLookupCache: URLCache, @unchecked Sendable {
    let cache: URLCache
    init(_ cache: URLCache) {
        self.cache = cache
        super.init(memoryCapacity: 0, diskCapacity: 0, diskPath: NSTemporaryDirectory())
    }
    override func getCachedResponse(for dataTask: URLSessionDataTask, completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void) {
        let id = dataTask.taskIdentifier
        log("L0 \(id)")
        completionHandler(dataTask.currentRequest.flatMap(cache.cachedResponse(for:)))
        log("L1 \(id)")
    }
    override func cachedResponse(for request: URLRequest) -> CachedURLResponse? { cache.cachedResponse(for: request) }
    override func storeCachedResponse(_ r: CachedURLResponse, for request: URLRequest) { cache.storeCachedResponse(r, for: request) }
    override func storeCachedResponse(_ r: CachedURLResponse, for dataTask: URLSessionDataTask) { cache.storeCachedResponse(r, for: dataTask) }
    override func removeCachedResponse(for request: URLRequest) { cache.removeCachedResponse(for: request) }
    override func removeCachedResponse(for dataTask: URLSessionDataTask) { cache.removeCachedResponse(for: dataTask) }
}

let slots = DispatchSemaphore(value: inflight)
let done = DispatchGroup()

final class Delegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        log("D \(task.taskIdentifier) \((error as? URLError)?.code.rawValue ?? 0)")
        slots.signal()
        done.leave()
    }
}

/// Cancels at planned moments from a thread of its own (a busy global queue would delay them).
final class Canceller: @unchecked Sendable {
    private let condition = NSCondition()
    private var planned: [(at: UInt64, task: URLSessionTask)] = []
    init() {
        let thread = Thread { [self] in run() }
        thread.start()
    }
    func schedule(_ task: URLSessionTask, at moment: UInt64) {
        condition.withLock {
            let position = planned.firstIndex { $0.at > moment } ?? planned.endIndex
            planned.insert((moment, task), at: position)
            condition.signal()
        }
    }
    private func run() {
        condition.lock()
        while true {
            guard let first = planned.first else { condition.wait(); continue }
            let now = DispatchTime.now().uptimeNanoseconds
            if first.at > now {
                _ = condition.wait(until: Date(timeIntervalSinceNow: Double(first.at - now) / 1e9))
                continue
            }
            planned.removeFirst()
            condition.unlock()
            log("C0 \(first.task.taskIdentifier)")
            first.task.cancel()
            log("C1 \(first.task.taskIdentifier)")
            condition.lock()
        }
    }
}

let configuration = URLSessionConfiguration.ephemeral
configuration.httpMaximumConnectionsPerHost = 64
switch cacheMode {
case "none": configuration.urlCache = nil
case "async": break
case "logged": configuration.urlCache = configuration.urlCache.map(LoggedLookupCache.init)
case "immediate": configuration.urlCache = configuration.urlCache.map(ImmediateLookupCache.init)
default: print("--cache none|async|logged|immediate"); exit(2)
}
let session = URLSession(configuration: configuration, delegate: Delegate(), delegateQueue: InlineQueue())
let canceller = Canceller()
var random = SystemRandomNumberGenerator()
let urls = [URL(string: base + "/json")!, URL(string: base + "/files/storm-1m.bin")!]
for _ in 0..<total {
    slots.wait()
    done.enter()
    let task = session.dataTask(with: urls[Int.random(in: 0..<2, using: &random)])
    task.resume()
    log("R \(task.taskIdentifier)")
    let delay = UInt64(Double.random(in: 0...cancelMaxMs, using: &random) * 1e6)
    canceller.schedule(task, at: DispatchTime.now().uptimeNanoseconds + delay)
}
if done.wait(timeout: .now() + 120) == .timedOut { print("HANG"); exit(4) }
print("OK \(total)")
exit(0)
