#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Sees each task a ``NetworkRequestOperation`` creates (tests only).
typealias TaskObserver = @Sendable (any TransportTask) -> Void

/// The state of a running ``NetworkRequestOperation``, guarded by the operation's lock.
final class RunState {
    /// The attempt in progress, from 1.
    var attempt = 1
    /// The asynchronous step (makeURLRequest, an adapter, the credential) whose answer is awaited; any other
    /// answer, such as a second call of the same callback, is ignored.
    var awaitedStep: Int?
    var stepCount = 0
    var task: (any TransportTask)?
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
    /// What the current attempt accepts as a status, set when it is prepared.
    var statusRule = StatusRule()
    /// How many times the request was sent again, per reason (see `Reattempt.swift`).
    var reattempts: [ReattemptReason: Int] = [:]
    /// The hop of the current attempt after its latest redirect; `nil` before any (see `RedirectHop`).
    var redirectHop: RedirectHop?
    /// The current attempt's upload body as prepared, and its length (-1: unknown until sent).
    var upload: (body: UploadBody, length: Int64)?
    /// The response cache's part in the current attempt (see `CachingStage.swift`), taken when it ends: no later
    /// attempt inherits it.
    var cachedAttempt: CachedAttempt?
    /// The current attempt's response and the size of its body.
    var response: HTTPURLResponse?
    var bodyBytes = 0
    /// The current attempt's transfer, once it has ended.
    var metrics: TransferMetrics?
    /// Whether the transport answered an authentication challenge in the current attempt.
    var answeredChallenge = false
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
        lock.withLock { handler.take() }?(value)
    }
}

/// Seconds elapsed since `start`, on the monotonic clock.
func secondsSince(_ start: DispatchTime) -> TimeInterval {
    Double(DispatchTime.now().uptimeNanoseconds &- start.uptimeNanoseconds) / 1e9
}

/// The operation as the answers of its asynchronous steps see it: the task, an adapter, the authenticator, the
/// backoff, a transfer's progress. An existential, so that the @Sendable closures that call it do not capture the
/// operation's generic metatype.
protocol AttemptCallbacks: AnyObject, Sendable {
    func receive(body: ResponseBody, response: URLResponse?, error: Error?)
    /// What the transport measured of the attempt whose outcome comes next, with ``receive(body:response:error:)``.
    /// `answeredChallenge`: the transport answered an authentication challenge with a credential.
    func measured(_ metrics: TransferMetrics, answeredChallenge: Bool)
    func transferred(completed: Int64, expected: Int64)
    func adapted(_ result: Result<URLRequest, Error>, step: Int, nextAdapter: Int)
    func authorized(_ urlRequest: URLRequest, with credential: Result<TokenAuthenticator.Credential, Error>, step: Int)
    func reauthenticated(_ decision: TokenAuthenticator.Decision, after failure: Error, attempt: RequestAttempt)
    func startNextAttempt()
    func retrierAnswered(_ result: Result<RetryDecision, Error>, context: RetryContext, maxDelay: TimeInterval, failed attempt: RequestAttempt, step: Int)
    func redirected(_ response: HTTPURLResponse, to request: URLRequest)
    func deadlinePassed(_ deadline: TimeInterval)
}
