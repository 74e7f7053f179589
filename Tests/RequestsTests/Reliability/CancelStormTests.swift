#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// The cancel storm of `requests-bench --storm`, in the suite: every kind of transfer cancelled at a random moment
/// while it runs. Before `TaskCancellation`, downloads and streams crashed the process (Foundation's
/// `TaskRegistry.swift:118`) in every round of 3,000 beside two busy loops; a crash fails the whole test run.
final class CancelStormTests: XCTestCase {
    private let server = TestServer.shared
    private var folder: URL!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("storm-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: folder)
    }

    /// 1,200 requests, 16 at a time, each cancelled 0–4 ms after it is added: JSON, 1 MiB bodies, 4 MB downloads,
    /// resumable downloads (cancelled keeping their bytes, and later ones resumed from those states) and streams.
    /// Every completion runs once, every operation finishes, and every state kept describes the bytes on disk.
    func testEveryKindCancelledAtRandomCompletesOnce() throws {
        let total = 1_200
        let queue = OperationQueue()
        let slots = DispatchSemaphore(value: 16)
        let ledger = StormLedger(count: total)
        let states = Recorder<ResumeState>()
        let unused = StatePool()
        var generator = SplitMix64(seed: 31)
        var operations: [Operation] = []
        let download = server.url("/ranged/4000000")
        let coveredBefore = TaskCancellation.coveredCancels

        for index in 0..<total {
            slots.wait()
            let done: @Sendable () -> Void = {
                ledger.complete(index)
                slots.signal()
            }
            let operation: Operation
            switch index % 5 {
            case 0:
                operation = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json?i=\(index)")), session: testSession) { _ in done() }
            case 1:
                operation = queue.addRequest(GetData(url: server.url("/bytes/1048576?i=\(index)")), session: testSession) { _ in done() }
            case 2:
                let request = Download(url: download, destination: folder.appendingPathComponent("\(index).bin"))
                operation = queue.addRequest(request, session: testSession) { _ in done() }
            case 3:
                let request = FileDownload(url: download, destination: folder.appendingPathComponent("\(index).bin"))
                let resumable = queue.addRequest(request, resumingFrom: unused.take(), session: testSession) { _, state in
                    if let state {
                        states.append(state)
                        unused.add(state)
                    }
                    done()
                }
                operation = resumable
                let delay = Double(generator.next() % 4_000) / 1e6
                DispatchQueue.global().asyncAfter(deadline: .now() + delay) { resumable.cancel(producingResumeState: true) }
                operations.append(operation)
                continue
            default:
                operation = queue.addRequest(Chunks(url: server.url("/bytes/8388608?i=\(index)")), session: testSession, receive: { _ in }) { _ in done() }
            }
            operations.append(operation)
            let delay = Double(generator.next() % 4_000) / 1e6
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) { operation.cancel() }
        }
        queue.waitUntilAllOperationsAreFinished()

        XCTAssertEqual(ledger.calledTwice, [], "completions called more than once")
        XCTAssertEqual(ledger.neverCalled, [], "completions never called")
        XCTAssertTrue(operations.allSatisfy(\.isFinished))
        // The situation that crashed: a second cancel of a task while the first was in flight (the operation's and its
        // sink's, or the operation's twice as it started). Each was left to the first.
        // (URLSession's tasks only: a transfer on libcurl is cancelled by its loop, once, without `TaskCancellation`.)
        if !isOnCurl(testSession) {
            XCTAssertGreaterThan(TaskCancellation.coveredCancels, coveredBefore, "the storm made overlapping cancels")
        }
        // A state handed to a later download had its file taken over (the file grows with that download's bytes, and a
        // state of its own describes it); every other kept state describes its bytes.
        for state in states.values where !unused.wasGiven(state) && FileManager.default.fileExists(atPath: state.partialFile.path) {
            XCTAssertEqual(FileSink.size(of: state.partialFile), state.bytesReceived, "a kept state describes the bytes on disk")
            state.discard()
        }
    }
}

/// `TaskCancellation`'s rules, with a stand-in task whose `cancel()` waits until it is let go: what no socket can
/// arrange on purpose (two cancels of one task in flight at once).
final class TaskCancellationTests: XCTestCase {
    func testASecondCancelWhileOneIsInFlightIsLeftToIt() {
        let task = HeldCancel()
        TaskCancellation.cancel(task, after: 0)
        task.started.wait()
        let coveredBefore = TaskCancellation.coveredCancels
        DispatchQueue.concurrentPerform(iterations: 8) { _ in TaskCancellation.cancel(task, after: 0) }
        XCTAssertEqual(TaskCancellation.coveredCancels - coveredBefore, 8, "dropped at once, none scheduled")
        task.release.signal()
        task.finished.wait()
        XCTAssertEqual(task.calls, 1)
        waitUntil("the first cancel has returned") { !TaskCancellation.isBusy(task) }

        // Once the first has returned, a cancel is made again (Linux ignores one that comes too early).
        TaskCancellation.cancel(task, after: 0)
        task.started.wait()
        task.release.signal()
        task.finished.wait()
        XCTAssertEqual(task.calls, 2)
        XCTAssertFalse(task.overlapped)
    }

    func testACancelDuringARedirectRulingIsMadeWhenTheRulingEnds() {
        let task = HeldCancel()
        TaskCancellation.beginRedirectRuling(of: task)
        TaskCancellation.cancel(task, after: 0)
        TaskCancellation.cancel(task, after: 0)
        XCTAssertEqual(task.calls, 0, "held back, not scheduled")
        TaskCancellation.endRedirectRuling(of: task)
        task.started.wait()
        task.release.signal()
        task.finished.wait()
        XCTAssertEqual(task.calls, 1)
        waitUntil("the cancel has returned") { !TaskCancellation.isBusy(task) }

        // A ruling without a cancel leaves nothing behind: the next cancel is made as usual.
        TaskCancellation.beginRedirectRuling(of: task)
        TaskCancellation.endRedirectRuling(of: task)
        XCTAssertFalse(TaskCancellation.isBusy(task))
        TaskCancellation.cancel(task, after: 0)
        task.started.wait()
        task.release.signal()
        task.finished.wait()
        XCTAssertEqual(task.calls, 2)
    }
}

/// A task whose `cancel()` signals `started`, waits for `release`, then signals `finished`.
/// The derived session's URLCache on Linux answers a data task's lookup at once (before `getCachedResponse` returns),
/// so that no cancel's block waits for it (docs/reliability.md, "The cancel storm"), and leaves the rest to the
/// caller's cache.
final class ImmediateLookupCacheTests: XCTestCase {
    #if canImport(FoundationNetworking)
    func testTheLookupAnswersBeforeItReturnsWithTheCallersEntry() throws {
        let url = try XCTUnwrap(URL(string: "http://127.0.0.1:9/lookup"))
        let callers = URLCache(memoryCapacity: 1 << 20, diskCapacity: 0, diskPath: nil)
        let response = try XCTUnwrap(HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: nil))
        callers.storeCachedResponse(CachedURLResponse(response: response, data: Data("kept".utf8)), for: URLRequest(url: url))
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = callers
        let derived = TaskCancellation.derived(from: configuration)
        let cache = try XCTUnwrap(derived.urlCache as? ImmediateLookupCache)
        XCTAssertTrue(cache.cache === callers)
        XCTAssertTrue(configuration.urlCache === callers, "the caller's configuration is left as it was")
        let session = URLSession(configuration: .ephemeral)
        defer { session.invalidateAndCancel() }
        let task = session.dataTask(with: url)
        let answered = Locked<Data?>(nil)
        cache.getCachedResponse(for: task) { answered.value = $0?.data }
        XCTAssertEqual(answered.value, Data("kept".utf8), "answered before getCachedResponse returned")
        cache.removeCachedResponse(for: task)
        XCTAssertNil(callers.cachedResponse(for: URLRequest(url: url)), "removed from the caller's cache")
        XCTAssertTrue(TaskCancellation.derived(from: derived).urlCache === cache, "not wrapped twice")
    }

    func testASessionWithoutACacheIsLeftAsItIs() {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        XCTAssertTrue(TaskCancellation.derived(from: configuration) === configuration)
    }
    #endif
}

/// A value behind a lock, for the tests above.
private final class Locked<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: T
    init(_ value: T) { stored = value }
    var value: T {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}

private final class HeldCancel: CancellableTask, @unchecked Sendable {
    let started = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    let finished = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var running = 0
    private var callCount = 0
    private var sawOverlap = false

    var calls: Int { lock.withLock { callCount } }
    var overlapped: Bool { lock.withLock { sawOverlap } }

    func cancel() {
        lock.withLock {
            callCount += 1
            running += 1
            sawOverlap = sawOverlap || running > 1
        }
        started.signal()
        release.wait()
        lock.withLock { running -= 1 }
        finished.signal()
    }
}

/// The states no download has resumed from yet: each is resumed once at most.
private final class StatePool: @unchecked Sendable {
    private let lock = NSLock()
    private var states: [ResumeState] = []
    private var given: Set<ResumeState> = []

    func add(_ state: ResumeState) { lock.withLock { states.append(state) } }
    func take() -> ResumeState? {
        lock.withLock {
            let state = states.popLast()
            if let state { given.insert(state) }
            return state
        }
    }

    /// Whether `state` was handed to a later download, which takes its file over: the file then holds that download's
    /// bytes (and a state of its own, if it was cancelled keeping them), not this state's.
    func wasGiven(_ state: ResumeState) -> Bool { lock.withLock { given.contains(state) } }
}

/// Counts the completions per request.
private final class StormLedger: @unchecked Sendable {
    private let lock = NSLock()
    private var counts: [Int]

    init(count: Int) { counts = Array(repeating: 0, count: count) }

    func complete(_ index: Int) { lock.withLock { counts[index] += 1 } }
    var calledTwice: [Int] { lock.withLock { counts.indices.filter { counts[$0] > 1 } } }
    var neverCalled: [Int] { lock.withLock { counts.indices.filter { counts[$0] == 0 } } }
}
