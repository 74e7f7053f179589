import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A small, dependency-free HTTP/1.1 server on 127.0.0.1 for tests.
///
/// It binds an ephemeral port, serves each connection on its own thread with keep-alive,
/// offers built-in routes (`/json`, `/status/N`, `/delay/N`, `/echo`, `/bytes/N`, `/trickle/N`, `/ranged/N`, `/sink…`,
/// and faults under `/fault/…`: `close-mid-body` (a `Content-Length` larger than the body sent), `never-respond`,
/// `reset-before-headers`, `reset-mid-body`, `invalid-chunked`, `redirect-loop`, `html-error`, `html-page`,
/// `invalid-json`) and custom ones via ``route(_:handler:)``.
/// Any route accepts a `delay=N` query parameter (milliseconds). Faults of the connection itself, on the first request
/// of a connection or a later one on the same kept-alive connection, come from ``connectionPolicy``, which also records
/// what arrived (``arrivals``).
public final class LoopbackServer: @unchecked Sendable {
    /// A failed socket call while starting the server.
    public struct Error: Swift.Error, Sendable, Equatable, CustomStringConvertible {
        /// The name of the failing call, for example `"bind"`.
        public let syscall: String
        /// The `errno` value it left.
        public let errno: Int32

        /// A readable description, for example `bind failed: Address already in use (errno 98)`.
        public var description: String {
            "\(syscall) failed: \(String(cString: strerror(errno))) (errno \(errno))"
        }
    }

    /// The TCP port the server listens on.
    public let port: UInt16

    /// `http://127.0.0.1:PORT`.
    public let baseURL: URL

    let core: ServerCore

    /// Binds 127.0.0.1 on an ephemeral port (port 0) and starts accepting.
    /// Throws ``LoopbackServer/Error`` if `socket`, `bind`, `getsockname` or `listen` fail.
    public init() throws {
        let fd = socket(AF_INET, Sys.streamType, 0)
        guard fd >= 0 else { throw Error(syscall: "socket", errno: errno) }
        Sys.setOption(fd, SOL_SOCKET, SO_REUSEADDR)

        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = in_addr_t(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw Self.failure("bind", closing: fd) }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw Self.failure("getsockname", closing: fd) }
        guard listen(fd, 1024) == 0 else { throw Self.failure("listen", closing: fd) }

        port = UInt16(bigEndian: address.sin_port)
        baseURL = URL(string: "http://127.0.0.1:\(port)") ?? URL(fileURLWithPath: "/")
        core = ServerCore(listenFD: fd)
        core.startAccepting()
    }

    private static func failure(_ syscall: String, closing fd: Int32) -> Error {
        let error = Error(syscall: syscall, errno: errno)
        Sys.close(fd)
        return error
    }

    deinit {
        core.stop()
    }

    /// The URL for a path with an optional query, for example `url("/delay/50?x=1")`.
    /// The leading `/` is optional; characters that are not valid in a URL are percent-encoded.
    public func url(_ pathAndQuery: String) -> URL {
        Self.url(pathAndQuery, on: baseURL)
    }

    /// `baseURL` followed by `pathAndQuery`, percent-encoded where needed; for a server in another process.
    public static func url(_ pathAndQuery: String, on baseURL: URL) -> URL {
        let suffix = pathAndQuery.hasPrefix("/") ? pathAndQuery : "/" + pathAndQuery
        let text = baseURL.absoluteString + suffix
        if let url = URL(string: text) { return url }
        var allowed = CharacterSet.urlQueryAllowed
        allowed.insert(charactersIn: "?#")
        if let encoded = text.addingPercentEncoding(withAllowedCharacters: allowed), let url = URL(string: encoded) {
            return url
        }
        return baseURL
    }

    /// Closes the listening socket and every open connection, waking threads blocked in `accept`, `recv` or `poll`.
    /// Idempotent; `deinit` calls it. Connection threads may finish shortly after this returns.
    public func stop() {
        core.stop()
    }

    /// Registers a handler for an exact path (query excluded). Custom routes take precedence over built-ins.
    /// Thread-safe; may be called while serving. The handler runs on the connection's thread.
    public func route(_ path: String, handler: @escaping @Sendable (LoopbackRequest) -> LoopbackResponse) {
        core.withLock {
            core.streamRoutes[path] = nil
            core.resourceRoutes[path] = nil
            core.routes[path] = handler
        }
    }

    /// Registers a handler for an exact path whose response body is sent piece by piece (see ``LoopbackStream``).
    /// Replaces any route for `path`.
    public func stream(_ path: String, handler: @escaping @Sendable (LoopbackRequest) -> LoopbackStream) {
        core.withLock {
            core.routes[path] = nil
            core.resourceRoutes[path] = nil
            core.streamRoutes[path] = handler
        }
    }

    /// Serves a ``LoopbackResource`` at an exact path: a representation with `Range` / `If-Range` support and
    /// optional faults, to test resumable downloads. The handler runs for every request, so it can change the
    /// version or the cut between requests with state of its own. Replaces any route for `path`.
    public func resource(_ path: String, handler: @escaping @Sendable (LoopbackRequest) -> LoopbackResource) {
        core.withLock {
            core.routes[path] = nil
            core.streamRoutes[path] = nil
            core.resourceRoutes[path] = handler
        }
    }

    /// Answers the requests to `path` with `responses` in turn: the first request gets the first response,
    /// the second the second, and every request after the last gets the last again. For example a 503 with
    /// `Retry-After: 1`, then a 200. Replaces any route for `path`; ``requestCount(path:)`` counts the attempts.
    public func script(_ path: String, _ responses: [LoopbackResponse]) {
        let script = ResponseScript(responses)
        route(path) { _ in script.next() }
    }

    /// Guards `path` with bearer tokens that `refreshPath` issues: `path` answers `response` to a request that
    /// carries `Authorization: Bearer <the last token issued>`, and 401 (with `WWW-Authenticate: Bearer`) to any
    /// other, so it answers 401 until `refreshPath` has been hit. Each request to `refreshPath` issues a new token,
    /// `token-1`, `token-2`, …, answered as `{"token":"token-N"}` after `refreshDelayMilliseconds`.
    public func protect(
        _ path: String,
        refreshPath: String,
        response: LoopbackResponse = .text("ok"),
        refreshDelayMilliseconds: Int = 0
    ) {
        let issuer = TokenIssuer()
        route(refreshPath) { _ in
            var answer = LoopbackResponse.json("{\"token\":\"\(issuer.issue())\"}")
            answer.delayMilliseconds = refreshDelayMilliseconds
            return answer
        }
        route(path) { request in
            guard let token = issuer.current, request.headers["authorization"] == "Bearer \(token)" else {
                return LoopbackResponse(status: 401, headers: ["WWW-Authenticate": "Bearer"])
            }
            return response
        }
    }

    /// The number of requests fully received for `path` (query excluded), counted before the handler runs or a delay starts.
    public func requestCount(path: String) -> Int {
        core.withLock { core.requestCounts[path] ?? 0 }
    }

    /// The body bytes written to the socket for requests to `path` (query excluded), over all its requests.
    /// Only ``LoopbackResource`` bodies (``resource(_:handler:)`` and `/ranged/N`) are counted; other routes add 0.
    /// A piece is counted as it is handed to the socket, so the count is complete by the time a client has the
    /// whole body (or sees a cut); bytes the socket refused, because the client went away, are taken off again.
    public func bodyBytesSent(path: String) -> Int {
        core.withLock { core.bodyBytes[path] ?? 0 }
    }

    /// An endless body (`/hostile/endless`): how many of its bytes the server has sent, and when it saw its
    /// connection close (the client closed it, or the server stopped).
    public struct EndlessBody: Sendable {
        /// The body bytes handed to the socket whole so far (the chunks' framing not counted).
        public var bytesSent: Int
        /// When the server saw the end, on ``now``'s clock; `nil` while the body goes on.
        public var endedAt: UInt64?
    }

    /// The endless bodies served on `path` (query excluded), in the order they started.
    public func endlessBodies(path: String) -> [EndlessBody] {
        core.withLock { core.endlessBodies[path] ?? [] }
    }

    /// The server's clock, in milliseconds (monotonic, the one ``EndlessBody/endedAt`` uses).
    public static var now: UInt64 {
        Sys.nowMilliseconds()
    }

    /// The number of requests fully received on all paths.
    public var totalRequestCount: Int {
        core.withLock { core.totalRequests }
    }

    /// The number of connections currently open.
    public var openConnectionCount: Int {
        core.withLock { core.openFDs.count }
    }

    /// The number of connections accepted since the server started.
    public var acceptedConnectionCount: Int {
        core.withLock { core.acceptedConnections }
    }
}

/// The state shared by the accept thread and connection threads. Every `var` is guarded by `lock`.
/// Threads retain this object, so it outlives a `LoopbackServer` that is released while they finish.
final class ServerCore: @unchecked Sendable {
    private let lock = NSLock()
    private let listenFD: Int32
    private let acceptThreadDone = DispatchSemaphore(value: 0)
    private var stopped = false
    var routes: [String: @Sendable (LoopbackRequest) -> LoopbackResponse] = [:]
    var streamRoutes: [String: @Sendable (LoopbackRequest) -> LoopbackStream] = [:]
    var resourceRoutes: [String: @Sendable (LoopbackRequest) -> LoopbackResource] = [:]
    var bodyBytes: [String: Int] = [:]
    var endlessBodies: [String: [LoopbackServer.EndlessBody]] = [:]
    var requestCounts: [String: Int] = [:]
    var totalRequests = 0
    var openFDs: Set<Int32> = []
    var acceptedConnections = 0
    /// The connection policy and what it recorded (ConnectionFaults.swift).
    var connectionPolicy: ConnectionPolicy?
    var connectionFaultsApplied = 0
    var arrivals: [LoopbackArrival] = []

    init(listenFD: Int32) {
        self.listenFD = listenFD
    }

    func withLock<T>(_ body: () -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }

    func startAccepting() {
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "LoopbackServer.accept"
        thread.stackSize = 512 * 1024
        thread.start()
    }

    func stop() {
        let alreadyStopped: Bool = withLock {
            if stopped { return true }
            stopped = true
            // Under the lock, so no connection thread can close (and the OS reuse) one of these fds meanwhile.
            for fd in openFDs { _ = shutdown(fd, Sys.shutRDWR) }
            _ = shutdown(listenFD, Sys.shutRDWR)
            return false
        }
        if !alreadyStopped {
            // The accept thread closes the listener when it leaves its loop (at most ~100 ms).
            _ = acceptThreadDone.wait(timeout: .now() + 2)
        }
    }

    private func acceptLoop() {
        defer {
            Sys.close(listenFD)
            acceptThreadDone.signal()
        }
        while !withLock({ stopped }) {
            // Poll with a timeout so the loop also ends where shutdown() does not wake a listener (Darwin).
            var pfd = pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, 100)
            if ready < 0 && errno != EINTR { return }
            if ready <= 0 { continue }
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                let code = errno
                if code == EMFILE || code == ENFILE { usleep(10_000) }  // out of descriptors: do not spin
                if [EINTR, EAGAIN, ECONNABORTED, EMFILE, ENFILE].contains(code) { continue }
                return
            }
            let registered: Int? = withLock {
                guard !stopped else { return nil }
                openFDs.insert(fd)
                acceptedConnections += 1
                return acceptedConnections
            }
            guard let connection = registered else {
                Sys.close(fd)
                return
            }
            Sys.setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY)
            #if canImport(Darwin)
            Sys.setOption(fd, SOL_SOCKET, SO_NOSIGPIPE)
            #endif
            let thread = Thread { [self] in serve(fd, connection: connection) }
            thread.name = "LoopbackServer.connection"
            thread.stackSize = 512 * 1024
            thread.start()
        }
    }

    // MARK: - One connection (served in ConnectionFaults.swift, with the connection policy)

    /// Handles one request. Returns `true` if the connection may serve another one.
    func respond(to request: LoopbackRequest, reader: RequestReader, keepAlive: Bool, isHead: Bool) -> Bool {
        let (handler, streamHandler, resourceHandler) = withLock {
            requestCounts[request.path, default: 0] += 1
            totalRequests += 1
            return (routes[request.path], streamRoutes[request.path], resourceRoutes[request.path])
        }
        let reply =
            handler.map { Reply.response($0(request)) }
            ?? streamHandler.map { Reply.stream($0(request)) }
            ?? resourceHandler.map { Reply.resource($0(request)) }
            ?? BuiltinRoutes.reply(for: request)
        let extraDelay = request.query["delay"].flatMap { Int($0) }.map { max(0, $0) } ?? 0
        let fd = reader.fd

        switch reply {
        case .bytes(let count):
            if extraDelay > 0, !reader.wait(milliseconds: extraDelay) { return false }
            return sendBytes(count: count, on: fd, keepAlive: keepAlive, isHead: isHead) && keepAlive
        case let .trickle(count, chunk, interval):
            if extraDelay > 0, !reader.wait(milliseconds: extraDelay) { return false }
            return sendBytes(count: count, on: fd, keepAlive: keepAlive, isHead: isHead, chunk: chunk) {
                reader.wait(milliseconds: interval)
            } && keepAlive
        case let .endless(chunk, interval):
            if extraDelay > 0, !reader.wait(milliseconds: extraDelay) { return false }
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            guard Sys.sendAll(fd, Data(head.utf8)) else { return false }
            var piece = Data(String(chunk, radix: 16).utf8 + [13, 10])
            piece.append(Data(count: chunk))
            piece.append(contentsOf: [13, 10])
            let index = withLock {
                endlessBodies[request.path, default: []].append(LoopbackServer.EndlessBody(bytesSent: 0, endedAt: nil))
                return endlessBodies[request.path, default: []].count - 1
            }
            while Sys.sendAll(fd, piece), !withLock({ stopped }) {
                withLock { endlessBodies[request.path]?[index].bytesSent += chunk }
                guard interval == 0 || reader.wait(milliseconds: interval) else { break }
            }
            // (A send blocks while the client does not read: the end is seen as soon as the client closes.)
            withLock { endlessBodies[request.path]?[index].endedAt = Sys.nowMilliseconds() }
            return false
        case .stream(let stream):
            if extraDelay > 0, !reader.wait(milliseconds: extraDelay) { return false }
            sendStream(stream, on: fd, reader: reader)
            return false
        case .resource(let resource):
            if extraDelay > 0, !reader.wait(milliseconds: extraDelay) { return false }
            return sendResource(resource, for: request, reader: reader, keepAlive: keepAlive, isHead: isHead)
        case .response(let response):
            let (delay, overflow) = response.delayMilliseconds.addingReportingOverflow(extraDelay)
            let totalDelay = overflow ? Int.max : delay
            if totalDelay > 0, !reader.wait(milliseconds: totalDelay) { return false }
            switch response.fault {
            case .neverRespond?:
                _ = reader.wait(milliseconds: -1)
                return false
            case .closeMidBody?:
                let head = headerBlock(response, contentLength: response.body.count, keepAlive: false)
                let partial = response.body.prefix(response.body.count / 2)
                if Sys.sendAll(fd, head + partial) { _ = shutdown(fd, Sys.shutWR) }
                return false
            case .resetBeforeHeaders?:
                Self.resetOnClose(fd)
                return false
            case .resetMidBody?:
                let head = headerBlock(response, contentLength: response.body.count, keepAlive: false)
                _ = Sys.sendAll(fd, head + response.body.prefix(response.body.count / 2))
                Self.resetOnClose(fd)
                return false
            case .invalidChunkedEncoding?:
                let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
                if Sys.sendAll(fd, Data(head.utf8)) { _ = shutdown(fd, Sys.shutWR) }
                return false
            case nil:
                let closeRequested = response.headers.contains {
                    $0.key.lowercased() == "connection" && $0.value.lowercased().contains("close")
                }
                let keepOpen = keepAlive && !closeRequested && !(100..<200).contains(response.status)
                return send(response, on: fd, keepAlive: keepOpen, isHead: isHead) && keepOpen
            }
        }
    }

    /// Sends a ``LoopbackStream`` as chunks, then ends it as it says; the connection is not used again.
    private func sendStream(_ stream: LoopbackStream, on fd: Int32, reader: RequestReader) {
        var headers = stream.headers.filter { $0.key.lowercased() != "transfer-encoding" && $0.key.lowercased() != "connection" }
        let hasBody = !LoopbackResponse.statusHasNoBody(stream.status)
        if hasBody { headers["Transfer-Encoding"] = "chunked" }
        // A stream always says what it is: without a Content-Type, Apple's data tasks hold back the first 512 bytes
        // to sniff the type, so small pieces would arrive late there (and not on Linux).
        if hasBody, !headers.keys.contains(where: { $0.lowercased() == "content-type" }) {
            headers["Content-Type"] = "application/octet-stream"
        }
        let head = headerBlock(LoopbackResponse(status: stream.status, headers: headers), contentLength: nil, keepAlive: false)
        guard Sys.sendAll(fd, head) else { return }
        if hasBody {
            for (index, piece) in stream.pieces.enumerated() where !piece.isEmpty {
                if index > 0, stream.intervalMilliseconds > 0, !reader.wait(milliseconds: stream.intervalMilliseconds) { return }
                var chunk = Data((String(piece.count, radix: 16) + "\r\n").utf8)
                chunk.append(piece)
                chunk.append(contentsOf: [13, 10])
                guard Sys.sendAll(fd, chunk) else { return }
            }
        }
        switch stream.ending {
        case .complete:
            if hasBody, !Sys.sendAll(fd, Data("0\r\n\r\n".utf8)) { return }
            _ = shutdown(fd, Sys.shutWR)
        case .close:
            _ = shutdown(fd, Sys.shutWR)
        case .reset:
            Self.resetOnClose(fd)
        case .hang:
            _ = reader.wait(milliseconds: -1)
        }
    }

    /// Answers one request for a ``LoopbackResource`` as its plan says, pausing between chunks and cutting the
    /// connection where asked. Returns `true` if the connection may serve another one.
    private func sendResource(
        _ resource: LoopbackResource, for request: LoopbackRequest, reader: RequestReader, keepAlive: Bool, isHead: Bool
    ) -> Bool {
        let plan = resource.plan(method: request.method, headers: request.headers)
        let closeRequested = plan.headers.contains {
            $0.key.lowercased() == "connection" && $0.value.lowercased().contains("close")
        }
        let keepOpen = keepAlive && !closeRequested && plan.cut == nil
        let fd = reader.fd
        let head = headerBlock(LoopbackResponse(status: plan.status, headers: plan.headers), contentLength: plan.count, keepAlive: keepOpen)
        guard Sys.sendAll(fd, head) else { return false }
        if isHead { return keepOpen }

        let end = plan.cut ?? plan.start + plan.count
        let chunk = max(1, resource.chunkSize)
        var offset = plan.start
        while offset < end {
            if offset > plan.start, resource.intervalMilliseconds > 0, !reader.wait(milliseconds: resource.intervalMilliseconds) {
                return false
            }
            var remaining = min(chunk, end - offset)
            while remaining > 0 {
                // One slice of the table per send: it starts at this offset's byte and is at least 65,261 bytes long.
                let index = LoopbackResource.patternIndex(offset: offset, version: resource.version)
                let size = min(remaining, LoopbackResource.pattern.count - index)
                // Counted before sending, so the count is complete when the client has the last byte.
                withLock { bodyBytes[request.path, default: 0] += size }
                let written = LoopbackResource.pattern.withUnsafeBytes {
                    Sys.sendCounting(fd, UnsafeRawBufferPointer(rebasing: $0[index..<(index + size)]))
                }
                guard written == size else {
                    withLock { bodyBytes[request.path, default: 0] -= size - written }
                    return false
                }
                offset += size
                remaining -= size
            }
        }
        if plan.cut != nil {
            if resource.resetOnCut {
                Self.resetOnClose(fd)
            } else {
                _ = shutdown(fd, Sys.shutWR)
            }
            return false
        }
        return keepOpen
    }

    /// Sends a complete in-memory response. Returns `false` if the socket failed.
    func send(_ response: LoopbackResponse, on fd: Int32, keepAlive: Bool, isHead: Bool) -> Bool {
        let hasBody = !LoopbackResponse.statusHasNoBody(response.status)
        // A status without a body sends a `Content-Length` only when the route gives one (a 304 may announce the
        // representation's length).
        let announced = response.headers.first { $0.key.lowercased() == "content-length" }.flatMap { Int($0.value) }
        var data = headerBlock(response, contentLength: hasBody ? response.body.count : announced, keepAlive: keepAlive)
        if hasBody && !isHead { data.append(response.body) }
        return Sys.sendAll(fd, data)
    }

    /// One 64 KiB chunk of `/bytes/N`. Its length is a multiple of 256, so every chunk starts with byte 0.
    /// Built once with a plain loop: a per-request `map` over 64 Ki elements is slow in debug builds and,
    /// under ThreadSanitizer, serialises all connection threads on the runtime's metadata lock.
    private static let bytePattern: [UInt8] = {
        var pattern = [UInt8](repeating: 0, count: 64 * 1024)
        for i in pattern.indices { pattern[i] = UInt8(truncatingIfNeeded: i) }
        return pattern
    }()

    /// Streams `/bytes/N`: byte `i` is `UInt8(i % 256)`, sent in chunks of at most 64 KiB (or `chunk`), calling
    /// `pause` between chunks (`/trickle/N`); it returns `false` when the client has gone.
    private func sendBytes(
        count: Int, on fd: Int32, keepAlive: Bool, isHead: Bool, chunk: Int = Int.max, pause: () -> Bool = { true }
    ) -> Bool {
        let response = LoopbackResponse(headers: ["Content-Type": "application/octet-stream"])
        guard Sys.sendAll(fd, headerBlock(response, contentLength: count, keepAlive: keepAlive)) else { return false }
        if isHead { return true }
        var sent = 0
        while sent < count {
            if sent > 0, !pause() { return false }
            let size = min(count - sent, Self.bytePattern.count - sent % 256, chunk)
            let offset = sent % 256
            let ok = Self.bytePattern.withUnsafeBytes { Sys.sendAll(fd, UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + size)])) }
            guard ok else { return false }
            sent += size
        }
        return true
    }

    /// The status line and headers: `Content-Length` (unless `nil`), `Content-Type` when there is a body,
    /// `Connection`, then the response's own headers.
    func headerBlock(_ response: LoopbackResponse, contentLength: Int?, keepAlive: Bool) -> Data {
        func clean(_ text: String) -> String {
            String(text.filter { $0 != "\r" && $0 != "\n" })
        }
        let own = response.headers.map { (name: clean($0.key), value: clean($0.value)) }
            .filter { !$0.name.isEmpty && $0.name.lowercased() != "content-length" }
            .sorted { $0.name < $1.name }
        let ownNames = Set(own.map { $0.name.lowercased() })
        var text = "HTTP/1.1 \(response.status) \(LoopbackResponse.reasonPhrase(for: response.status))\r\n"
        if let contentLength {
            text += "Content-Length: \(contentLength)\r\n"
            if contentLength > 0 && !ownNames.contains("content-type") {
                text += "Content-Type: application/octet-stream\r\n"
            }
        }
        if !ownNames.contains("connection") {
            text += "Connection: \(keepAlive ? "keep-alive" : "close")\r\n"
        }
        for header in own {
            text += "\(header.name): \(header.value)\r\n"
        }
        text += "\r\n"
        return Data(text.utf8)
    }

    /// After an error response, stops sending and discards what the client still sends (up to 1 s),
    /// so closing does not reset the connection before the client has read the response.
    /// Makes the coming `close` send a TCP RST instead of a FIN.
    static func resetOnClose(_ fd: Int32) {
        var noLinger = linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &noLinger, socklen_t(MemoryLayout<linger>.size))
    }

    func lingeringClose(_ fd: Int32) {
        _ = shutdown(fd, Sys.shutWR)
        var scratch = [UInt8](repeating: 0, count: 16 * 1024)
        let deadline = Sys.nowMilliseconds() + 1000
        while Sys.nowMilliseconds() < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let timeout = Int32(deadline - min(deadline, Sys.nowMilliseconds()))
            guard poll(&pfd, 1, timeout) > 0 else { return }
            let count = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count == 0 || (count < 0 && errno != EINTR) { return }
        }
    }
}

/// The state of a ``LoopbackServer/script(_:_:)``: which response comes next.
private final class ResponseScript: @unchecked Sendable {
    private let lock = NSLock()
    private let responses: [LoopbackResponse]
    private var index = 0

    init(_ responses: [LoopbackResponse]) {
        self.responses = responses.isEmpty ? [LoopbackResponse(status: 500)] : responses
    }

    func next() -> LoopbackResponse {
        lock.lock()
        defer { lock.unlock() }
        let response = responses[min(index, responses.count - 1)]
        index += 1
        return response
    }
}

/// The tokens of a ``LoopbackServer/protect(_:refreshPath:response:refreshDelayMilliseconds:)``.
private final class TokenIssuer: @unchecked Sendable {
    private let lock = NSLock()
    private var issued = 0

    var current: String? {
        lock.lock()
        defer { lock.unlock() }
        return issued == 0 ? nil : "token-\(issued)"
    }

    func issue() -> String {
        lock.lock()
        defer { lock.unlock() }
        issued += 1
        return "token-\(issued)"
    }
}
