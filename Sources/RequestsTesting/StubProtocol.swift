#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The `URLProtocol` of stubbed sessions. Each ``Stubs`` gets its own class, `StubProtocol<Tag>` with a `Tag`
/// type of its own, because `protocolClasses` holds a class, not an instance, and on Linux nothing else
/// of the session (not even its `httpAdditionalHeaders`) reaches the protocol. `Tag` only tells the classes apart.
///
/// On Linux the client must be called on the task's private work queue, where Foundation calls `startLoading`
/// and `stopLoading`: from any other thread it races with the session's task registry and can crash. So an
/// answer is always delivered synchronously inside `startLoading`. For a delayed one, a timer keeps it as
/// `pending` and then suspends and resumes the task: Foundation calls `stopLoading` and `startLoading` again
/// on the work queue, and the second `startLoading` delivers it. A task cancelled meanwhile is not resumed,
/// so nothing is delivered after its `stopLoading`. On Apple platforms a delayed answer is delivered on the run loop
/// of the thread that called `startLoading`, as `URLProtocol` requires.
final class StubProtocol<Tag>: URLProtocol {
    private let lock = NSLock()
    /// A delayed answer whose time has come, delivered by the next `startLoading`.
    private var pending: StubResponse?
    /// Bumped by every `stopLoading`, so a timer started before it delivers nothing.
    private var stops = 0
    #if !canImport(FoundationNetworking)
    /// The run loop of the thread that called `startLoading`, and its mode: where a delayed answer is delivered.
    private var loadingRunLoop: RunLoop?
    private var loadingModes: [RunLoop.Mode] = [.default]
    #endif

    override class func canInit(with request: URLRequest) -> Bool { true }

    override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

    override func startLoading() {
        lock.lock()
        let due = pending
        pending = nil
        let stopsNow = stops
        #if !canImport(FoundationNetworking)
        loadingRunLoop = RunLoop.current
        loadingModes = [RunLoop.current.currentMode ?? .default]
        #endif
        lock.unlock()
        if let due {
            deliver(due)
            return
        }

        let response =
            StubsRegistry.shared.stubs(for: ObjectIdentifier(Tag.self))?.response(for: request)
            ?? .failure(StubError(message: "The Stubs of this session were released before \(request.httpMethod ?? "GET") \(request.url?.absoluteString ?? "")."))
        let target = WeakBox(self)
        if let deferred = response.deferred {
            deferred.whenReady { target.value?.delayIsOver($0, stopsAtStart: stopsNow) }
            return
        }
        guard response.delay > 0 else {
            deliver(response)
            return
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + response.delay) {
            target.value?.delayIsOver(response, stopsAtStart: stopsNow)
        }
    }

    override func stopLoading() {
        lock.lock()
        stops += 1
        lock.unlock()
    }

    /// Runs on the timer's thread: unless loading stopped meanwhile, delivers `response` (see the type's comment).
    private func delayIsOver(_ response: StubResponse, stopsAtStart: Int) {
        #if canImport(FoundationNetworking)
        lock.lock()
        let stillLoading = stops == stopsAtStart
        if stillLoading { pending = response }
        lock.unlock()
        // Both do nothing once the task is cancelled or completed.
        if stillLoading {
            task?.suspend()
            task?.resume()
        }
        #else
        // Apple platforms (not built here): the client must be called on the thread that called startLoading, so
        // the answer is handed to that thread's run loop, in the mode it was loading in.
        lock.lock()
        let runLoop = stops == stopsAtStart ? loadingRunLoop : nil
        let modes = loadingModes
        lock.unlock()
        guard let runLoop else { return }
        let target = WeakBox(self)
        runLoop.perform(inModes: modes) {
            target.value?.deliverOnLoadingThread(response, stopsAtStart: stopsAtStart)
        }
        CFRunLoopWakeUp(runLoop.getCFRunLoop())
        #endif
    }

    #if !canImport(FoundationNetworking)
    /// Runs on the loading thread, where `stopLoading` runs too: delivers unless loading stopped meanwhile.
    private func deliverOnLoadingThread(_ response: StubResponse, stopsAtStart: Int) {
        lock.lock()
        let stillLoading = stops == stopsAtStart
        lock.unlock()
        if stillLoading { deliver(response) }
    }
    #endif

    /// Reports `response` to the client; called inside `startLoading`.
    private func deliver(_ response: StubResponse) {
        guard let client else { return }
        if let error = response.error ?? Self.problem(with: response) {
            client.urlProtocol(self, didFailWithError: error)
            return
        }
        guard let url = request.url,
            let httpResponse = HTTPURLResponse(url: url, statusCode: response.status, httpVersion: "HTTP/1.1", headerFields: response.headers)
        else {
            client.urlProtocol(self, didFailWithError: StubError(message: "Could not build a \(response.status) response."))
            return
        }
        client.urlProtocol(self, didReceive: httpResponse, cacheStoragePolicy: .notAllowed)
        // One piece: on Linux each didLoad replaces, rather than appends to, what a completion handler receives.
        if !response.body.isEmpty {
            client.urlProtocol(self, didLoad: response.body)
        }
        client.urlProtocolDidFinishLoading(self)
    }

    /// A response Foundation cannot take from a protocol without hanging the task.
    private static func problem(with response: StubResponse) -> StubError? {
        #if canImport(FoundationNetworking)
        if response.status == 401, response.headers.keys.contains(where: { $0.lowercased() == "www-authenticate" }) {
            return StubError(
                message: "A stubbed 401 with WWW-Authenticate hangs URLSession on Linux (it starts "
                    + "its authentication flow); stub the 401 without that header.")
        }
        #endif
        return nil
    }
}

/// Makes a new `StubProtocol<Tag>` class for `number`: `Tag` spells the number in binary
/// (`Bit1<Bit0<Bit1<End>>>` for 5), so every number gets a distinct generic instantiation.
enum StubProtocolClasses {
    enum End {}
    enum Bit0<Rest> {}
    enum Bit1<Rest> {}

    /// A protocol class of its own for `number`, and the key that identifies its `Tag`.
    static func make(number: Int) -> (protocolClass: AnyClass, key: ObjectIdentifier) {
        var tag: Any.Type = End.self
        var rest = number
        repeat {
            tag = rest & 1 == 0 ? appending0(tag) : appending1(tag)
            rest >>= 1
        } while rest > 0
        return (protocolClass(tag), ObjectIdentifier(tag))
    }

    private static func appending0<T>(_: T.Type) -> Any.Type { Bit0<T>.self }
    private static func appending1<T>(_: T.Type) -> Any.Type { Bit1<T>.self }
    private static func protocolClass<T>(_: T.Type) -> AnyClass { StubProtocol<T>.self }
}

/// An answer not known when `startLoading` asks for it: whoever knows it calls ``give(_:)``, once, from any thread,
/// and the stub delivers it as it delivers a delayed answer.
final class DeferredAnswer: @unchecked Sendable {
    private let lock = NSLock()
    private var answer: StubResponse?
    private var waiter: (@Sendable (StubResponse) -> Void)?

    func give(_ answer: StubResponse) {
        let waiter: (@Sendable (StubResponse) -> Void)? = lock.withLock {
            self.answer = answer
            return self.waiter.take()
        }
        waiter?(answer)
    }

    /// Calls `waiter` with the answer when it is given (at once if it was).
    func whenReady(_ waiter: @escaping @Sendable (StubResponse) -> Void) {
        let ready: StubResponse? = lock.withLock {
            if answer == nil { self.waiter = waiter }
            return answer
        }
        if let ready { waiter(ready) }
    }
}

/// Hands a stub to the delay timer. `URLProtocol` is not `Sendable`; the stub's own state is behind its lock,
/// and the timer holds it weakly, so a task that has gone away is not kept alive for the rest of the delay.
private final class WeakBox<Value: AnyObject>: @unchecked Sendable {
    weak var value: Value?

    init(_ value: Value) {
        self.value = value
    }
}
