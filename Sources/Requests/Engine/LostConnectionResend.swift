#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A request whose connection broke before any byte of the answer, which the transport sends once more, at once, on a
/// new task (so on another connection), when it may be sent twice (see `SentBody.mayBeSentTwice(_:)`).
///
/// libcurl does this itself for a connection it reused that died on the way back (Linux; see `SentBody`), but not for
/// one that broke while the body was being sent (a server that closes a kept-alive connection as the request
/// arrives: "Send failure: Broken pipe", reported as a lost connection), nor for a fresh connection. So the
/// operation does it, within the same attempt, like a redirect it sends again (see `RedirectResend`): the
/// ``RetryPolicy`` is not asked and no attempt is used up, since the server answered nothing. Once per attempt; only
/// before any redirect of the attempt (the request to send again is then the one the attempt sent). Whatever the
/// second task ends with is the attempt's outcome.
struct LostConnectionResend: Error {
    /// What the first task ended with: `networkConnectionLost` or `badServerResponse` (libcurl's "Empty reply").
    let error: Error

    /// Whether a task that ended with `error` and no response may be sent again this way.
    static func covers(_ error: Error?) -> Bool {
        let code = (error as? URLError)?.code
        return code == .networkConnectionLost || code == .badServerResponse
    }

    /// libcurl's words for a connection that broke under a transfer, which corelibs reports as `URLError.unknown` (−1)
    /// unless `connect` itself failed with `ECONNRESET`: a failed send ("Send failure: Broken pipe", "Failed sending
    /// data to the peer"), a failed receive ("Recv failure: Connection reset by peer"). Apple platforms report
    /// `networkConnectionLost`; so does Requests, everywhere, so that a ``RetryPolicy`` decides the same way.
    static func brokenConnection(_ error: Error) -> Error? {
        guard let urlError = error as? URLError, urlError.code == .unknown else { return nil }
        let text = urlError.localizedDescription
        guard ["Send failure", "Failed sending data", "Recv failure", "Connection died"].contains(where: { text.hasPrefix($0) }) else { return nil }
        var info = urlError.userInfo
        info[NSUnderlyingErrorKey] = urlError
        return URLError(.networkConnectionLost, userInfo: info)
    }
}

extension NetworkRequestOperation {
    /// Sends the attempt's request again on a new task, with its whole body, after `resend`.
    func sendAgain(_ resend: LostConnectionResend) {
        guard let (sent, credential) = ifNotCompleted({ (run.sentRequest, run.credential) }), var next = sent else { return }
        if isUpload {
            // The upload's body is made again from the request's `uploadBody` (a multipart form's stream is read once).
            next.httpBody = nil
            next.httpBodyStream = nil
            guard prepareTransfer(&next) != nil else { return }
        }
        transmit(next, credential: credential, afterLostConnection: true)
    }
}
