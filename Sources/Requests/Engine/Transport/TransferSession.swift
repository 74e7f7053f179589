#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Creates the tasks whose callbacks Requests receives, and routes each callback to that task's `TransferSink`.
///
/// On every platform a task runs on a session derived once per caller session: the caller's configuration
/// (headers, timeouts, cookies, cache, credentials, protocol classes), this delegate and a `CallbackQueue` of its own.
/// (Linux ignores per-task delegates and reports byte counts only to session delegates; on Apple platforms a per-task
/// delegate on the caller's session would run the library's work on the caller's delegate queue, maybe the main one,
/// and a concurrent queue would let callbacks overlap.) So the library's own work never runs on the caller's delegate
/// queue, and every decision below is made by the same code on both platforms.
///
/// The caller's session delegate is asked, on its own queue, what it would be asked without Requests and Requests
/// does not decide alone (see `CallerDelegate`): every authentication challenge (certificate pinning, client
/// certificates, HTTP authentication), a redirect the ``RedirectPolicy`` allowed (its answer held to the same
/// rules), a body stream Requests cannot reopen, and the task's metrics. A derived session is invalidated (after
/// its tasks finish) when the next one is derived, once the caller's session has been released.
final class TransferSession: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    /// Throws ``RequestQueueError/misuse(_:)`` for a background session, whose tasks cannot have a delegate of their own.
    static func checkSupported(_ base: URLSession) throws {
        guard base.configuration.identifier == nil else {
            throw RequestQueueError.misuse("background URLSessions are not supported: their tasks cannot report to Requests")
        }
    }

    /// Creates the task that sends `request` with `body` (the request's own when `nil`; see `SentBody`) on the session
    /// that routes its callbacks to `handler`; call `resume()` after. `asUpload`: an upload's body, which Apple
    /// platforms send from its own source.
    static func task(
        on base: URLSession, handler: TransferSink, sending request: URLRequest, body: SentBody? = nil, asUpload: Bool = false
    ) -> URLSessionTask {
        let body = body ?? SentBody.of(request)
        let mayBeSentTwice = SentBody.mayBeSentTwice(request)
        var request = request
        let ownConnection = SentBody.needsAConnectionOfItsOwn(
            mayBeSentTwice: mayBeSentTwice, isResentAfterLostConnection: handler.rules.resentAfterLostConnection)
        if ownConnection { request.setValue("close", forHTTPHeaderField: "Connection") }
        let (session, delegate) = session(for: base, ownConnections: ownConnection)
        let task = body?.task(for: request, on: session, asUpload: asUpload) ?? session.dataTask(with: request)
        handler.attach(task, body: body, mayBeSentTwice: mayBeSentTwice, canBeSentAgain: body?.canBeSentAgain(asUpload: asUpload) ?? true)
        delegate.register(handler, for: task)
        return task
    }

    private struct Entry {
        weak var base: URLSession?
        let session: URLSession
        let delegate: TransferSession
    }

    /// The caller's session, whose delegate is asked what Requests does not decide alone.
    private weak var base: URLSession?

    /// A caller's session, and whether the derived session is the one whose requests each have a connection of their
    /// own (see `SentBody.needsAConnectionOfItsOwn(mayBeSentTwice:)`).
    private struct Key: Hashable {
        let base: ObjectIdentifier
        let ownConnections: Bool
    }

    private static let sessionsLock = NSLock()
    nonisolated(unsafe) private static var sessions: [Key: Entry] = [:]

    /// The session derived from `base`, and its delegate, created on first use; `ownConnections`: the one for requests
    /// that each need a connection of their own (a second pool of connections).
    static func session(for base: URLSession, ownConnections: Bool = false) -> (URLSession, TransferSession) {
        let key = Key(base: ObjectIdentifier(base), ownConnections: ownConnections)
        let (session, delegate, released) = sessionsLock.withLock { () -> (URLSession, TransferSession, [Key: Entry]) in
            if let entry = sessions[key], entry.base === base { return (entry.session, entry.delegate, [:]) }
            // A session keeps its delegate and threads until it is invalidated; its running tasks finish first.
            let released = sessions.filter { $0.value.base == nil }
            released.keys.forEach { sessions[$0] = nil }
            let delegate = TransferSession()
            delegate.base = base
            let configuration = TaskCancellation.derived(from: base.configuration)
            let session = URLSession(configuration: configuration, delegate: delegate, delegateQueue: CallbackQueue())
            sessions[key] = Entry(base: base, session: session, delegate: delegate)
            return (session, delegate, released)
        }
        released.values.forEach { $0.session.finishTasksAndInvalidate() }
        return (session, delegate)
    }

    private let lock = NSLock()
    /// By task object, not `taskIdentifier`, whose getter is not free on Linux.
    private var handlers: [ObjectIdentifier: TransferSink] = [:]

    /// Routes `task`'s callbacks to `handler` until the task completes. Call before `resume()`.
    private func register(_ handler: TransferSink, for task: URLSessionTask) {
        lock.withLock { handlers[ObjectIdentifier(task)] = handler }
    }

    private func handler(for task: URLSessionTask, removing: Bool = false) -> TransferSink? {
        lock.withLock { removing ? handlers.removeValue(forKey: ObjectIdentifier(task)) : handlers[ObjectIdentifier(task)] }
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
        handler?.measure(arrived: response)
        // A refused response has been cancelled by its transfer already. corelibs ignores `.cancel` (a 3 GiB body
        // then arrived whole), and in probes a task answered with it often ignored the cancel that followed as well;
        // one answered `.allow` stopped within 44 ms of it. So `.allow` on every platform.
        _ = handler?.shouldAccept(response)
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        let handler = handler(for: dataTask)
        handler?.measure(received: data.count)
        handler?.didReceive(data)
    }

    /// The body from its start, for a request the transport sends again. On Linux libcurl asks only to send the request
    /// again on a fresh connection after a reused one died before any answer: the whole body when the request may be
    /// sent twice, else a body that stops the transfer (see `SentBody`). On Apple platforms (after a 307 or 308, or an
    /// authentication challenge) a body Requests can read again is given; for a stream of the caller's own, the
    /// caller's delegate is asked, and otherwise the task fails.
    func urlSession(_ session: URLSession, task: URLSessionTask, needNewBodyStream completionHandler: @escaping @Sendable (InputStream?) -> Void) {
        let handler = handler(for: task)
        if let again = handler?.bodyToSendAgain() {
            completionHandler(again)
        } else if SentBody.onlyLostConnectionsAskForTheBody {
            handler?.refuseResend()
            completionHandler(SentBody.refusal())
        } else if let reopened = task.originalRequest?.httpBodyStream.flatMap(MultipartFormData.reopenedStream) {
            completionHandler(reopened)
        } else if let caller = CallerDelegate(base) {
            caller.newBodyStream(for: task, completionHandler)
        } else {
            completionHandler(nil)
        }
    }

    /// The request's ``RedirectPolicy`` rules on each redirect (URLSession on Linux would forward every header to
    /// another host, and turn a redirect to `file:` into a path on the first one); then the caller's session delegate
    /// has the last word on a redirect Requests allows, as it would without Requests, and what it returns is held to
    /// the same rules (no other scheme, no sensitive header to another origin).
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
        let request = SentBody.redirect(request)
        // This runs on the session's work queue (Linux, see `CallbackQueue`) or callback queue, and the ruling may call
        // user code (a custom policy, the monitors), which must not hold it up. The answer may come from any thread;
        // a cancel waits for it (Foundation on Linux crashes on an answer that comes after a cancel).
        TaskCancellation.beginRedirectRuling(of: task)
        let caller = CallerDelegate(base)
        // Once, whatever the caller's delegate does.
        let answer = FirstAnswer<URLRequest?> { decided in
            completionHandler(decided)
            TaskCancellation.endRedirectRuling(of: task)
        }.give
        // A 307 or 308 with a body: the operation sends it again itself (see `RedirectResend`).
        let follow: @Sendable (URLRequest?) -> Void = { decided in
            guard let decided, RedirectResend.isNeeded(for: response, of: task, to: decided) else { return answer(decided) }
            handler.resendAfterCompletion(decided)
            answer(nil)
        }
        DispatchQueue.global().async {
            let previousURL = task.currentRequest?.url ?? response.url
            guard let redirected = handler.willRedirect(response, to: request, from: previousURL) else { return answer(nil) }
            let asked = caller?.redirect(response, to: redirected, of: task) { decided in
                follow(decided.flatMap { handler.enforceRules(on: $0, from: previousURL) })
            }
            if asked != true { follow(redirected) }
        }
    }

    /// Every challenge goes to the caller's session delegate, on its queue, as Foundation would route it (see
    /// `CallerDelegate`), so certificate pinning and client certificates written there apply; without a caller's
    /// delegate, the default handling. For HTTP authentication (Basic, Digest) the answer is then made to end the way
    /// it ends on Apple platforms everywhere: corelibs hangs on `.performDefaultHandling` without a credential,
    /// crashes on `.useCredential` without one, and cancels on `.rejectProtectionSpace`, where Apple platforms
    /// deliver the 401. So those answers use default handling's credential (the URL's, else the storage's), once, or
    /// else cancel the task and end the attempt with the challenge's response. Others pass as they are.
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        let transfer = handler(for: task)
        let storage = session.configuration.urlCredentialStorage
        let isHTTPAuthentication = Self.httpAuthenticationMethods.contains(challenge.protectionSpace.authenticationMethod)
        let failureResponse = challenge.failureResponse as? HTTPURLResponse
        let asked = Handed(values: (challenge, storage))
        // Once, whatever the caller's delegate does.
        let once = FirstAnswer<Handed<(URLSession.AuthChallengeDisposition, URLCredential?)>> { answered in
            let (disposition, credential) = answered.values
            if !isHTTPAuthentication || disposition == .cancelAuthenticationChallenge {
                if disposition == .useCredential, credential != nil { transfer?.challengeWasAnswered() }
                completionHandler(disposition, credential)
                return
            }
            // Only default handling falls back on a stored credential: a rejected protection space gets none.
            let fallback = disposition == .performDefaultHandling ? Self.defaultCredential(for: asked.values.0, in: asked.values.1) : nil
            if let credential = disposition == .useCredential ? credential : fallback {
                transfer?.challengeWasAnswered()
                completionHandler(.useCredential, credential)
            } else {
                if let failureResponse { transfer?.challengeWentUnanswered(failureResponse) }
                completionHandler(.cancelAuthenticationChallenge, nil)
            }
        }
        let answer: @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void = { once.give(Handed(values: ($0, $1))) }
        // Off this queue either way: the answer suspends and resumes the task, which waits for the session's work queue
        // on Linux.
        guard let caller = CallerDelegate(base) else {
            DispatchQueue.global().async { answer(.performDefaultHandling, nil) }
            return
        }
        caller.challenge(challenge, of: task, answer: answer)
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

    /// Apple platforms deliver the task's metrics before its completion; Linux gathers none. The caller's session
    /// delegate gets them too, as it would without Requests.
    func urlSession(_ session: URLSession, task: URLSessionTask, didFinishCollecting metrics: URLSessionTaskMetrics) {
        let last = metrics.transactionMetrics.last
        handler(for: task)?.measure(reusedConnection: last?.isReusedConnection, connection: last.map(TransferMetrics.ConnectionPhases.init))
        CallerDelegate(base)?.collected(metrics, of: task)
    }

    /// One cache: an answer the ``ResponseCache`` manages is not kept by the platform's `URLCache` too (on Apple
    /// platforms a request that ignores the local cache still fills it). Others are kept as without Requests.
    func urlSession(
        _ session: URLSession, dataTask: URLSessionDataTask, willCacheResponse proposedResponse: CachedURLResponse,
        completionHandler: @escaping @Sendable (CachedURLResponse?) -> Void
    ) {
        completionHandler(handler(for: dataTask)?.rules.keepsOutOfPlatformCache == true ? nil : proposedResponse)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        guard let handler = handler(for: task, removing: true) else { return }
        let error = handler.reported(error)
        if !handler.resendsAfterLostConnection(error) {
            handler.didComplete(response: handler.finalResponse(of: task), error: error)
        }
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
