import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Thin wrappers over the socket calls that differ between Glibc and Darwin

enum Sys {
    #if canImport(Glibc)
    static let streamType = Int32(SOCK_STREAM.rawValue)
    static let sendFlags = Int32(MSG_NOSIGNAL)
    static let shutRDWR = Int32(SHUT_RDWR)
    static let shutWR = Int32(SHUT_WR)
    #else
    static let streamType = SOCK_STREAM
    static let sendFlags: Int32 = 0  // Darwin uses SO_NOSIGPIPE on the socket instead.
    static let shutRDWR = SHUT_RDWR
    static let shutWR = SHUT_WR
    #endif

    static func close(_ fd: Int32) {
        #if canImport(Glibc)
        _ = Glibc.close(fd)
        #else
        _ = Darwin.close(fd)
        #endif
    }

    static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32 = 1) {
        var value = value
        _ = setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
    }

    static func nowMilliseconds() -> UInt64 {
        DispatchTime.now().uptimeNanoseconds / 1_000_000
    }

    /// Sends every byte, retrying on EINTR and partial writes. Returns `false` if the socket failed.
    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        sendCounting(fd, bytes) == bytes.count
    }

    /// Sends every byte like `sendAll`, and returns how many the socket accepted: `bytes.count` unless it failed.
    static func sendCounting(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        guard var pointer = bytes.baseAddress else { return 0 }
        var remaining = bytes.count
        while remaining > 0 {
            let sent = send(fd, pointer, remaining, sendFlags)
            if sent > 0 {
                pointer += sent
                remaining -= sent
            } else if sent < 0 && errno == EINTR {
                continue
            } else {
                break
            }
        }
        return bytes.count - remaining
    }

    static func sendAll(_ fd: Int32, _ data: Data) -> Bool {
        data.withUnsafeBytes { sendAll(fd, $0) }
    }
}

// MARK: - Request parsing

/// The limits of what a request may contain.
enum Limits {
    static let maxHeaderBytes = 64 * 1024
    static let maxBodyBytes = 64 * 1024 * 1024
}

/// The outcome of reading one request from a connection.
enum ReadOutcome {
    /// A complete request; `keepAlive` tells whether the connection may serve another one.
    case request(LoopbackRequest, keepAlive: Bool, isHead: Bool)
    /// The client closed the connection (or it failed) before a complete request arrived.
    case closed
    /// The request is malformed or too large: answer with this status and close.
    case reject(status: Int)
    /// `stopInBody` asked to stop halfway through the body: `received` of its bytes were read, the rest was not.
    case stoppedInBody(received: Int)
}

/// Buffers bytes received on one connection and parses HTTP/1.x requests from them.
/// Used by a single connection thread only, so it needs no lock.
final class RequestReader {
    let fd: Int32
    private var buffer: [UInt8] = []
    private var start = 0  // index of the first unconsumed byte in `buffer`
    private var scratch = [UInt8](repeating: 0, count: 64 * 1024)

    init(fd: Int32) {
        self.fd = fd
    }

    private var available: Int { buffer.count - start }

    /// Receives more bytes into the buffer. Returns `false` on end of stream or error.
    private func fill() -> Bool {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start >= 64 * 1024 {
            buffer.removeFirst(start)
            start = 0
        }
        while true {
            let count = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                buffer.append(contentsOf: scratch[0..<count])
                return true
            }
            if count < 0 && errno == EINTR { continue }
            return false
        }
    }

    /// Waits up to `milliseconds` (forever if negative) while watching the socket.
    /// Returns `true` when the time is up, `false` if the client closed the connection, it failed, or the server stopped.
    /// Bytes that arrive meanwhile (a pipelined request) are kept in the buffer.
    func wait(milliseconds: Int) -> Bool {
        let deadline = Sys.nowMilliseconds() + UInt64(max(0, milliseconds))
        var events = Int16(POLLIN)
        while true {
            var timeout: Int32 = -1
            if milliseconds >= 0 {
                let now = Sys.nowMilliseconds()
                if now >= deadline { return true }
                timeout = Int32(min(deadline - now, UInt64(Int32.max)))
            }
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&pfd, 1, timeout)
            if ready < 0 {
                if errno == EINTR { continue }
                return false
            }
            if ready == 0 { continue }
            if pfd.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0 { return false }
            if pfd.revents & Int16(POLLIN) != 0 {
                guard fill() else { return false }
                // Stop reading a client that floods us while we wait; hang-ups are still reported.
                if available > Limits.maxBodyBytes + Limits.maxHeaderBytes { events = 0 }
            }
        }
    }

    /// The body bytes that had arrived when the last request's body was cut short (the connection ended first).
    private(set) var cutBodyBytes = 0
    /// The bytes of the chunks of the body being read, so far.
    private var chunkedBytesRead = 0

    /// Whether a byte has been received and not yet consumed, or arrives within `milliseconds` (a negative value
    /// waits forever). `false` when the time is up, the client closed the connection or the server stopped.
    func waitForBytes(milliseconds: Int) -> Bool {
        if available > 0 { return true }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while true {
            let ready = poll(&pfd, 1, Int32(clamping: milliseconds))
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return false }
            return fill()
        }
    }

    /// Reads and drops whatever the socket holds now, without waiting, so that a close sends a FIN and not a reset.
    func discardAvailable() {
        start = buffer.count
        while true {
            let count = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if count > 0 { continue }
            if count < 0 && errno == EINTR { continue }
            return
        }
    }

    /// Reads the next request. `sendContinue` is called before the body is read if the client expects `100 Continue`.
    /// `onHead` is told of the head as soon as it is parsed, with the body's `Content-Length` (`nil` if chunked) and
    /// whether it is chunked. With `stopInBody`, a body of a request is read only halfway (a chunked one not at all),
    /// and the outcome is ``ReadOutcome/stoppedInBody(received:)``; a request without a body is read whole.
    func readRequest(
        sendContinue: () -> Bool, onHead: (Head, _ contentLength: Int?, _ chunked: Bool) -> Void = { _, _, _ in }, stopInBody: Bool = false
    ) -> ReadOutcome {
        cutBodyBytes = 0
        chunkedBytesRead = 0
        // Ignore empty lines before the request line (RFC 9112 section 2.2).
        while true {
            while available >= 2, buffer[start] == 13, buffer[start + 1] == 10 { start += 2 }
            if available >= 2 || (available == 1 && buffer[start] != 13) { break }
            guard fill() else { return .closed }
        }
        // Find the end of the header block.
        var scanned = 0  // bytes after `start` already searched (offsets survive `fill()` compacting the buffer)
        var headEnd = -1
        while headEnd < 0 {
            var i = start + scanned
            while i + 3 < buffer.count {
                if buffer[i] == 13, buffer[i + 1] == 10, buffer[i + 2] == 13, buffer[i + 3] == 10 {
                    headEnd = i
                    break
                }
                i += 1
            }
            if headEnd >= 0 { break }
            if available > Limits.maxHeaderBytes { return .reject(status: 431) }
            scanned = max(0, available - 3)
            guard fill() else { return .closed }
        }
        if headEnd - start > Limits.maxHeaderBytes { return .reject(status: 431) }
        // Split on bytes: as a Swift `String`, "\r\n" is one Character and would not match "\n".
        let lines = buffer[start..<headEnd].split(separator: 10, omittingEmptySubsequences: false).map {
            String(decoding: $0.last == 13 ? $0.dropLast() : $0, as: UTF8.self)
        }
        start = headEnd + 4

        guard let parsed = Head(lines: lines) else { return .reject(status: 400) }
        let headers = parsed.headers
        // A sink's body is counted and checksummed as it arrives, never held, so it may be of any size.
        let isSink = parsed.path.hasPrefix("/sink")
        var digest: BodyDigest? = isSink ? BodyDigest() : nil
        sinkPause = isSink ? parsed.query["pause"].flatMap { Int($0) }.map { max(0, $0) } ?? 0 : 0

        // Body framing.
        let transferEncoding = headers["transfer-encoding"].map { $0.lowercased() }
        var contentLength = 0
        if let transferEncoding {
            let codings = transferEncoding.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            guard codings.last == "chunked" else { return .reject(status: 400) }
        } else if let value = headers["content-length"] {
            let values = Set(value.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) })
            guard values.count == 1, let text = values.first, !text.isEmpty, text.utf8.allSatisfy({ (48...57).contains($0) }) else {
                return .reject(status: 400)
            }
            guard text.count <= 12, let length = Int(text), length <= Limits.maxBodyBytes || isSink else { return .reject(status: 413) }
            contentLength = length
        }

        onHead(parsed, transferEncoding == nil ? contentLength : nil, transferEncoding != nil)
        if headers["expect"]?.lowercased() == "100-continue", transferEncoding != nil || contentLength > 0 {
            guard sendContinue() else { return .closed }
        }
        if stopInBody, transferEncoding != nil || contentLength > 0 {
            let half = transferEncoding == nil ? contentLength / 2 : 0
            guard read(exactly: half) != nil else {
                cutBodyBytes = available
                return .closed
            }
            return .stoppedInBody(received: half)
        }

        let body: Data
        if transferEncoding != nil {
            switch readChunkedBody(digest: &digest) {
            case .success(let data): body = data
            case .failure(let failure):
                if case .reject(let status) = failure { return .reject(status: status) }
                cutBodyBytes = chunkedBytesRead + available
                return .closed
            }
        } else if digest != nil {
            guard consume(exactly: contentLength, into: &digest) else {
                cutBodyBytes = available
                return .closed
            }
            body = Data()
        } else {
            guard let data = read(exactly: contentLength) else {
                cutBodyBytes = available
                return .closed
            }
            body = data
        }

        let connection = Set((headers["connection"] ?? "").lowercased().split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        let keepAlive = parsed.version == "HTTP/1.1" ? !connection.contains("close") : connection.contains("keep-alive")
        let request = LoopbackRequest(method: parsed.method, path: parsed.path, query: parsed.query, headers: headers, body: body, sinkDigest: digest)
        return .request(request, keepAlive: keepAlive, isHead: parsed.method == "HEAD")
    }

    private enum BodyFailure: Swift.Error {
        case closed
        case reject(Int)
    }

    /// Reads exactly `count` bytes, or returns `nil` if the connection ends first.
    private func read(exactly count: Int) -> Data? {
        while available < count {
            guard fill() else { return nil }
        }
        let data = Data(buffer[start..<(start + count)])
        start += count
        return data
    }

    /// Milliseconds a sink waits before each read (`/sink…?pause=N`), to make a slow reader.
    private var sinkPause = 0

    /// Feeds exactly `count` bytes to `digest` as they arrive; `false` if the connection ends first.
    private func consume(exactly count: Int, into digest: inout BodyDigest?) -> Bool {
        var remaining = count
        while remaining > 0 {
            if available == 0 {
                if sinkPause > 0 { usleep(UInt32(sinkPause) * 1000) }
                guard fill() else { return false }
            }
            let taken = min(available, remaining)
            buffer[start..<(start + taken)].withUnsafeBytes { digest?.add($0) }
            start += taken
            remaining -= taken
        }
        return true
    }

    /// Reads one line ending in CRLF (or LF), without the line ending.
    private func readLine() -> Result<String, BodyFailure> {
        var scanned = 0
        while true {
            if let newline = buffer[(start + scanned)...].firstIndex(of: 10) {
                var end = newline
                if end > start, buffer[end - 1] == 13 { end -= 1 }
                let line = String(decoding: buffer[start..<end], as: UTF8.self)
                start = newline + 1
                return .success(line)
            }
            if available > Limits.maxHeaderBytes { return .failure(.reject(431)) }
            scanned = available
            guard fill() else { return .failure(.closed) }
        }
    }

    /// Reads a chunked body, or with a `digest`, feeds it the chunks and returns no data.
    private func readChunkedBody(digest: inout BodyDigest?) -> Result<Data, BodyFailure> {
        var body = Data()
        while true {
            let line: String
            switch readLine() {
            case .success(let text): line = text
            case .failure(let failure): return .failure(failure)
            }
            let sizeText =
                line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first.map {
                    $0.trimmingCharacters(in: .whitespaces)
                } ?? ""
            guard !sizeText.isEmpty, sizeText.count <= 15, let size = Int(sizeText, radix: 16), size >= 0 else {
                return .failure(.reject(400))
            }
            if size == 0 { break }
            if digest != nil {
                guard consume(exactly: size, into: &digest) else { return .failure(.closed) }
            } else {
                guard body.count + size <= Limits.maxBodyBytes else { return .failure(.reject(413)) }
                guard let chunk = read(exactly: size) else { return .failure(.closed) }
                body.append(chunk)
                chunkedBytesRead = body.count
            }
            switch readLine() {
            case .success(let rest) where rest.isEmpty: continue
            case .success: return .failure(.reject(400))
            case .failure(let failure): return .failure(failure)
            }
        }
        // Trailer fields, ignored, up to an empty line.
        var trailerBytes = 0
        while true {
            switch readLine() {
            case .success(let line) where line.isEmpty: return .success(body)
            case .success(let line):
                trailerBytes += line.utf8.count + 2
                if trailerBytes > Limits.maxHeaderBytes { return .failure(.reject(431)) }
            case .failure(let failure): return .failure(failure)
            }
        }
    }
}

/// The request line and header fields of one request.
struct Head {
    let method: String
    let version: String
    let path: String
    let query: [String: String]
    let headers: [String: String]

    /// Parses the lines of a header block (without line endings and the final empty line), or returns `nil` if malformed.
    init?(lines: [String]) {
        guard let requestLine = lines.first else { return nil }
        let parts = requestLine.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
            parts[0].allSatisfy({ $0.isASCII && ($0.isLetter || $0 == "-" || $0 == "_") }),
            parts[2] == "HTTP/1.1" || parts[2] == "HTTP/1.0"
        else { return nil }
        method = String(parts[0])
        version = String(parts[2])

        var target = Substring(parts[1])
        if target.lowercased().hasPrefix("http://") || target.lowercased().hasPrefix("https://") {
            // Absolute form: drop scheme and authority.
            let afterScheme = target[target.index(target.firstIndex(of: ":") ?? target.startIndex, offsetBy: 3)...]
            target = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? "/"
        }
        guard target.hasPrefix("/") || target == "*" else { return nil }
        if let hash = target.firstIndex(of: "#") { target = target[..<hash] }
        let pieces = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        path = String(pieces[0])
        query = pieces.count > 1 ? Head.parseQuery(pieces[1]) : [:]

        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { return nil }
            let name = line[..<colon]
            guard !name.isEmpty, !name.contains(where: { $0 == " " || $0 == "\t" }) else { return nil }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
            let key = name.lowercased()
            if let existing = headers[key] {
                headers[key] = existing + ", " + value
            } else {
                headers[key] = value
            }
        }
        self.headers = headers
    }

    /// Splits `a=1&b=x%20y` into a dictionary, percent-decoding names and values.
    static func parseQuery(_ text: Substring) -> [String: String] {
        var result: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let nameAndValue = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(nameAndValue[0])
            let value = nameAndValue.count > 1 ? String(nameAndValue[1]) : ""
            result[name.removingPercentEncoding ?? name] = value.removingPercentEncoding ?? value
        }
        return result
    }
}

/// The size and CRC-32 (IEEE 802.3, as zlib) of a body, computed as it arrives.
public struct BodyDigest: Sendable, Equatable {
    /// Bytes received.
    public private(set) var count = 0
    /// The CRC-32 of the bytes so far.
    public var crc32: UInt32 { ~state }
    private var state: UInt32 = 0xFFFF_FFFF

    /// An empty digest.
    public init() {}

    /// The digest of `data`.
    public init(_ data: Data) {
        data.withUnsafeBytes { add($0) }
    }

    /// Adds `bytes`.
    public mutating func add(_ bytes: UnsafeRawBufferPointer) {
        var crc = state
        for byte in bytes {
            crc = Self.table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8)
        }
        state = crc
        count += bytes.count
    }

    private static let table: [UInt32] = (0..<256).map { index -> UInt32 in
        var value = UInt32(index)
        for _ in 0..<8 {
            value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1
        }
        return value
    }
}
