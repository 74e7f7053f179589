#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The caller's session and its delegate, asked what Foundation would ask it about a task of its own, on the
/// session's delegate queue, for the few callbacks Requests passes on (challenges, redirects it allowed, replacement
/// body streams, metrics).
///
/// What to ask and when is decided by `TransferSession`, the same on every platform. Only the call differs: Apple's
/// delegate methods are optional (a delegate without one gets what Foundation does without it), while on Linux every
/// method has a default implementation that does what Foundation does without it.
struct CallerDelegate: @unchecked Sendable {
    /// The caller's session: what its delegate is told the task belongs to.
    let session: URLSession
    private let delegate: URLSessionDelegate

    /// `nil` when the session is gone or has no delegate: then Foundation's default applies.
    init?(_ session: URLSession?) {
        guard let session, let delegate = session.delegate else { return nil }
        (self.session, self.delegate) = (session, delegate)
    }

    private var taskDelegate: URLSessionTaskDelegate? { delegate as? URLSessionTaskDelegate }

    /// Asks for the answer to `challenge`, as Foundation routes it; a delegate without a method for it gets
    /// `.performDefaultHandling`.
    func challenge(
        _ challenge: URLAuthenticationChallenge, of task: URLSessionTask,
        answer: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        onDelegateQueue(with: (challenge, task)) { challenge, task in
            #if canImport(FoundationNetworking)
            // corelibs asks the task-level method only.
            taskDelegate?.urlSession(session, task: task, didReceive: challenge, completionHandler: answer) ?? answer(.performDefaultHandling, nil)
            #else
            // Apple's URLSession asks the session-level method first for these, when the delegate has one.
            let sessionLevel = [
                NSURLAuthenticationMethodServerTrust, NSURLAuthenticationMethodClientCertificate, NSURLAuthenticationMethodNTLM, NSURLAuthenticationMethodNegotiate,
            ]
            if sessionLevel.contains(challenge.protectionSpace.authenticationMethod), delegate.urlSession?(session, didReceive: challenge, completionHandler: answer) != nil {
                return
            }
            taskDelegate?.urlSession?(session, task: task, didReceive: challenge, completionHandler: answer) ?? answer(.performDefaultHandling, nil)
            #endif
        }
    }

    /// Asks whether to follow `request`, a redirect Requests allowed; a delegate without a say follows it. Returns
    /// `false` (and asks nothing) when the delegate cannot have a say.
    func redirect(
        _ response: HTTPURLResponse, to request: URLRequest, of task: URLSessionTask,
        decide: @escaping @Sendable (URLRequest?) -> Void
    ) -> Bool {
        guard taskDelegate != nil else { return false }
        onDelegateQueue(with: (response, request, task)) { response, request, task in
            guard let taskDelegate else { return decide(request) }
            #if canImport(FoundationNetworking)
            taskDelegate.urlSession(session, task: task, willPerformHTTPRedirection: response, newRequest: request, completionHandler: decide)
            #else
            taskDelegate.urlSession?(session, task: task, willPerformHTTPRedirection: response, newRequest: request, completionHandler: decide)
                ?? decide(request)
            #endif
        }
        return true
    }

    /// Asks for a new body stream for `task`; a delegate without one gets `nil` (the task fails).
    func newBodyStream(for task: URLSessionTask, _ provide: @escaping @Sendable (InputStream?) -> Void) {
        onDelegateQueue(with: task) { task in
            #if canImport(FoundationNetworking)
            taskDelegate?.urlSession(session, task: task, needNewBodyStream: provide) ?? provide(nil)
            #else
            taskDelegate?.urlSession?(session, task: task, needNewBodyStream: provide) ?? provide(nil)
            #endif
        }
    }

    /// Hands over `task`'s metrics (Apple platforms deliver them; Linux gathers none).
    func collected(_ metrics: URLSessionTaskMetrics, of task: URLSessionTask) {
        onDelegateQueue(with: (metrics, task)) { metrics, task in
            #if canImport(FoundationNetworking)
            taskDelegate?.urlSession(session, task: task, didFinishCollecting: metrics)
            #else
            taskDelegate?.urlSession?(session, task: task, didFinishCollecting: metrics)
            #endif
        }
    }

    /// Runs `body` with `values` on the session's delegate queue. Foundation's types are thread-safe, but not all
    /// are marked `Sendable` in every SDK.
    private func onDelegateQueue<Values>(with values: Values, _ body: @escaping @Sendable (Values) -> Void) {
        let handed = Handed(values: values)
        session.delegateQueue.addOperation { body(handed.values) }
    }
}

/// Values handed to another queue or closure. Foundation's types are thread-safe, but not all are marked
/// `Sendable` in every SDK.
struct Handed<Values>: @unchecked Sendable {
    let values: Values
}
