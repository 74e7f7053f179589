#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

final class ResultObserverTests: XCTestCase {
    private let server = TestServer.shared

    /// A screen that shows log-in results.
    private final class Screen {
        let events: Recorder<String>
        init(events: Recorder<String>) { self.events = events }
        func show(_ result: Result<ServedRecipe, Error>) {
            XCTAssertTrue(Thread.isMainThread, "on the main queue by default")
            events.append((try? result.get()).map { "seen \($0.name)" } ?? "seen failure")
        }
    }

    /// Adds a request for `path` whose completion records "done".
    @discardableResult
    private func add(_ path: String, to queue: OperationQueue, events: Recorder<String>) -> Operation {
        queue.addRequest(GetDecodable<ServedRecipe>(url: server.url(path)), session: testSession) { _ in
            Thread.sleep(forTimeInterval: 0.05)  // an observer that ran alongside would record before this
            events.append("done")
        }
    }

    private func drainMain(_ queue: OperationQueue) {
        waitUntil("the queue empties") { queue.operationCount == 0 }
        // Observers are called on the main queue after the completions: run it a little.
        RunLoop.current.run(until: Date().addingTimeInterval(0.2))
    }

    func testEveryResultOfTheTypeReachesTheOwnerOnMainAfterTheCompletion() throws {
        // Given a screen observing recipes on a queue
        let queue = OperationQueue()
        let events = Recorder<String>()
        let screen = Screen(events: events)
        queue.observeResults(of: ServedRecipe.self, owner: screen) { owner, result in owner.show(result) }
        // When a recipe arrives, a recipe request fails, and a request of another type completes
        add("/json", to: queue, events: events)
        queue.waitUntilAllOperationsAreFinished()
        drainMain(queue)
        add("/status/500", to: queue, events: events)
        queue.addRequest(GetData(url: server.url("/json")), session: testSession) { _ in }
        drainMain(queue)
        // Then the owner saw both recipe results, each after that request's own completion, and nothing else
        XCTAssertEqual(events.values, ["done", "seen Pancakes", "done", "seen failure"])
        withExtendedLifetime(screen) {}
    }

    func testTheObservationEndsWithTheOwnerAndNeverKeepsItAlive() {
        let queue = OperationQueue()
        let events = Recorder<String>()
        weak var released: Screen?
        do {
            let screen = Screen(events: events)
            released = screen
            queue.observeResults(of: ServedRecipe.self, owner: screen) { owner, result in owner.show(result) }
        }
        XCTAssertNil(released, "the observation does not keep its owner")
        add("/json", to: queue, events: events)
        drainMain(queue)
        XCTAssertEqual(events.values, ["done"])
    }

    func testCancellingTheObservationStopsIt() {
        let queue = OperationQueue()
        let events = Recorder<String>()
        let screen = Screen(events: events)
        let observation = queue.observeResults(of: ServedRecipe.self, owner: screen) { owner, result in owner.show(result) }
        add("/json", to: queue, events: events)
        drainMain(queue)
        observation.cancel()
        add("/json", to: queue, events: events)
        drainMain(queue)
        XCTAssertEqual(events.values, ["done", "seen Pancakes", "done"])
        withExtendedLifetime(screen) {}
    }

    func testOtherQueuesAreNotObservedAndAnyDispatchQueueCanBeChosen() {
        let observed = OperationQueue()
        let other = OperationQueue()
        let events = Recorder<String>()
        let owner = NSObject()
        let delivery = DispatchQueue(label: "observer")
        observed.observeResults(of: ServedRecipe.self, owner: owner, on: delivery) { _, result in
            dispatchPrecondition(condition: .onQueue(delivery))
            events.append((try? result.get()) == nil ? "failure" : "recipe")
        }
        // A chained request counts once, as the chain's result
        let first = observed.addRequest(GetData(url: server.url("/json")), session: testSession)
        observed.addRequest(after: first, session: testSession) { (_: Data) in GetDecodable<ServedRecipe>(url: self.server.url("/json")) }
        other.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession) { _ in }
        other.waitUntilAllOperationsAreFinished()
        observed.waitUntilAllOperationsAreFinished()
        waitUntil("the observer runs") { events.count == 1 }
        delivery.sync {}
        XCTAssertEqual(events.values, ["recipe"])
        withExtendedLifetime(owner) {}
    }
}
