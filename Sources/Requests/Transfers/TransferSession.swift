#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The delegate sessions that downloads and uploads run on. On Linux, byte counts arrive only through
/// session-delegate callbacks, and only for tasks created without a completion handler, so a transfer cannot
/// run on the caller's session as it is: it runs on a session Requests creates once per caller session, with that
/// session's configuration (headers, timeouts, cookies, cache, protocol classes) but this delegate. The caller
/// session's delegate still answers authentication challenges; its other callbacks are not called. Requests that
/// carry credentials run here too, so that a redirect to another origin does not receive them.
final class TransferSession: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, @unchecked Sendable {
    private struct Entry {
        weak var base: URLSession?
        let session: URLSession
        let delegate: TransferSession
    }

    /// The caller's session, whose delegate still answers authentication challenges (for example certificate
    /// pinning) for the tasks that run here.
    private weak var base: URLSession?

    private static let sessionsLock = NSLock()
    nonisolated(unsafe) private static var sessions: [ObjectIdentifier: Entry] = [:]

    /// The transfer session for `base`, and its delegate, created on first use.
    static func session(for base: URLSession) -> (URLSession, TransferSession) {
        sessionsLock.lock()
        defer { sessionsLock.unlock() }
        if let entry = sessions[ObjectIdentifier(base)], entry.base === base {
            return (entry.session, entry.delegate)
        }
        sessions = sessions.filter { $0.value.base != nil }
        let delegate = TransferSession()
        delegate.base = base
        // The caller's delegate queue, so that completions without a completion queue run where the caller's own
        // requests do; but a serial one, because each transfer's state lives on it.
        let queue: OperationQueue
        if base.delegateQueue.maxConcurrentOperationCount == 1 {
            queue = base.delegateQueue
        } else {
            queue = OperationQueue()
            queue.name = "Requests.transfers"
            queue.maxConcurrentOperationCount = 1
        }
        let session = URLSession(configuration: base.configuration, delegate: delegate, delegateQueue: queue)
        sessions[ObjectIdentifier(base)] = Entry(base: base, session: session, delegate: delegate)
        return (session, delegate)
    }

    private let lock = NSLock()
    private var handlers: [Int: any TransferHandler] = [:]

    /// Routes `task`'s callbacks to `handler` until the task completes. Call before `resume()`.
    func register(_ handler: any TransferHandler, for task: URLSessionTask) {
        lock.lock()
        defer { lock.unlock() }
        handlers[task.taskIdentifier] = handler
    }

    private func handler(for task: URLSessionTask, removing: Bool = false) -> (any TransferHandler)? {
        lock.lock()
        defer { lock.unlock() }
        return removing ? handlers.removeValue(forKey: task.taskIdentifier) : handlers[task.taskIdentifier]
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didSendBodyData bytesSent: Int64, totalBytesSent: Int64, totalBytesExpectedToSend: Int64) {
        handler(for: task)?.didSend(total: totalBytesSent, expected: totalBytesExpectedToSend)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        handler(for: dataTask)?.didReceive(data)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didWriteData bytesWritten: Int64, totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64) {
        handler(for: downloadTask)?.didWrite(total: totalBytesWritten, expected: totalBytesExpectedToWrite)
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        handler(for: downloadTask)?.didFinishDownloading(to: location)
    }

    /// A redirect to another origin (scheme, host or port) drops `Authorization`, `Proxy-Authorization` and
    /// `Cookie`: URLSession on Linux would send them to the new host.
    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest,
        completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        completionHandler(Self.redirect(request, from: task.currentRequest?.url ?? response.url))
    }

    static func redirect(_ request: URLRequest, from previous: URL?) -> URLRequest {
        func origin(_ url: URL?) -> String? {
            guard let url, let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased() else { return nil }
            return "\(scheme)://\(host):\(url.port ?? (scheme == "https" ? 443 : 80))"
        }
        guard origin(request.url) != origin(previous) || origin(previous) == nil else { return request }
        var request = request
        for field in ["Authorization", "Proxy-Authorization", "Cookie"] {
            request.setValue(nil, forHTTPHeaderField: field)
        }
        return request
    }

    func urlSession(
        _ session: URLSession,
        task: URLSessionTask,
        didReceive challenge: URLAuthenticationChallenge,
        completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
    ) {
        guard let base, let delegate = base.delegate else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        #if canImport(FoundationNetworking)
        // corelibs raises no server-trust or client-certificate challenges; the rest are per task.
        guard let taskDelegate = delegate as? URLSessionTaskDelegate else {
            completionHandler(.performDefaultHandling, nil)
            return
        }
        taskDelegate.urlSession(base, task: task, didReceive: challenge, completionHandler: completionHandler)
        #else
        // As URLSession does: a session-wide challenge goes to the session-level method when the delegate has
        // one (a pinning delegate often has only that), otherwise to the task-level one.
        let sessionWide = [
            NSURLAuthenticationMethodServerTrust, NSURLAuthenticationMethodClientCertificate,
            NSURLAuthenticationMethodNTLM, NSURLAuthenticationMethodNegotiate,
        ].contains(challenge.protectionSpace.authenticationMethod)
        if sessionWide, delegate.urlSession?(base, didReceive: challenge, completionHandler: completionHandler) != nil {
            return
        }
        (delegate as? URLSessionTaskDelegate)?
            .urlSession?(base, task: task, didReceive: challenge, completionHandler: completionHandler)
            ?? completionHandler(.performDefaultHandling, nil)
        #endif
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        handler(for: task, removing: true)?.didComplete(response: task.response, error: error)
    }
}

/// One transfer's callbacks, all on the transfer session's serial delegate queue.
protocol TransferHandler: AnyObject, Sendable {
    func didSend(total: Int64, expected: Int64)
    func didReceive(_ data: Data)
    func didWrite(total: Int64, expected: Int64)
    func didFinishDownloading(to location: URL)
    func didComplete(response: URLResponse?, error: Error?)
}

extension TransferHandler {
    func didSend(total: Int64, expected: Int64) {}
    func didReceive(_ data: Data) {}
    func didWrite(total: Int64, expected: Int64) {}
    func didFinishDownloading(to location: URL) {}
}
