#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Sees each task a ``NetworkRequestOperation`` creates (tests only).
typealias TaskObserver = @Sendable (URLSessionTask) -> Void

/// The state of a running ``NetworkRequestOperation``, guarded by the operation's lock.
final class Run {
    /// The attempt in progress, from 1.
    var attempt = 1
    /// The asynchronous step (makeURLRequest, an adapter, the credential) whose answer is awaited; any other
    /// answer, such as a second call of the same callback, is ignored.
    var awaitedStep: Int?
    var stepCount = 0
    var task: URLSessionTask?
    /// Fires at the request's deadline, if it has one.
    var deadline: DispatchSourceTimer?
    var taskObserver: TaskObserver?
    /// The wait before the next attempt.
    var backoff: DispatchWorkItem?
    /// What the current attempt sent, with which credential, and when.
    var sentRequest: URLRequest?
    var credential: TokenAuthenticator.Credential?
    var sendTime = DispatchTime.now()
    var attemptsSent = 0
    /// Whether the one resend after a token refresh has been used.
    var resentAfterRefresh = false
    /// The current attempt's response and the size of its body.
    var response: HTTPURLResponse?
    var bodyBytes = 0
    /// The current attempt's transfer, once it has ended.
    var metrics: TransferMetrics?
    var startTime: DispatchTime?
    /// Monitor events not yet delivered, and whether a thread is delivering them, so that they arrive in order.
    var pendingEvents: [MonitorEvent] = []
    var isDeliveringEvents = false
}

/// Calls `handler` with the first value given, once; later values are dropped.
final class FirstAnswer<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var handler: (@Sendable (Value) -> Void)?

    init(_ handler: @escaping @Sendable (Value) -> Void) {
        self.handler = handler
    }

    func give(_ value: Value) {
        let handler: (@Sendable (Value) -> Void)? = lock.withLock {
            defer { self.handler = nil }
            return self.handler
        }
        handler?(value)
    }
}

/// Seconds elapsed since `start`, on the monotonic clock.
func secondsSince(_ start: DispatchTime) -> TimeInterval {
    Double(DispatchTime.now().uptimeNanoseconds &- start.uptimeNanoseconds) / 1e9
}

/// An event for the monitors, queued so that each operation's events arrive in order.
enum MonitorEvent {
    case willSend(RequestAttempt)
    case didCreateTask(RequestAttempt, URLSessionTask)
    case didReceive(RequestAttempt, HTTPURLResponse, bodyBytes: Int, duration: TimeInterval)
    case didFail(RequestAttempt, Error, duration: TimeInterval)
    case didRetry(RequestAttempt, delay: TimeInterval)
    case willRedirect(RequestAttempt, HTTPURLResponse, to: URLRequest)
    case cache(RequestAttempt, CacheEvent)
    case didFinish(RequestSummary, then: @Sendable () -> Void)

    /// What runs once the monitors have seen the event: the completion, after the finish.
    var continuation: (@Sendable () -> Void)? {
        if case let .didFinish(_, continuation) = self { return continuation }
        return nil
    }

    func deliver(to monitor: any RequestEventMonitor) {
        switch self {
        case let .willSend(attempt):
            monitor.requestWillSend(attempt)
        case let .didCreateTask(attempt, task):
            monitor.requestDidCreateTask(attempt, task: task)
        case let .didReceive(attempt, response, bodyBytes, duration):
            monitor.requestDidReceive(attempt, response: response, bodyBytes: bodyBytes, duration: duration)
        case let .didFail(attempt, error, duration):
            monitor.requestDidFail(attempt, error: error, duration: duration)
        case let .didRetry(attempt, delay):
            monitor.requestDidRetry(attempt, delay: delay)
        case let .willRedirect(attempt, response, request):
            monitor.requestWillRedirect(attempt, response: response, to: request)
        case let .cache(attempt, event):
            monitor.requestDidUseCache(attempt, event: event)
        case let .didFinish(summary, _):
            monitor.requestDidFinish(summary)
        }
    }
}

/// A processed success value, with what makes it final: `commit` runs in the step that claims the outcome
/// (under the operation's lock, so it must be quick and must not call back into the operation; a throw turns
/// the outcome into that failure), and `abandon` runs if a cancellation claimed it first.
struct Processed<Value> {
    let value: Value
    var commit: (() throws -> Void)?
    var abandon: (() -> Void)?

    init(value: Value, commit: (() throws -> Void)? = nil, abandon: (() -> Void)? = nil) {
        self.value = value
        self.commit = commit
        self.abandon = abandon
    }
}

/// A response's body: bytes in memory, or the file a download wrote.
enum ResponseBody: Sendable {
    case data(Data)
    case file(URL)

    /// Its size in bytes.
    var count: Int {
        switch self {
        case let .data(data): return data.count
        case let .file(url): return ((try? FileManager.default.attributesOfItem(atPath: url.path))?[.size] as? NSNumber)?.intValue ?? 0
        }
    }

    /// The bytes validations see: a file's are not read (an empty `Data`).
    var inMemory: Data {
        if case let .data(data) = self { return data }
        return Data()
    }

    /// Removes a file body; one in memory is simply released.
    func discard() {
        if case let .file(url) = self {
            try? FileManager.default.removeItem(at: url)
        }
    }

    /// The bytes a status error carries: a file's first 64 KiB, which is where a server's error payload is.
    var errorPayload: Data {
        switch self {
        case let .data(data): return data
        case let .file(url): return (try? FileHandle(forReadingFrom: url)).flatMap { try? $0.read(upToCount: 64 * 1024) } ?? Data()
        }
    }
}

/// Receives the answers of asynchronous steps: the task, an adapter, the authenticator, the backoff, and a
/// transfer's progress. An existential, so that the @Sendable closures that call it do not capture the
/// operation's generic metatype.
protocol AttemptReceiver: AnyObject, Sendable {
    func receive(body: ResponseBody, response: URLResponse?, error: Error?)
    /// What the transport measured of the attempt whose outcome comes next, with ``receive(body:response:error:)``.
    func measured(_ metrics: TransferMetrics)
    func transferred(completed: Int64, expected: Int64)
    func adapted(_ result: Result<URLRequest, Error>, step: Int, nextAdapter: Int)
    func authorized(_ urlRequest: URLRequest, with credential: Result<TokenAuthenticator.Credential, Error>, step: Int)
    func reauthenticated(_ decision: TokenAuthenticator.Decision, after failure: Error, attempt: RequestAttempt)
    func startNextAttempt()
    func retrierAnswered(_ result: Result<RetryDecision, Error>, context: RetryContext, maxDelay: TimeInterval, failed attempt: RequestAttempt, step: Int)
    func redirected(_ response: HTTPURLResponse, to request: URLRequest)
    func deadlinePassed(_ deadline: TimeInterval)
}
