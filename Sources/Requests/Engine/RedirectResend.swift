#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A 307 or 308 redirect of a request with a body (or a 301 or 302 that keeps its method), which Requests sends again
/// itself, on every platform.
///
/// RFC 9110 §15.4.8–9: the method and the body must not change (§15.4.2–3: a 301 or 302 may turn a POST into a GET,
/// which corelibs and Apple do; any other method keeps its body). Apple's URLSession sends the body again, but on
/// Linux Foundation follows with the method and an empty body (`Content-Length: 0`), so a POST to a moved endpoint
/// silently posts nothing. So the transport never follows such a redirect: once the ``RedirectPolicy`` (and the
/// caller's session delegate) allowed it, the task completes with the 3xx, and the same attempt sends the allowed
/// request on a new task, with the body it sent: the same `httpBody`, or the upload's body made again (a multipart
/// form encoded again). A body stream of the request's own cannot be read twice: the 3xx is then the response.
/// The redirect counts as one (the limit, ``TransferMetrics/redirectCount``, the cache's rule for redirected answers).
struct RedirectResend: Error {
    /// The redirect as allowed: its URL, method and headers (sensitive ones removed for another origin).
    let request: URLRequest
    /// The 3xx.
    let response: URLResponse?
    /// Redirects followed so far in the attempt, this one included.
    let redirects: Int

    /// Whether `response`, redirecting `task` to `next` (as allowed), is one the transport must not follow: a 307 or
    /// 308 of a request with a body, to the same method (a caller's delegate that made it a GET wants no body).
    static func isNeeded(for response: HTTPURLResponse, of task: URLSessionTask, to next: URLRequest) -> Bool {
        // A 301 or 302 that keeps the method (a PUT, a DELETE; corelibs turns a POST into a GET) is followed with
        // its body too (RFC 9110 §15.4.2–3): corelibs would follow it without one.
        guard [301, 302, 307, 308].contains(response.statusCode) else { return false }
        let sent = task.originalRequest
        guard (next.httpMethod ?? "GET") == (sent?.httpMethod ?? "GET") else { return false }
        return sent?.httpBody != nil || sent?.httpBodyStream != nil || task is URLSessionUploadTask
    }
}

extension NetworkRequestOperation {
    /// Sends `resend`'s request on a new task of the same attempt, with the body the last task sent.
    func sendAgain(_ resend: RedirectResend) {
        guard let (sent, credential) = ifNotCompleted({ (run.sentRequest, run.credential) }), let sent else { return }
        var next = resend.request
        next.httpBodyStream = nil
        if isUpload {
            // The upload's body is made again from the request's `uploadBody`.
            guard prepareTransfer(&next) != nil else { return }
        } else if let body = sent.httpBody {
            next.httpBody = body
        } else {
            finishAttempt(body: .data(Data()), response: resend.response, error: nil)
            return
        }
        transmit(next, credential: credential, redirectsSoFar: resend.redirects)
    }
}
