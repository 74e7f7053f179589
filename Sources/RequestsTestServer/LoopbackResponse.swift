import Foundation

/// A fully received HTTP request, as handed to a route handler.
public struct LoopbackRequest: Sendable {
    /// The request method as sent, for example `GET` or `POST`.
    public let method: String
    /// The request path without the query string, not percent-decoded (for example `/echo`).
    public let path: String
    /// The query parameters, percent-decoded (`+` is left as is). A repeated name keeps its last value.
    public let query: [String: String]
    /// The request headers with lowercased names. Repeated headers are joined with `", "`.
    public let headers: [String: String]
    /// The request body, already de-chunked.
    public let body: Data
    /// For a path under `/sink`: the size and CRC-32 of the body, which is not kept (``body`` is empty).
    public let sinkDigest: BodyDigest?

    /// Creates a request value (useful to unit-test a handler without a socket).
    public init(
        method: String,
        path: String,
        query: [String: String] = [:],
        headers: [String: String] = [:],
        body: Data = Data(),
        sinkDigest: BodyDigest? = nil
    ) {
        self.sinkDigest = sinkDigest
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }
}

/// What the server sends back for one request.
public struct LoopbackResponse: Sendable {
    /// A deliberate misbehaviour, to test how clients cope with broken servers.
    public enum Fault: Sendable, Equatable {
        /// Send the status line and headers with the full `Content-Length`, then only the first half of the body, then close.
        case closeMidBody
        /// Send nothing; keep the connection open until the client closes it or the server stops.
        case neverRespond
        /// Reset the connection (TCP RST) without sending anything.
        case resetBeforeHeaders
        /// Send the headers and half the body, then reset the connection (TCP RST).
        case resetMidBody
        /// Send `Transfer-Encoding: chunked` and a chunk whose size is not hexadecimal, then close.
        case invalidChunkedEncoding
    }

    /// The HTTP status code.
    public var status: Int
    /// Extra response headers. `Content-Length` is computed by the server, except for a status that has no body (1xx,
    /// 204, 304), which sends one only when given here (the length a 304 may announce, with no body after it). A
    /// `Connection` header here replaces the default one.
    public var headers: [String: String]
    /// The response body.
    public var body: Data
    /// How long to wait before responding. The wait ends early if the client disconnects or the server stops.
    public var delayMilliseconds: Int
    /// An optional deliberate misbehaviour.
    public var fault: Fault?

    /// Creates a response; by default an empty `200`.
    public init(status: Int = 200, headers: [String: String] = [:], body: Data = Data(), delayMilliseconds: Int = 0, fault: Fault? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.delayMilliseconds = delayMilliseconds
        self.fault = fault
    }

    /// A response with `Content-Type: application/json; charset=utf-8` and the given JSON text as body.
    public static func json(_ jsonText: String, status: Int = 200) -> LoopbackResponse {
        LoopbackResponse(status: status, headers: ["Content-Type": "application/json; charset=utf-8"], body: Data(jsonText.utf8))
    }

    /// A response with `Content-Type: text/plain; charset=utf-8` and the given text as body.
    public static func text(_ text: String, status: Int = 200) -> LoopbackResponse {
        LoopbackResponse(status: status, headers: ["Content-Type": "text/plain; charset=utf-8"], body: Data(text.utf8))
    }

    /// The standard reason phrase for a status code, or `"Unknown"`.
    public static func reasonPhrase(for status: Int) -> String {
        reasonPhrases[status] ?? "Unknown"
    }

    /// Whether a response with this status carries neither a body nor a `Content-Length` (1xx, 204, 304).
    static func statusHasNoBody(_ status: Int) -> Bool {
        (100..<200).contains(status) || status == 204 || status == 304
    }

    private static let reasonPhrases: [Int: String] = [
        100: "Continue", 101: "Switching Protocols", 102: "Processing", 103: "Early Hints",
        200: "OK", 201: "Created", 202: "Accepted", 203: "Non-Authoritative Information", 204: "No Content",
        205: "Reset Content", 206: "Partial Content", 207: "Multi-Status", 208: "Already Reported", 226: "IM Used",
        300: "Multiple Choices", 301: "Moved Permanently", 302: "Found", 303: "See Other", 304: "Not Modified",
        305: "Use Proxy", 307: "Temporary Redirect", 308: "Permanent Redirect",
        400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found",
        405: "Method Not Allowed", 406: "Not Acceptable", 407: "Proxy Authentication Required", 408: "Request Timeout",
        409: "Conflict", 410: "Gone", 411: "Length Required", 412: "Precondition Failed", 413: "Content Too Large",
        414: "URI Too Long", 415: "Unsupported Media Type", 416: "Range Not Satisfiable", 417: "Expectation Failed",
        418: "I'm a teapot", 421: "Misdirected Request", 422: "Unprocessable Content", 423: "Locked",
        424: "Failed Dependency", 425: "Too Early", 426: "Upgrade Required", 428: "Precondition Required",
        429: "Too Many Requests", 431: "Request Header Fields Too Large", 451: "Unavailable For Legal Reasons",
        500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable",
        504: "Gateway Timeout", 505: "HTTP Version Not Supported", 506: "Variant Also Negotiates",
        507: "Insufficient Storage", 508: "Loop Detected", 510: "Not Extended", 511: "Network Authentication Required",
    ]
}

/// A response whose body is sent piece by piece with `Transfer-Encoding: chunked`, with a pause before each piece
/// after the first, and that may end badly: for streams and server-sent events.
public struct LoopbackStream: Sendable {
    /// How the body ends.
    public enum Ending: Sendable, Equatable {
        /// With the last chunk, as a complete response; then the connection closes.
        case complete
        /// The connection closes without the last chunk: the body is cut off.
        case close
        /// The connection is reset (TCP RST).
        case reset
        /// Nothing more is sent; the connection stays open until the client closes it or the server stops.
        case hang
    }

    /// The HTTP status code.
    public var status: Int
    /// Response headers (`Transfer-Encoding` and `Connection` are set by the server; `Content-Type` is
    /// `application/octet-stream` unless given).
    public var headers: [String: String]
    /// The body's pieces, each sent as one chunk.
    public var pieces: [Data]
    /// Milliseconds to wait before each piece after the first.
    public var intervalMilliseconds: Int
    /// How the body ends.
    public var ending: Ending

    /// A stream of `pieces`; by default a complete `200` with no pause.
    public init(status: Int = 200, headers: [String: String] = [:], pieces: [Data], intervalMilliseconds: Int = 0, ending: Ending = .complete) {
        self.status = status
        self.headers = headers
        self.pieces = pieces
        self.intervalMilliseconds = intervalMilliseconds
        self.ending = ending
    }

    /// A `text/event-stream` of `events`, each a block of lines such as `"id: 1\ndata: hello"`; a blank line is
    /// added after each.
    public static func events(_ events: [String], intervalMilliseconds: Int = 0, ending: Ending = .complete) -> LoopbackStream {
        LoopbackStream(
            headers: ["Content-Type": "text/event-stream", "Cache-Control": "no-cache"],
            pieces: events.map { Data(($0 + "\n\n").utf8) },
            intervalMilliseconds: intervalMilliseconds,
            ending: ending
        )
    }
}

/// What a route produces: an in-memory response, or a body streamed on the fly.
enum Reply {
    case response(LoopbackResponse)
    /// `count` bytes where byte `i` is `UInt8(i % 256)`, generated in chunks.
    case bytes(count: Int)
    /// The same bytes, `chunk` at a time every `interval` milliseconds, with the full `Content-Length` first.
    case trickle(count: Int, chunk: Int, interval: Int)
    /// `Transfer-Encoding: chunked` that never ends: zero bytes, `chunk` at a time every `interval` milliseconds,
    /// until the client goes away.
    case endless(chunk: Int, interval: Int)
    /// A body sent piece by piece.
    case stream(LoopbackStream)
    /// A representation served with `Range` and `If-Range`, and perhaps cut off.
    case resource(LoopbackResource)
}

/// The built-in routes (`/json`, `/status/N`, `/delay/N`, `/echo`, `/bytes/N`, `/trickle/N`, `/ranged/N`, `/sink…`,
/// `/fault/…`, `/hostile/…`).
enum BuiltinRoutes {
    static let recipeJSON = #"{"name":"Pancakes","ingredients":["flour","milk","eggs"],"steps":["mix","fry"]}"#

    static func reply(for request: LoopbackRequest) -> Reply {
        let path = request.path
        switch path {
        case "/json":
            return .response(.json(recipeJSON))
        case "/echo":
            return .response(echo(request))
        case "/fault/close-mid-body":
            let items = (0..<100).map { "\"item-\($0)\"" }.joined(separator: ",")
            var response = LoopbackResponse.json(#"{"items":[\#(items)]}"#)
            response.fault = .closeMidBody
            return .response(response)
        case "/fault/never-respond":
            return .response(LoopbackResponse(fault: .neverRespond))
        case "/fault/reset-before-headers":
            return .response(LoopbackResponse(fault: .resetBeforeHeaders))
        case "/fault/reset-mid-body":
            return .response(LoopbackResponse(body: Data(count: 200_000), fault: .resetMidBody))
        case "/fault/invalid-chunked":
            return .response(LoopbackResponse(fault: .invalidChunkedEncoding))
        case "/fault/redirect-loop":
            return .response(LoopbackResponse(status: 302, headers: ["Location": "/fault/redirect-loop"]))
        case "/fault/html-error":
            return .response(LoopbackResponse(status: 500, headers: ["Content-Type": "text/html"], body: Data("<html><body><h1>Internal Server Error</h1></body></html>".utf8)))
        case "/fault/html-page":
            return .response(LoopbackResponse(headers: ["Content-Type": "text/html"], body: Data("<html><body>Maintenance</body></html>".utf8)))
        case "/fault/invalid-json":
            return .response(LoopbackResponse(headers: ["Content-Type": "application/json"], body: Data(#"{"name": "Pancakes", "ingredients": [oops"#.utf8)))
        default:
            break
        }
        if let n = number(after: "/status/", in: path) {
            guard (100...599).contains(n) else { return .response(badRequest) }
            if LoopbackResponse.statusHasNoBody(n) { return .response(LoopbackResponse(status: n)) }
            let reason = LoopbackResponse.reasonPhrase(for: n)
            return .response(.json(#"{"status":\#(n),"error":"\#(reason)"}"#, status: n))
        }
        if let n = number(after: "/delay/", in: path) {
            guard n >= 0 else { return .response(badRequest) }
            var response = LoopbackResponse.json(#"{"delayMs":\#(n)}"#)
            response.delayMilliseconds = n
            return .response(response)
        }
        if let n = number(after: "/bytes/", in: path) {
            return n >= 0 ? .bytes(count: n) : .response(badRequest)
        }
        if let n = number(after: "/trickle/", in: path) {
            let chunk = request.query["chunk"].flatMap { Int($0) } ?? 1024
            let interval = request.query["interval"].flatMap { Int($0) } ?? 100
            guard n >= 0, chunk > 0, interval >= 0 else { return .response(badRequest) }
            return .trickle(count: n, chunk: chunk, interval: interval)
        }
        if let n = number(after: "/ranged/", in: path) {
            guard n >= 0, let resource = LoopbackResource.builtin(length: n, query: request.query) else { return .response(badRequest) }
            return .resource(resource)
        }
        if let reply = hostileReply(for: request) {
            return reply
        }
        if path.hasPrefix("/sink") {
            let digest = request.sinkDigest ?? BodyDigest()
            let crc = String(digest.crc32, radix: 16).leftPadding(to: 8)
            return .response(.json(#"{"bytes":\#(digest.count),"crc32":"\#(crc)"}"#))
        }
        return .response(.json(#"{"error":"not found"}"#, status: 404))
    }

    static let badRequest = LoopbackResponse.json(#"{"error":"bad request"}"#, status: 400)

    /// What a hostile server sends:
    /// - `/hostile/endless?chunk=C&interval=MS`: a chunked body that never ends (a trickle with `chunk=1`);
    /// - `/hostile/gzip-bomb/N`: `Content-Encoding: gzip` that inflates to `N` zero bytes (about 1:160 on the
    ///   wire; its trailer's CRC is not computed, so a client that reads it all gets a decoding error);
    /// - `/hostile/redirect?to=LOCATION&status=302`: a redirect to anywhere, such as `file:///etc/passwd`;
    /// - `/hostile/redirect-chain/N`: `N` redirects on this server, then `/json`.
    private static func hostileReply(for request: LoopbackRequest) -> Reply? {
        let path = request.path
        if path == "/hostile/endless" {
            let chunk = request.query["chunk"].flatMap { Int($0) } ?? 65536
            let interval = request.query["interval"].flatMap { Int($0) } ?? 0
            guard chunk > 0, interval >= 0 else { return .response(badRequest) }
            return .endless(chunk: chunk, interval: interval)
        }
        if let n = number(after: "/hostile/gzip-bomb/", in: path) {
            guard n > 0 else { return .response(badRequest) }
            return .response(
                LoopbackResponse(
                    headers: ["Content-Encoding": "gzip", "Content-Type": "application/json"], body: GzipZeros.compressed(count: n)
                ))
        }
        if path == "/hostile/redirect" {
            let status = request.query["status"].flatMap { Int($0) } ?? 302
            return .response(LoopbackResponse(status: status, headers: ["Location": request.query["to"] ?? "/json"]))
        }
        if let n = number(after: "/hostile/redirect-chain/", in: path) {
            guard n >= 0 else { return .response(badRequest) }
            let next = n == 0 ? "/json" : "/hostile/redirect-chain/\(n - 1)"
            return .response(LoopbackResponse(status: 302, headers: ["Location": next]))
        }
        return nil
    }

    /// For a path with `prefix`, the integer after it, or `-1` if that is not a number; `nil` without the prefix.
    private static func number(after prefix: String, in path: String) -> Int? {
        guard path.hasPrefix(prefix) else { return nil }
        let rest = path.dropFirst(prefix.count)
        guard !rest.isEmpty, rest.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(rest) else { return -1 }
        return n
    }

    private static func echo(_ request: LoopbackRequest) -> LoopbackResponse {
        let object: [String: Any] = [
            "method": request.method,
            "path": request.path,
            "query": request.query,
            "headers": request.headers,
            "body": String(decoding: request.body, as: UTF8.self),
            "bodyLength": request.body.count,
        ]
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return .json(#"{"error":"could not encode echo"}"#, status: 500)
        }
        return LoopbackResponse(status: 200, headers: ["Content-Type": "application/json; charset=utf-8"], body: data)
    }
}

extension String {
    fileprivate func leftPadding(to length: Int) -> String {
        String(repeating: "0", count: max(0, length - count)) + self
    }
}

/// A gzip stream of zero bytes, written by hand (Foundation has no compressor): one fixed-Huffman deflate block of a
/// literal zero, then matches of 258 bytes at distance 1 (13 bits each), then literal zeros for the rest.
enum GzipZeros {
    static func compressed(count: Int) -> Data {
        var writer = BitWriter()
        writer.write(0b1, bits: 1)  // BFINAL
        writer.write(0b01, bits: 2)  // BTYPE: fixed Huffman
        writer.writeCode(0b0011_0000, bits: 8)  // literal 0
        let rest = count - 1
        for _ in 0..<(rest / 258) {
            writer.writeCode(0b1100_0101, bits: 8)  // length 258 (symbol 285)
            writer.writeCode(0, bits: 5)  // distance 1 (code 0)
        }
        for _ in 0..<(rest % 258) {
            writer.writeCode(0b0011_0000, bits: 8)
        }
        writer.writeCode(0, bits: 7)  // end of block (symbol 256)
        var data = Data([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 3])
        data.append(contentsOf: writer.flushed)
        data.append(contentsOf: [0, 0, 0, 0])  // CRC-32, not computed
        let size = UInt32(truncatingIfNeeded: count)
        data.append(contentsOf: (0..<4).map { UInt8(truncatingIfNeeded: size >> (8 * $0)) })
        return data
    }

    /// Deflate's bit order: values least significant bit first, Huffman codes most significant bit first.
    private struct BitWriter {
        var bytes: [UInt8] = []
        private var current: UInt32 = 0
        private var used: UInt32 = 0

        mutating func write(_ value: UInt32, bits: UInt32) {
            for bit in 0..<bits {
                current |= ((value >> bit) & 1) << used
                used += 1
                if used == 8 { flush() }
            }
        }

        mutating func writeCode(_ code: UInt32, bits: UInt32) {
            var reversed: UInt32 = 0
            for bit in 0..<bits { reversed |= ((code >> bit) & 1) << (bits - 1 - bit) }
            write(reversed, bits: bits)
        }

        private mutating func flush() {
            bytes.append(UInt8(current))
            current = 0
            used = 0
        }

        var flushed: [UInt8] {
            var copy = self
            if copy.used > 0 { copy.flush() }
            return copy.bytes
        }
    }
}
