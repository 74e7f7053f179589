#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// What a request must share with a recorded entry of a HAR file to get its response. Method and URL always: the
/// method, the URL before its query, and the query items whatever their order; a recorded value that was redacted
/// (`Redaction.placeholder`) matches any value.
public struct HARMatching: Sendable {
    /// Whether the request's body must equal the recorded one. Off by default. On Linux the body of an upload task
    /// never reaches the replay, so such a request cannot match with this on.
    public var body: Bool
    /// Headers whose values must equal the recorded ones, compared by name without regard to case (a redacted
    /// recorded value matches any value). Empty by default.
    public var headers: Set<String>

    /// Matching by method and URL, and by the body and `headers` when asked.
    public init(body: Bool = false, headers: Set<String> = []) {
        (self.body, self.headers) = (body, headers)
    }
}

/// A recorded entry, ready to answer: its request as a match key, and its response as a stub.
struct ReplayEntry: Sendable {
    let index: Int
    let method: String
    let base: String
    let query: [QueryItem]
    let headers: [String: String]
    let body: Data?
    private(set) var response: StubResponse

    struct QueryItem: Sendable, Hashable {
        let name: String
        let value: String
    }

    var description: String {
        let query = self.query.isEmpty ? "" : "?" + self.query.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
        return "entry \(index): \(method) \(base)\(query) → \(response.status)"
    }

    /// Headers of a recorded response that would not describe the body as the replay delivers it (decoded, whole).
    private static let droppedResponseHeaders: Set<String> = ["content-encoding", "content-length", "transfer-encoding"]

    /// The entry `index` of a file, ready to answer; a streamed body (`_chunks`) is answered in its recorded pieces,
    /// each after its recorded delay when `pacing`.
    init(index: Int, entry: HAREntry, pacing: Bool) throws {
        self.index = index
        method = entry.request.method.uppercased()
        (base, query) = Self.key(entry.request.url)
        headers = Dictionary(entry.request.headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        if let postData = entry.request.postData {
            body = try Self.bytes(postData.text, encoding: postData.encoding, index: index, field: "request.postData.text")
        } else {
            body = nil
        }
        let content = entry.response.content
        let responseBody = try content.text.map { try Self.bytes($0, encoding: content.encoding, index: index, field: "response.content.text") } ?? Data()
        switch entry.response.status {
        case 0:
            // No response (a transport error, or a request a browser blocked): replayed as the error.
            response = .failure(entry.response.urlError)
        case 100...599:
            // A response whose transfer broke: its body so far, then the error. Trusted when the library wrote it (a
            // `URLError`) or when the body is known to be short; a browser's `_error` beside a whole body (Chrome's
            // `net::ERR_ABORTED` for a page that moved on) is not a failure of the response.
            let whole = content.size <= responseBody.count
            let error = (entry.response.error ?? "").trimmingCharacters(in: .whitespaces)
            let brokeOff = !error.isEmpty && (error.hasPrefix("URLError ") || !whole)
            // A whole body gets its own length. One the transfer cut short, and a response without a body (a `HEAD`'s,
            // a `304`), keep the length their headers announced; one the recording cut short has none.
            let hasBody = ResponseBodyRule.hasBody(status: entry.response.status, method: entry.request.method)
            let length: LengthRule = !hasBody || brokeOff ? .announced : whole ? .body : .none
            response = Self.stubResponse(
                status: entry.response.status, headers: entry.response.headers, body: hasBody ? responseBody : Data(), length: length)
            if let chunks = content.chunks, hasBody {
                response.pieces = try Self.pieces(of: chunks, index: index, pacing: pacing)
            }
            if brokeOff { response.errorAfterBody = entry.response.urlError }
        default:
            throw HARReplayError.unreadableFile(reason: "entry \(index): status \(entry.response.status) is not an HTTP status")
        }
    }

    /// What a replayed response's `Content-Length` is: the body's length, the recorded value, or none.
    enum LengthRule {
        case body, announced, none
    }

    /// A recorded answer as a stub: without the headers that would not describe the body as delivered (decoded, whole)
    /// or that are not HTTP/1.1 fields (HTTP/2's `:status`), with repeated headers joined, and a recorded
    /// `Content-Length` as `length` says.
    static func stubResponse(status: Int, headers: [HARHeader], body: Data, length: LengthRule = .body) -> StubResponse {
        var joined: [String: String] = [:]
        for header in headers {
            let name = header.name.lowercased()
            if name == "content-length" {
                switch length {
                case .body: joined["Content-Length"] = String(body.count)
                case .announced: joined["Content-Length"] = header.value
                case .none: break
                }
            }
            guard !droppedResponseHeaders.contains(name), !name.hasPrefix(":") else { continue }
            joined[header.name] = joined[header.name].map { "\($0), \(header.value)" } ?? header.value
        }
        return StubResponse(status: status, headers: joined, body: body)
    }

    /// The pieces of a streamed body, each after the time since the one before it when `pacing` (at once otherwise).
    private static func pieces(of chunks: [HARChunk], index: Int, pacing: Bool) throws -> [ReplayedPiece] {
        var previous = 0.0
        return try chunks.enumerated().map { offset, chunk in
            let data = try bytes(chunk.text, encoding: chunk.encoding, index: index, field: "response.content._chunks[\(offset)]")
            let time = chunk.time.isFinite ? max(chunk.time, previous) : previous
            defer { previous = time }
            return ReplayedPiece(delay: pacing ? (time - previous) / 1000 : 0, data: data)
        }
    }

    private static func bytes(_ text: String, encoding: String?, index: Int, field: String) throws -> Data {
        guard encoding?.lowercased() == "base64" else { return Data(text.utf8) }
        guard let data = Data(base64Encoded: text, options: .ignoreUnknownCharacters) else {
            throw HARReplayError.unreadableFile(reason: "entry \(index): \(field) is not valid Base64")
        }
        return data
    }

    /// The URL before its query and fragment, and its query items.
    static func key(_ url: String) -> (base: String, query: [QueryItem]) {
        let base =
            url.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first?
            .split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
        return (base, HARQuery.items(of: url).map { QueryItem(name: $0.name, value: $0.value) })
    }

    /// How close `request` is to this entry: method, base and each query item shared; `nil` when `matching` says it
    /// does not match.
    func score(method: String, base: String, query: [QueryItem], request: URLRequest, matching: HARMatching) -> (matches: Bool, score: Int) {
        var score = (method == self.method ? 4 : 0) + (base == self.base ? 8 : 0)
        var unmatched = self.query
        var queryMatches = query.count == unmatched.count
        for item in query {
            if let position = unmatched.firstIndex(where: { $0.name == item.name && ($0.value == item.value || $0.value == Redaction.placeholder) }) {
                unmatched.remove(at: position)
                score += 1
            } else {
                queryMatches = false
            }
        }
        var matches = score >= 12 && queryMatches && unmatched.isEmpty
        for name in matching.headers {
            let recorded = headers[name.lowercased()]
            if recorded != Redaction.placeholder, recorded != request.value(forHTTPHeaderField: name) { matches = false }
        }
        if matching.body, (body ?? Data()) != (request.httpBody ?? Data()) { matches = false }
        return (matches, score)
    }
}

/// Why a HAR file cannot be replayed, or a request cannot be answered from it.
public enum HARReplayError: Error, CustomStringConvertible, LocalizedError {
    /// The file is missing, while the mode replays only.
    case missingFile(URL)
    /// The file is not a HAR file the replay can use, for `reason`.
    case unreadableFile(reason: String)
    /// No recorded entry matches the request; `closest` names the entry nearest to it, if any.
    case noMatch(method: String, url: String, closest: String?)
    /// Requests of a replay matched no entry (see ``HARReplay/finish()``): each one's ``noMatch(method:url:closest:)``.
    case unmatchedRequests([HARReplayError])

    /// What went wrong, naming the file, the request or the closest entry.
    public var description: String {
        switch self {
        case let .missingFile(url): return "No HAR file at \(url.path) to replay (the mode replays only)."
        case let .unreadableFile(reason): return "The HAR file cannot be replayed: \(reason)."
        case let .noMatch(method, url, closest):
            return "No recorded entry matches \(method) \(url)" + (closest.map { "; the closest is \($0)." } ?? "; the HAR file has no entries.")
        case let .unmatchedRequests(errors):
            return "\(errors.count) request(s) of the replay matched no recorded entry:\n" + errors.map { "- \($0.description)" }.joined(separator: "\n")
        }
    }

    /// The ``description``.
    public var errorDescription: String? { description }
}
