#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A request's body as the transport hands it to URLSession, and the one rule on sending it a second time.
///
/// **Why it is handed over as it is (Linux).** When a kept-alive connection that libcurl reuses dies before any byte
/// of the answer (a server that read the request and died, a load balancer closing an idle connection as the request
/// leaves), libcurl sends the request again by itself on a fresh connection, and first asks for the body from its
/// start (its seek callback). swift-corelibs-foundation can only start a body again that is a stream: for `Data` or a
/// file it sends the headers and no body, so the server waits for the body and the request for the answer, until its
/// timeout; and it crashes (`NativeProtocol.swift:326`) when the delegate answers that request with a stream. So on
/// Linux every body goes as a stream over the same bytes, with its `Content-Length` (and `Transfer-Encoding` blanked,
/// which makes libcurl send the bytes as they are, not chunked), and the delegate's `needNewBodyStream` answers with a
/// new stream over the same bytes: the whole body, sent again.
///
/// **Only when sending it twice is safe** (``mayBeSentTwice(_:)``): the server may have applied the first. A
/// request that is not never rides a reused connection (``needsAConnectionOfItsOwn(mayBeSentTwice:isResentAfterLostConnection:)``);
/// should libcurl still ask for its body (a server that ignored `Connection: close`), it gets a stream that fails at
/// its first read: libcurl stops at once, before any of the body leaves (the server sees the headers of a request
/// whose body never comes), and the attempt ends with `URLError(.networkConnectionLost)` (see ``refusedResend(_:)``),
/// which a ``RetryPolicy`` retries only for the methods it is told to. On Apple platforms bodies are handed over as before (`Data`, a file, a stream), and the system
/// sends them again itself where it may.
enum SentBody: @unchecked Sendable {
    /// Bytes in memory.
    case data(Data)
    /// A file, never read whole into memory.
    case file(URL, length: Int64)
    /// A multipart form's stream (or a caller's own), with its length when known.
    case stream(InputStream, length: Int64?)

    /// The body `request` carries itself: its `httpBody` (not empty), else its `httpBodyStream`.
    static func of(_ request: URLRequest) -> SentBody? {
        if let data = request.httpBody, !data.isEmpty { return .data(data) }
        return request.httpBodyStream.map { .stream($0, length: nil) }
    }

    /// Whether a request may be sent twice without harm: an idempotent method (RFC 9110 §9.2.2: GET, HEAD, PUT,
    /// DELETE, OPTIONS, TRACE), or one that carries an `Idempotency-Key` (an outbox entry's, or the caller's own).
    static func mayBeSentTwice(_ request: URLRequest) -> Bool {
        let method = HTTPMethod(rawValue: (request.httpMethod ?? "GET").uppercased())
        return RetryPolicy.defaultRetryableMethods.contains(method) || request.value(forHTTPHeaderField: "Idempotency-Key") != nil
    }

    /// Whether a request must go on a connection of its own, never one kept alive from an earlier request (Linux): one
    /// that must not be sent twice. On a reused connection that dies before any answer, libcurl sends it again by
    /// itself: a body-less one without asking anything, so nothing could refuse it; one with a body after the request
    /// line and headers, before it asks for the body, so a refusal still leaves the server the head of a request whose
    /// body never comes, and a request the server never read (a load balancer closing an idle connection as it
    /// leaves) fails. So it goes through a second session of the caller's configuration, with `Connection: close`: the
    /// server closes the connection after its answer, and no later request rides it. The cost is a new connection
    /// (and TLS handshake) for each such request on Linux; a request with an `Idempotency-Key` keeps its connections.
    ///
    /// A request sent again by the operation after its connection broke before any answer (see
    /// `LostConnectionResend`) also goes there: another idle connection of the pool may be as dead as the first.
    static func needsAConnectionOfItsOwn(mayBeSentTwice: Bool, isResentAfterLostConnection: Bool) -> Bool {
        #if canImport(FoundationNetworking)
        return !mayBeSentTwice || isResentAfterLostConnection
        #else
        return false
        #endif
    }

    /// The task that sends `request` with this body on `session`: a data task, or an upload task where the platform
    /// sends the body from its own source (`asUpload`, Apple platforms).
    func task(for request: URLRequest, on session: URLSession, asUpload: Bool) -> URLSessionTask {
        var request = request
        #if canImport(FoundationNetworking)
        request.httpBody = nil
        request.httpBodyStream = freshStream()
        if let length {
            request.setValue(String(length), forHTTPHeaderField: "Content-Length")
            // libcurl reads a header list entry whose value is blank as "do not send this header", and then sends a
            // body of unknown length as it comes instead of chunked; URLSession passes a single space through.
            request.setValue(" ", forHTTPHeaderField: "Transfer-Encoding")
        }
        return session.dataTask(with: request)
        #else
        switch self {
        case let .data(data):
            guard asUpload else {
                request.httpBody = data
                return session.dataTask(with: request)
            }
            request.httpBody = nil
            return session.uploadTask(with: request, from: data)
        case let .file(file, _):
            return session.uploadTask(with: request, fromFile: file)
        case let .stream(stream, _):
            request.httpBody = nil
            request.httpBodyStream = stream
            return session.dataTask(with: request)
        }
        #endif
    }

    /// `request`, a redirect URLSession proposes, without what ``task(for:on:asUpload:)`` added for the body: corelibs
    /// copies the redirected request, its used-up body stream and headers included, and follows it without a body, so
    /// a redirect that kept them would announce a `Content-Length` the server then waits for. (A redirect that keeps
    /// the method of a request with a body is not followed by the transport: see `RedirectResend`.)
    static func redirect(_ request: URLRequest) -> URLRequest {
        var request = request
        request.httpBodyStream = nil
        if request.httpBody == nil { request.setValue(nil, forHTTPHeaderField: "Content-Length") }
        if request.value(forHTTPHeaderField: "Transfer-Encoding") == " " { request.setValue(nil, forHTTPHeaderField: "Transfer-Encoding") }
        return request
    }

    /// The body's length, when known.
    var length: Int64? {
        switch self {
        case let .data(data): Int64(data.count)
        case let .file(_, length): length
        case let .stream(_, length): length
        }
    }

    /// A new stream over the whole body, or `nil` when it cannot be read again (a stream of the caller's own, or a
    /// multipart form's on Linux, whose file is gone once read).
    func freshStream() -> InputStream? {
        #if canImport(FoundationNetworking)
        switch self {
        case let .data(data): return RestartableBodyStream(.data(data), length: data.count)
        case let .file(file, length): return RestartableBodyStream(.file(file), length: Int(length))
        case let .stream(stream, _): return stream.streamStatus == .notOpen ? stream : MultipartFormData.reopenedStream(stream)
        }
        #else
        switch self {
        case let .data(data): return InputStream(data: data)
        case let .file(file, _): return InputStream(url: file)
        case let .stream(stream, _): return stream.streamStatus == .notOpen ? stream : MultipartFormData.reopenedStream(stream)
        }
        #endif
    }

    /// Whether the operation can send this body again on a new task: bytes in memory or a file, or an upload's body,
    /// which the operation makes again (a multipart form is encoded again); not a stream of the caller's own.
    func canBeSentAgain(asUpload: Bool) -> Bool {
        if case .stream = self { return asUpload }
        return true
    }

    /// Whether the transport asks for a body again only to send its request again after a kept-alive connection died
    /// before any answer (Linux: libcurl's retry; corelibs follows no redirect and answers no challenge by sending the
    /// body again through this). On Apple platforms it also asks after a 307 or 308 or an authentication challenge,
    /// when the server has refused the request.
    static var onlyLostConnectionsAskForTheBody: Bool {
        #if canImport(FoundationNetworking)
        return true
        #else
        return false
        #endif
    }

    /// What the transport gets for a body it must not send again: on Linux a stream that stops the transfer at its
    /// first read (libcurl otherwise goes on with the headers and no body, and waits for an answer that never comes).
    static func refusal() -> InputStream? {
        #if canImport(FoundationNetworking)
        return RefusedBodyStream()
        #else
        return nil
        #endif
    }

    /// The error that ends an attempt whose body libcurl asked for again and was refused (`error` is libcurl's
    /// "operation aborted by callback").
    static func refusedResend(_ error: Error) -> URLError {
        URLError(
            .networkConnectionLost,
            userInfo: [
                NSLocalizedDescriptionKey:
                    "The connection was lost before any answer arrived. The request is not safe to send twice, so it was not sent again.",
                NSUnderlyingErrorKey: error,
            ])
    }
}

#if canImport(FoundationNetworking)
/// The body handed to libcurl for a request that must not be sent twice: it fails at its first read, which makes
/// libcurl stop the transfer before any of the body is sent.
final class RefusedBodyStream: InputStream {
    private let lock = NSLock()
    private var status = Stream.Status.notOpen

    init() {
        super.init(data: Data())
    }

    override func open() { lock.withLock { status = .open } }
    override func close() { lock.withLock { status = .closed } }
    override var streamStatus: Stream.Status { lock.withLock { status } }
    override var streamError: Error? { URLError(.networkConnectionLost) }
    override var hasBytesAvailable: Bool { true }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        lock.withLock { status = .error }
        return -1
    }

    override func getBuffer(_ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length: UnsafeMutablePointer<Int>) -> Bool {
        false
    }
}
#endif
