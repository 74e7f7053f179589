#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Creates the tasks whose callbacks Requests receives, and routes each callback to that task's `TransferSink`.
///
/// On Apple platforms a task runs on the caller's session with a per-task delegate (iOS 15, macOS 12), so the caller's
/// session and its delegate handle what the sink does not (authentication challenges, metrics); unless its delegate
/// queue is concurrent (callbacks could overlap): then as on Linux.
///
/// On Linux per-task delegates are ignored, and byte counts arrive only through session-delegate callbacks of tasks
/// without a completion handler. So a task runs on a session derived once per caller session: its configuration
/// (headers, timeouts, cookies, cache, protocol classes), this delegate and a `CallbackQueue`. The caller's delegate
/// still answers authentication challenges, on its own queue; its other callbacks are not called. A derived session is
/// invalidated (after its tasks finish) when the next one is derived, once the caller's session has been released.
final class TransferSession: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    /// Throws ``RequestQueueError/misuse(_:)`` for a background session, whose tasks cannot have a delegate of their own.
    static func checkSupported(_ base: URLSession) throws {
        guard base.configuration.identifier == nil else {
            throw RequestQueueError.misuse("background URLSessions are not supported: their tasks cannot report to Requests")
        }
    }

    /// Creates a task with `make` on the session that routes its callbacks to `handler`; call `resume()` after.
    static func task(on base: URLSession, handler: TransferSink, _ make: (URLSession) -> URLSessionTask) -> URLSessionTask {
        let delegate: TransferSession
        let task: URLSessionTask
        #if canImport(FoundationNetworking)
        (task, delegate) = derivedTask(on: base, make)
        #else
        if base.delegateQueue.maxConcurrentOperationCount == 1 {
            delegate = TransferSession()
            task = make(base)
            task.delegate = delegate
        } else {
            (task, delegate) = derivedTask(on: base, make)
        }
        #endif
        handler.attach(task)
        delegate.register(handler, for: task)
        return task
    }

    private static func derivedTask(on base: URLSession, _ make: (URLSession) -> URLSessionTask) -> (URLSessionTask, TransferSession) {
        let (session, delegate) = session(for: base)
        return (make(session), delegate)
    }

    private struct Entry {
        weak var base: URLSession?
        let session: URLSession
        let delegate: TransferSession
    }

    /// The caller's session, for a derived session: its delegate still answers authentication challenges (for
    /// example certificate pinning) for the tasks that run here.
    private weak var base: URLSession?

    private static let sessionsLock = NSLock()
    nonisolated(unsafe) private static var sessions: [ObjectIdentifier: Entry] = [:]

    /// The session derived from `base`, and its delegate, created on first use.
    static func session(for base: URLSession) -> (URLSession, TransferSession) {
        let (session, delegate, released) = sessionsLock.withLock { () -> (URLSession, TransferSession, [ObjectIdentifier: Entry]) in
            if let entry = sessions[ObjectIdentifier(base)], entry.base === base { return (entry.session, entry.delegate, [:]) }
            // A session keeps its delegate and threads until it is invalidated; its running tasks finish first.
            let released = sessions.filter { $0.value.base == nil }
            released.keys.forEach { sessions[$0] = nil }
            let delegate = TransferSession()
            delegate.base = base
            let session = URLSession(configuration: base.configuration, delegate: delegate, delegateQueue: CallbackQueue())
            sessions[ObjectIdentifier(base)] = Entry(base: base, session: session, delegate: delegate)
            return (session, delegate, released)
        }
        released.values.forEach { $0.session.finishTasksAndInvalidate() }
        return (session, delegate)
    }

    private let lock = NSLock()
    private var handlers: [Int: TransferSink] = [:]

    /// Routes `task`'s callbacks to `handler` until the task completes. Call before `resume()`.
    private func register(_ handler: TransferSink, for task: URLSessionTask) {
        lock.withLock { handlers[task.taskIdentifier] = handler }
    }

    private func handler(for task: URLSessionTask, removing: Bool = false) -> TransferSink? {
        lock.withLock { removing ? handlers.removeValue(forKey: task.taskIdentifier) : handlers[task.taskIdentifier] }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        let handler = handler(for: task)
        handler?.measure(sentTotal: totalBytesSent)
        handler?.didSend(total: totalBytesSent, expected: totalBytesExpectedToSend)
    }

    func urlSession(
        _ session: URLSession,
        dataTask: URLSessionDataTask,
        didReceive response: URLResponse,
        completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void
    ) {
        let handler = handler(for: dataTask)
        handler?.measure(responseArrived: true)
        let accepted = handler?.shouldAccept(response) ?? true
        #if canImport(FoundationNetworking)
        // corelibs ignores `.cancel` (a 3 GiB body then arrived whole), and in probes a task answered with it often
        // ignored the cancel that followed as well; one answered `.allow` stopped within 44 ms of it. A refused
        // response has been cancelled by its transfer already.
        _ = accepted
        completionHandler(.allow)
        #else
        completionHandler(accepted ? .allow : .cancel)
        #endif
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let handler = handler(for: dataTask)
        handler?.measure(received: data.count)
        handler?.didReceive(data)
    }

    #if !canImport(FoundationNetworking)
    /// A body stream cannot be read twice: a request that must be sent again (after a 307 or 308, or an
    /// authentication challenge) gets a new one where the body can be reopened, and otherwise fails. (Linux
    /// re-sends no streamed body: it drops the body on a 307 or 308.)
    func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
        if let reopened = task.originalRequest?.httpBodyStream.flatMap(MultipartFormData.reopenedStream) {
            completionHandler(reopened)
            return
        }
        // A stream of the caller's own: the caller's delegate may know how to make it again.
        let callerDelegate = (base ?? session).delegate as? URLSessionTaskDelegate
        callerDelegate?.urlSession?(base ?? session, task: task, needNewBodyStream: completionHandler) ?? completionHandler(nil)
    }
    #endif

    /// The request's ``RedirectPolicy`` rules on each redirect (URLSession on Linux would forward every header to
    /// another host, and turn a redirect to `file:` into a path on the first one).
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        guard let handler = handler(for: task) else {
            completionHandler(nil)
            return
        }
        #if canImport(FoundationNetworking)
        // This runs on the session's work queue (see `CallbackQueue`), and the ruling may call user code (a custom
        // policy, the monitors), which must not hold that queue up. The answer may come from any thread; a cancel
        // waits for it.
        TaskCancellation.beginRedirectRuling(of: task)
        DispatchQueue.global().async {
            let previousURL = task.currentRequest?.url ?? response.url
            completionHandler(handler.willRedirect(response, to: request, from: previousURL))
            TaskCancellation.endRedirectRuling(of: task)
        }
        #else
        let previousURL = task.currentRequest?.url ?? response.url
        let redirected = handler.willRedirect(response, to: request, from: previousURL)
        // The caller's session delegate has the last word on a redirect Requests allows, as it would without Requests;
        // what it returns is held to the same rules (no other scheme, no sensitive header to another origin).
        guard base == nil, let redirected, let callerDelegate = session.delegate as? URLSessionTaskDelegate else {
            completionHandler(redirected)
            return
        }
        callerDelegate.urlSession?(session, task: task, willPerformHTTPRedirection: response, newRequest: redirected) { decided in
            completionHandler(decided.flatMap { handler.enforceRules(on: $0, from: previousURL) })
        } ?? completionHandler(redirected)
        #endif
    }

    #if canImport(FoundationNetworking)
    /// Linux only: corelibs raises no server-trust or client-certificate challenges; the rest are per task, and go to
    /// the caller's delegate. (On Apple platforms the caller's delegate gets them as without Requests; a derived
    /// session's get the default handling.)
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        // For HTTP authentication (Basic, Digest) corelibs hangs on `.performDefaultHandling` without a credential,
        // crashes on `.useCredential` without one, and cancels on `.rejectProtectionSpace`, where Apple platforms
        // deliver the 401. So those answers use default handling's credential (the URL's, else the storage's), once,
        // or else cancel the task and end the attempt with the challenge's response. Others pass as they are.
        let transfer = handler(for: task)
        let storage = session.configuration.urlCredentialStorage
        let isHTTPAuthentication = Self.httpAuthenticationMethods.contains(challenge.protectionSpace.authenticationMethod)
        let answer: @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void = { disposition, credential in
            if !isHTTPAuthentication || disposition == .cancelAuthenticationChallenge {
                if disposition == .useCredential, credential != nil { transfer?.challengeWasAnswered() }
                completionHandler(disposition, credential)
            } else if let credential = disposition == .useCredential ? credential : Self.defaultCredential(for: challenge, in: storage) {
                transfer?.challengeWasAnswered()
                completionHandler(.useCredential, credential)
            } else {
                if let response = challenge.failureResponse as? HTTPURLResponse { transfer?.challengeWentUnanswered(response) }
                completionHandler(.cancelAuthenticationChallenge, nil)
            }
        }
        // Off the callback queue: the answer suspends and resumes the task, which waits for the session's work queue.
        guard let base, let taskDelegate = base.delegate as? URLSessionTaskDelegate else {
            DispatchQueue.global().async { answer(.performDefaultHandling, nil) }
            return
        }
        base.delegateQueue.addOperation {
            taskDelegate.urlSession(base, task: task, didReceive: challenge, completionHandler: answer)
        }
    }

    /// The challenges answered with a user and a password.
    private static let httpAuthenticationMethods: Set<String> = [
        NSURLAuthenticationMethodHTTPBasic, NSURLAuthenticationMethodHTTPDigest, NSURLAuthenticationMethodDefault,
    ]

    /// What default handling would use: the credential the challenge proposes (from the URL), else the storage's
    /// default for the protection space; none after a failure, so that a wrong credential is not sent again.
    private static func defaultCredential(for challenge: URLAuthenticationChallenge, in storage: URLCredentialStorage?) -> URLCredential? {
        guard challenge.previousFailureCount == 0 else { return nil }
        if let proposed = challenge.proposedCredential, proposed.hasPassword { return proposed }
        // corelibs' storage finds nothing for the challenge's own protection space object (it does not compare equal
        // to the stored one), so the stored space is looked up by its fields.
        let space = challenge.protectionSpace
        guard let storage,
            let stored = storage.allCredentials.keys.first(where: {
                $0.host == space.host && $0.port == space.port && $0.protocol == space.protocol && $0.realm == space.realm
                    && $0.authenticationMethod == space.authenticationMethod && $0.isProxy() == space.isProxy()
            })
        else { return nil }
        return storage.defaultCredential(for: stored) ?? storage.credentials(for: stored).flatMap { $0.count == 1 ? $0.values.first : nil }
    }
    #endif

    #if !canImport(FoundationNetworking)
    /// Apple platforms deliver the task's metrics before its completion; Linux gathers none. The caller's session
    /// delegate still gets them, as it would without Requests.
    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        handler(for: task)?.measure(reusedConnection: metrics.transactionMetrics.last?.isReusedConnection)
        if base == nil, let callerDelegate = session.delegate as? URLSessionTaskDelegate {
            callerDelegate.urlSession?(session, task: task, didFinishCollecting: metrics)
        }
    }
    #endif

    /// One cache: an answer the ``ResponseCache`` manages is not kept by the platform's `URLCache` too (on Apple
    /// platforms a request that ignores the local cache still fills it). Others are kept as without Requests.
    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        completionHandler(handler(for: dataTask)?.rules.keepsOutOfPlatformCache == true ? nil : proposedResponse)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        handler(for: task, removing: true)?.didComplete(response: task.response, error: error)
    }
}

/// The delegate queue of a session Requests derives: on Linux each block runs at once, where it is added.
///
/// Through a plain `OperationQueue` each callback becomes a `BlockOperation` and a thread hop (three for a small
/// response; profiled on Linux: about 40 µs of CPU per request). On Linux the session adds its blocks from its serial
/// work queue, so they run in order, never overlapping; they are short and never call user code or wait for the
/// session (a redirect ruling or a challenge goes to another queue first). On Apple platforms (not measured) it is a
/// plain serial queue.
final class CallbackQueue: OperationQueue, @unchecked Sendable {
    override init() {
        super.init()
        name = "Requests.transfers"
        maxConcurrentOperationCount = 1
    }

    #if canImport(FoundationNetworking)
    /// Held while a block runs: a `URLProtocol` of the caller's may call its client from threads of its own.
    private let running = NSLock()

    override func addOperation(_ block: @escaping @Sendable () -> Void) {
        running.withLock(block)
    }
    #endif
}
