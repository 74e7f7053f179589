#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Which transport carries an attempt, decided here and nowhere else (issue 51).
///
/// A session a replay answers (`ReplaySessions`, `RequestsTesting`'s HAR replay) sends nothing: a ``ReplayTask``
/// reports the recorded answers to the sink, for every request kind. Otherwise:
/// URLSession everywhere, except on Linux for a caller who opts in to libcurl (``LinuxTransport/current``, whose
/// default `REQUESTS_TRANSPORT=curl` in the environment sets; opt-in as a policy, since it does not consult the
/// session's `URLCache`), where a transfer goes on libcurl directly when nothing it needs is URLSession's alone:
/// - a request of any kind (data, upload, download, stream) to an `http` or `https` URL, without a body stream of the
///   request's own;
/// - a session without a delegate of the caller's (which would be asked about challenges, redirects and metrics)
///   whose `protocolClasses` are Foundation's own (a stub such as `RequestsTesting`'s keeps URLSession);
/// - no credentials to answer a challenge with: none in the URL, none in the session's credential storage.
/// The session's configuration still applies: extra headers, cookies, the request timeout, connections per host. Its
/// `URLCache` does not (``ResponseCache`` is the cache on both).
enum Transport {
    /// The task of an attempt whose answer goes to `sink`: kept in memory, written to a file, or streamed.
    static func dataTask(for request: URLRequest, on session: URLSession, sink: TransferSink) -> any TransportTask {
        if let source = ReplaySessions.source(for: session) {
            let body = SentBody.of(request)
            let task = ReplayTask(sending: request, body: body, source: source, sink: sink)
            sink.attach(task, body: body, mayBeSentTwice: SentBody.mayBeSentTwice(request), canBeSentAgain: true)
            return task
        }
        #if os(Linux)
        if let loop = CurlSessions.loop(for: session, request: request) {
            let task = CurlTask(sending: request, on: loop, configuration: session.configuration, sink: sink)
            sink.attach(task, body: SentBody.of(request), mayBeSentTwice: SentBody.mayBeSentTwice(request), canBeSentAgain: true)
            return task
        }
        #endif
        return TransferSession.task(on: session, handler: sink, sending: request)
    }

    /// The task of an upload attempt that sends `body` (see `SentBody`), whose answer `sink` keeps in memory.
    static func uploadTask(for request: URLRequest, body: SentBody, on session: URLSession, sink: TransferSink) -> any TransportTask {
        if let source = ReplaySessions.source(for: session) {
            let task = ReplayTask(sending: request, body: body, source: source, sink: sink)
            sink.attach(task, body: body, mayBeSentTwice: SentBody.mayBeSentTwice(request), canBeSentAgain: body.canBeSentAgain(asUpload: true))
            return task
        }
        #if os(Linux)
        if let loop = CurlSessions.loop(for: session, request: request) {
            let task = CurlTask(sending: request, body: body, on: loop, configuration: session.configuration, sink: sink)
            sink.attach(
                task, body: body, mayBeSentTwice: SentBody.mayBeSentTwice(request), canBeSentAgain: body.canBeSentAgain(asUpload: true))
            return task
        }
        #endif
        return TransferSession.task(on: session, handler: sink, sending: request, body: body, asUpload: true)
    }
}
