#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// What a ``CurlTransfer`` tells, always on its ``CurlLoop``'s thread: the response head once (interim 1xx heads are
/// skipped), the body in pieces, then the end, exactly once.
protocol CurlTransferClient: AnyObject {
    /// `total` body bytes have been handed to libcurl, of `expected` (-1 when unknown).
    func curlTransfer(_ transfer: CurlTransfer, didSend total: Int64, expected: Int64)
    func curlTransfer(_ transfer: CurlTransfer, didReceive response: HTTPURLResponse)
    /// A piece of the body; `false` when the client does not take it now. The transfer then pauses (libcurl keeps the
    /// piece and stops reading the socket) and offers the same piece again after ``CurlLoop/resume(_:)``.
    func curlTransfer(_ transfer: CurlTransfer, didReceive data: Data) -> Bool
    /// `nil` when the response arrived whole.
    func curlTransfer(_ transfer: CurlTransfer, didCompleteWith error: URLError?)
}

/// One request on libcurl: an easy handle set up from a `URLRequest`, its body sent from memory (rewound when
/// libcurl sends it again on a new connection, so a re-send carries the whole body), and its response head parsed
/// from the header lines. Only its ``CurlLoop``'s thread touches it once added.
final class CurlTransfer: @unchecked Sendable {
    /// The request as the attempt made it, before the session's headers and cookies (``apply(_:)``): what a
    /// redirect starts from, so that the next URL gets the session's cookies for itself.
    let request: URLRequest
    /// The header fields sent: the request's, then the session's (``apply(_:)``). Kept apart from `request`, whose
    /// setters copy the whole request each time on Linux.
    private var fields: [String: String]
    /// The session's proxy for this request (see ``CurlProxy``); `nil`: libcurl's rule from the environment.
    private var proxy: String?
    /// Whether the request goes on a new connection that no later request reuses.
    let freshConnection: Bool
    private(set) var easy: LibCurl.Handle?
    /// Set before the transfer is added to its loop; released once it has ended.
    var client: CurlTransferClient?
    private weak var loop: CurlLoop?
    /// Kept alive while the handle points at them.
    private var headerList: OpaquePointer?
    /// What the request sends: bytes in memory, or a stream (a file's, a multipart form's) with a way to open it
    /// again from its start, for a re-send.
    enum Body {
        case data(Data)
        case stream(length: Int64?, open: () -> InputStream?)
    }

    private let body: Body
    private var bodyOffset = 0
    /// The open stream of a `.stream` body.
    private var bodyStream: InputStream?
    private var head = ResponseHead()
    /// Seconds without a byte either way after which the transfer fails with `timedOut`, as URLSession's request
    /// timeout; and when the last byte moved (the loop's thread).
    private(set) var idleTimeout: TimeInterval
    private(set) var lastActivity = DispatchTime.now()
    /// Whether the client held a piece back and the transfer waits for ``CurlLoop/resume(_:)``: no timeout runs
    /// meanwhile, as the wait is the client's, not the server's (the loop's thread).
    private(set) var isPaused = false
    /// Body bytes handed to libcurl, counted again when it rewinds to send them again.
    private(set) var bytesSent: Int64 = 0
    /// Whether the transfer rode a kept-alive connection, once it has ended (`nil` when libcurl did not say).
    private(set) var reusedConnection: Bool?
    /// How the transfer's own connection was opened, once it has ended; `nil` when it reused one or made none.
    private(set) var connectionPhases: TransferMetrics.ConnectionPhases?
    /// The request body's length: -1 when unknown, 0 for none.
    var bodyLength: Int64 {
        switch body {
        case let .data(data): Int64(data.count)
        case let .stream(length, _): length ?? -1
        }
    }
    private(set) var response: HTTPURLResponse?
    /// Whether ``response`` sets a cookie.
    private(set) var setsCookie = false
    private let finishedLock = NSLock()
    private var finished = false
    /// How a stop asked from another thread ends the transfer (under `finishedLock`): the callbacks see it at once
    /// and abort, before the loop's turn removes the handle, so that a stream stops reading within one piece.
    private var stopCode: URLError.Code?

    /// A transfer of `request`, sending `body`, or the request's own `httpBody` when `nil`.
    init(request: URLRequest, body: Body? = nil, freshConnection: Bool = false, client: CurlTransferClient? = nil) {
        self.request = request
        fields = request.allHTTPHeaderFields ?? [:]
        idleTimeout = Self.timeout(request.timeoutInterval)
        self.freshConnection = freshConnection
        self.client = client
        self.body = body ?? .data(request.httpBody ?? Data())
    }

    /// Adds what the session's configuration adds to every request: its extra headers (a field the request has
    /// wins), its cookies (unless the request sets `Cookie` itself) and its request timeout (a request that kept
    /// `URLRequest`'s default of 60 s takes the session's). Before the transfer is added to its loop.
    func apply(_ configuration: URLSessionConfiguration) {
        if let extra = configuration.httpAdditionalHeaders, !extra.isEmpty {
            for (name, value) in extra {
                guard let name = name as? String, field(named: name) == nil else { continue }
                fields[name] = String(describing: value)
            }
        }
        if field(named: "Cookie") == nil, let cookie = CurlCookies.header(for: request, from: configuration) {
            fields["Cookie"] = cookie
        }
        if request.timeoutInterval == 60 { idleTimeout = Self.timeout(configuration.timeoutIntervalForRequest) }
        proxy = request.url.flatMap { CurlProxy.setting(for: $0, in: configuration) }
    }

    /// The name under which `fields` holds the field `name` (in any case), if it does.
    private func field(named name: String) -> String? {
        fields.keys.first { $0.equalsIgnoringASCIICase(name) }
    }

    /// A request timeout as the loop applies it: 60 s when `interval` is not a positive, finite number.
    private static func timeout(_ interval: TimeInterval) -> TimeInterval {
        interval > 0 && interval.isFinite ? interval : 60
    }

    /// Creates and sets up the easy handle, or finishes with an error and returns `nil`. On the loop's thread.
    func start(curl: LibCurl, loop: CurlLoop) -> LibCurl.Handle? {
        self.loop = loop
        guard let url = request.url, let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            finish(.unsupportedURL, curl: curl)
            return nil
        }
        guard let easy = loop.takeHandle() else {
            finish(.cannotLoadFromNetwork, curl: curl)
            return nil
        }
        self.easy = easy
        let me = UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque())
        typealias Code = LibCurl.Code
        var ok = true
        func set(_ option: Int32, _ value: Int) { ok = ok && curl.easySetLong(easy, option, value) == 0 }
        func set(_ option: Int32, text: String) {
            ok = ok && text.withCString { curl.easySetPointer(easy, option, UnsafeRawPointer($0)) } == 0  // libcurl copies strings
        }
        func set(_ option: Int32, pointer: UnsafeRawPointer?) { ok = ok && curl.easySetPointer(easy, option, pointer) == 0 }
        set(Code.noSignal, 1)
        if freshConnection {
            set(Code.freshConnect, 1)
            set(Code.forbidReuse, 1)
        }
        set(Code.url, text: url.absoluteString)
        if let proxy { set(Code.proxy, text: proxy) }
        // The bit masks (deprecated in 7.85, which added the text forms) work on every libcurl this loads.
        set(Code.protocols, Code.httpAndHTTPS)
        set(Code.redirectProtocols, Code.httpAndHTTPS)
        set(Code.followLocation, 0)
        set(Code.acceptEncoding, text: "")
        set(Code.writeFunction, pointer: unsafeBitCast(curlWrite, to: UnsafeRawPointer.self))
        set(Code.writeData, pointer: me)
        set(Code.headerFunction, pointer: unsafeBitCast(curlHeader, to: UnsafeRawPointer.self))
        set(Code.headerData, pointer: me)
        // `idleTimeout`: seconds without a byte in either direction, as URLSession's request timeout. The loop checks
        // it (libcurl has whole seconds only, as a minimum speed).
        lastActivity = .now()
        let method = request.httpMethod?.uppercased() ?? "GET"
        if bodyLength != 0 || method == "POST" {
            set(Code.post, 1)
            // -1: sent chunked, as it comes.
            ok = ok && curl.easySetOffset(easy, Code.postFieldSizeLarge, bodyLength) == 0
            set(Code.readFunction, pointer: unsafeBitCast(curlRead, to: UnsafeRawPointer.self))
            set(Code.readData, pointer: me)
            set(Code.seekFunction, pointer: unsafeBitCast(curlSeek, to: UnsafeRawPointer.self))
            set(Code.seekData, pointer: me)
            if method != "POST" { set(Code.customRequest, text: method) }
        } else if method == "HEAD" {
            set(Code.noBody, 1)
        } else if method == "GET" {
            set(Code.httpGet, 1)
        } else {
            set(Code.customRequest, text: method)
        }
        // libcurl would wait for a 100 Continue before a large body; URLSession sends it at once.
        let expect = field(named: "Expect")
        if expect == nil { fields["Expect"] = "" }
        for (name, value) in fields {
            // "Name;" sends a field with an empty value; "Name:" would remove libcurl's own.
            let removesOwn = expect == nil ? name == "Expect" : name == expect
            let line = value.isEmpty && !removesOwn ? "\(name);" : "\(name): \(value)"
            headerList = line.withCString { curl.slistAppend(headerList, $0) }
        }
        if let headerList { set(Code.httpHeader, pointer: UnsafeRawPointer(headerList)) }
        guard ok else {
            finish(.cannotLoadFromNetwork, curl: curl)
            return nil
        }
        return easy
    }

    /// Asks the transfer to end with `code`: its callbacks abort from now on (any thread; the loop then removes it).
    func requestStop(_ code: URLError.Code) {
        finishedLock.withLock { stopCode = stopCode ?? code }
    }

    /// Whether a stop was asked (``requestStop(_:)``): a callback then aborts the transfer.
    private var isStopping: Bool {
        finishedLock.withLock { stopCode != nil }
    }

    /// Ends the transfer with libcurl's `result` (0: the response arrived whole).
    func finish(result: Int32, curl: LibCurl) {
        guard result != LibCurl.Result.ok.rawValue else { return end(nil, curl: curl) }
        if let stopCode = finishedLock.withLock({ stopCode }) { return finish(stopCode, curl: curl) }
        let code = Self.errorCode(for: result)
        end(urlError(code, text: curl.describe(result)), curl: curl)
    }

    /// Ends the transfer with `code`.
    func finish(_ code: URLError.Code, curl: LibCurl) {
        end(urlError(code, text: nil), curl: curl)
    }

    private func end(_ error: URLError?, curl: LibCurl) {
        let first: Bool = finishedLock.withLock {
            defer { finished = true }
            return !finished
        }
        guard first else { return }
        if let easy {
            var connections = 0
            if curl.easyGetInfo(easy, LibCurl.Code.connectionsMade, &connections) == 0 { reusedConnection = connections == 0 }
            if connections > 0 { connectionPhases = Self.phases(of: easy, curl: curl) }
            // Out of the multi handle by now, on the loop's thread (only a started transfer has a handle).
            if let loop { loop.giveBack(easy) } else { curl.easyCleanup(easy) }
        }
        easy = nil
        if let headerList { curl.slistFreeAll(headerList) }
        headerList = nil
        bodyStream?.close()
        bodyStream = nil
        let client = self.client
        self.client = nil
        client?.curlTransfer(self, didCompleteWith: error)
    }

    /// libcurl's timings of the connection `easy` opened, as ``TransferMetrics`` reports them; `nil` when it did not
    /// connect.
    private static func phases(of easy: LibCurl.Handle, curl: LibCurl) -> TransferMetrics.ConnectionPhases? {
        func microseconds(_ info: Int32) -> Int64 {
            var value: Int64 = 0
            return curl.easyGetInfo(easy, info, &value) == 0 ? value : 0
        }
        let (lookup, connect, tls) = (
            microseconds(LibCurl.Code.nameLookupTime), microseconds(LibCurl.Code.connectTime), microseconds(LibCurl.Code.appConnectTime)
        )
        guard connect > 0 else { return nil }
        return TransferMetrics.ConnectionPhases(
            domainLookup: Double(lookup) / 1e6, connect: Double(max(connect - lookup, 0)) / 1e6,
            secureConnection: tls > connect ? Double(tls - connect) / 1e6 : nil)
    }

    private func urlError(_ code: URLError.Code, text: String?) -> URLError {
        var info: [String: Any] = [:]
        if let url = request.url {
            info[NSURLErrorFailingURLErrorKey] = url
        }
        if let text { info[NSLocalizedDescriptionKey] = text }
        return URLError(code, userInfo: info)
    }

    /// The URLSession error for a libcurl result, as corelibs' URLSession reports the same failures.
    static func errorCode(for result: Int32) -> URLError.Code {
        switch LibCurl.Result(rawValue: result) {
        case .unsupportedProtocol: return .unsupportedURL
        case .badURL: return .badURL
        case .cannotResolveHost, .cannotResolveProxy: return .cannotFindHost
        case .cannotConnect: return .cannotConnectToHost
        case .timedOut: return .timedOut
        case .weirdServerReply: return .badServerResponse
        case .tooManyRedirects: return .httpTooManyRedirects
        case .sslConnectError: return .secureConnectionFailed
        case .peerFailedVerification: return .serverCertificateUntrusted
        case .badContentEncoding: return .cannotDecodeContentData
        case .sendFailRewind: return .requestBodyStreamExhausted
        case .abortedByCallback, .writeError: return .cancelled
        case .gotNothing, .partialFile, .sendError, .receiveError, .http2, .http2Stream, .readError:
            return .networkConnectionLost
        case .ok, .none: return .unknown
        }
    }

    // MARK: - Callbacks, on the loop's thread

    /// The transfer is about to be resumed: its idle timeout starts again.
    func willResume() {
        isPaused = false
        lastActivity = .now()
    }

    /// When the transfer times out unless a byte moves before.
    var idleDeadline: DispatchTime { lastActivity + idleTimeout }

    fileprivate func receivedBody(_ bytes: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let client, count > 0, let bytes else { return count }
        guard !isStopping else { return 0 }
        lastActivity = .now()
        guard client.curlTransfer(self, didReceive: Data(bytes: bytes, count: count)) else {
            isPaused = true
            return LibCurl.Code.writePause
        }
        return count
    }

    fileprivate func receivedHeaderLine(_ bytes: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let bytes, count > 0 else { return count }
        lastActivity = .now()
        let line = UnsafeRawBufferPointer(start: bytes, count: count)
        guard response == nil, let url = request.url else { return count }  // trailers after the head are ignored
        guard let complete = head.take(line), let response = complete.response(for: url) else { return count }
        self.response = response
        setsCookie = complete.setsCookie
        client?.curlTransfer(self, didReceive: response)
        return count
    }

    fileprivate func readBody(into buffer: UnsafeMutablePointer<CChar>?, capacity: Int) -> Int {
        guard let buffer, capacity > 0 else { return 0 }
        guard !isStopping else { return LibCurl.Code.readAbort }
        let count: Int
        switch body {
        case let .data(data):
            count = min(capacity, data.count - bodyOffset)
            guard count > 0 else { return 0 }
            data.withUnsafeBytes { source in
                if let base = source.baseAddress {
                    UnsafeMutableRawPointer(buffer).copyMemory(from: base + bodyOffset, byteCount: count)
                }
            }
        case let .stream(_, open):
            if bodyStream == nil {
                bodyStream = open()
                bodyStream?.open()
            }
            guard let stream = bodyStream else { return LibCurl.Code.readAbort }
            let read = UnsafeMutableRawPointer(buffer).withMemoryRebound(to: UInt8.self, capacity: capacity) {
                stream.read($0, maxLength: capacity)
            }
            guard read >= 0 else { return LibCurl.Code.readAbort }
            count = read
        }
        bodyOffset += count
        bytesSent += Int64(count)
        lastActivity = .now()
        if count > 0 { client?.curlTransfer(self, didSend: bytesSent, expected: bodyLength) }
        return count
    }

    /// Back to the body's start, for libcurl to send it again (a data body may go to any offset). A stream is opened
    /// again; one that cannot be refuses, and the transfer fails.
    fileprivate func seekBody(to offset: Int64, origin: Int32) -> Int32 {
        guard origin == SEEK_SET, offset >= 0 else { return LibCurl.Code.seekFail }
        switch body {
        case let .data(data):
            guard offset <= Int64(data.count) else { return LibCurl.Code.seekFail }
        case let .stream(_, open):
            guard offset == 0 else { return LibCurl.Code.seekFail }
            bodyStream?.close()
            bodyStream = open()
            guard let stream = bodyStream else { return LibCurl.Code.seekFail }
            stream.open()
        }
        bodyOffset = Int(offset)
        return LibCurl.Code.seekOK
    }
}

private func transfer(_ user: UnsafeMutableRawPointer?) -> CurlTransfer? {
    user.map { Unmanaged<CurlTransfer>.fromOpaque($0).takeUnretainedValue() }
}

private let curlWrite: LibCurl.DataCallback = { bytes, size, count, user in
    transfer(user)?.receivedBody(bytes, size * count) ?? 0
}

private let curlHeader: LibCurl.DataCallback = { bytes, size, count, user in
    transfer(user)?.receivedHeaderLine(bytes, size * count) ?? 0
}

private let curlRead: LibCurl.DataCallback = { buffer, size, count, user in
    transfer(user)?.readBody(into: buffer, capacity: size * count) ?? LibCurl.Code.readAbort
}

private let curlSeek: LibCurl.SeekCallback = { user, offset, origin in
    transfer(user)?.seekBody(to: offset, origin: origin) ?? LibCurl.Code.seekFail
}
#endif
