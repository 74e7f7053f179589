#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsOutbox
import RequestsTestServer

/// The rows of the reused-connection fault lab: every ``ConnectionFault``, and a server that closes kept-alive
/// connections on its own.
enum LabRow: String, CaseIterable {
    case disconnectAtStart = "disconnect at start"
    case disconnectAfterRequest = "disconnect after the request (lost answer)"
    case disconnectDuringRequestBody = "disconnect during the request body"
    case disconnectDuringResponseBody = "disconnect during the response body"
    case noResponse = "no response"
    case stallAtStart = "stall at start"
    case shutdownInputAtEnd = "shut down input at the end"
    case shutdownOutputAtEnd = "shut down output at the end"
    case reset = "reset (RST) after the request"
    case closeAfterRequests = "close after 1 request, unannounced"
    case closeAfterIdle = "close after 100 ms idle, racing the next request"

    /// The server's idle time in the racing row, and how long after the first answer the client sends the next one.
    static let idleMilliseconds = 100

    var fault: ConnectionFault? {
        switch self {
        case .disconnectAtStart: return .disconnectAtStart
        case .disconnectAfterRequest: return .disconnectAfterRequest
        case .disconnectDuringRequestBody: return .disconnectDuringRequestBody
        case .disconnectDuringResponseBody: return .disconnectDuringResponseBody
        case .noResponse: return .noResponse
        case .stallAtStart: return .stallAtStart
        case .shutdownInputAtEnd: return .shutdownInputAtEnd
        case .shutdownOutputAtEnd: return .shutdownOutputAtEnd
        case .reset: return .reset
        case .closeAfterRequests, .closeAfterIdle: return nil
        }
    }

    /// The fault on the cell's request: the first of a fresh connection, or the second of a kept-alive one (after the
    /// warm-up); a fault at the end hits the request before it (the warm-up, on a reused connection). Once in all, so
    /// that a re-send on a fresh connection is answered.
    func policy(_ column: LabColumn) -> ConnectionPolicy {
        switch self {
        case .closeAfterRequests: return ConnectionPolicy(closeAfterRequests: 1)
        case .closeAfterIdle: return ConnectionPolicy(closeAfterIdleMilliseconds: Self.idleMilliseconds)
        default:
            let onRequest = column == .fresh || fault?.isAtEnd == true ? 1 : 2
            return ConnectionPolicy(fault: fault, onRequest: onRequest, times: 1)
        }
    }

    /// A server that never answers: the cell ends at the session's timeout.
    var waitsForTimeout: Bool { self == .noResponse || self == .stallAtStart }

    /// The connection died before any answer.
    var diesBeforeAnswer: Bool { [.disconnectAtStart, .disconnectAfterRequest, .disconnectDuringRequestBody, .reset].contains(self) }

    /// The request was answered; the connection then ends before the next one (which the reused column sends).
    var closesAfterAnswer: Bool { [.shutdownInputAtEnd, .shutdownOutputAtEnd, .closeAfterRequests, .closeAfterIdle].contains(self) }
}

/// Where the cell's request goes: a fresh connection, or one kept alive after a first request (the warm-up).
enum LabColumn: String, CaseIterable {
    case fresh, reused
}

/// Every request kind, with a PUT and a POST for the uploads.
enum LabKind: String, CaseIterable {
    case data, decodable
    case noContent = "no-content"
    case uploadDataPUT = "upload data PUT"
    case uploadDataPOST = "upload data POST"
    case uploadFilePUT = "upload file PUT"
    case uploadFilePOST = "upload file POST"
    case download
    case resumable = "resumable download"
    case stream
    case events = "server-sent events"
    case outbox = "outbox entry"

    var path: String {
        switch self {
        case .data, .decodable: return "/lab/json"
        case .noContent: return "/lab/empty"
        case .uploadDataPUT, .uploadDataPOST, .uploadFilePUT, .uploadFilePOST: return "/lab/upload"
        case .download: return "/lab/bytes"
        case .resumable: return "/lab/resumable"
        case .stream: return "/lab/stream"
        case .events: return "/lab/events"
        case .outbox: return "/lab/outbox"
        }
    }

    var method: String {
        switch self {
        case .uploadDataPUT, .uploadFilePUT: return "PUT"
        case .uploadDataPOST, .uploadFilePOST, .outbox: return "POST"
        default: return "GET"
        }
    }

    /// Sending it twice is safe: an idempotent method, or an outbox entry (its `Idempotency-Key`).
    var isSafeToResend: Bool { method != "POST" || self == .outbox }

    /// A body that must arrive whole.
    var bodyLength: Int? {
        switch self {
        case .uploadDataPUT, .uploadDataPOST, .uploadFilePUT, .uploadFilePOST: return LabRoutes.uploadLength
        case .outbox: return LabNote.text.utf8.count
        default: return nil
        }
    }
}

/// The lab server's routes, each answered with a length, so that the connection can be kept alive.
enum LabRoutes {
    static let uploadLength = 200_000
    static let events = "id: 1\ndata: one\n\nid: 2\ndata: two\n\n"

    /// A file of ``uploadLength`` bytes, written once; uploaded from disk (chunked on Linux).
    static let uploadFile: URL = {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("lab-upload-\(UUID().uuidString).bin")
        _ = FileManager.default.createFile(atPath: url.path, contents: uploadBody)
        return url
    }()

    static let uploadBody = Data((0..<uploadLength).map { UInt8(truncatingIfNeeded: $0 &* 7) })

    static func install(on server: LoopbackServer) {
        server.route("/lab/warm-up") { _ in .json(#"{"warm":true}"#) }
        server.route("/lab/json") { _ in .json(#"{"name":"Pancakes","ingredients":["flour","milk","eggs"],"steps":["mix","fry"]}"#) }
        server.route("/lab/empty") { _ in LoopbackResponse(status: 204) }
        server.route("/lab/upload") { request in .json(#"{"bytes":\#(request.body.count)}"#) }
        server.route("/lab/bytes") { _ in LoopbackResponse(headers: ["Content-Type": "application/octet-stream"], body: Data(count: 65_536)) }
        server.route("/lab/resumable") { _ in
            LoopbackResponse(
                headers: ["Content-Type": "application/octet-stream", "ETag": #""lab-1""#, "Accept-Ranges": "bytes"], body: Data(count: 65_536))
        }
        server.route("/lab/stream") { _ in LoopbackResponse(headers: ["Content-Type": "application/octet-stream"], body: Data(count: 8192)) }
        server.route("/lab/events") { _ in LoopbackResponse(headers: ["Content-Type": "text/event-stream"], body: Data(events.utf8)) }
        server.route("/lab/outbox") { _ in LoopbackResponse(status: 201, body: Data("ok".utf8)) }
    }
}

/// `uploadBody` sent with `method` to `url`; the answer is `{"bytes": N}`, the body length the server read.
struct LabUpload: UploadRequest {
    typealias Success = Data
    let url: URL
    let method: String
    let uploadBody: UploadBody
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// Server-sent events, reconnecting after a dropped connection at once (0.1 s), so that a reconnection fits in the
/// cell's second.
struct LabEvents: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    var reconnectPolicy: ReconnectPolicy? { ReconnectPolicy(delay: 0.1) }
    func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// A raw chunk stream, without reconnection.
struct LabChunks: StreamRequest {
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// An outbox entry POSTed to a full URL (the lab's servers are one per cell).
struct LabNote: OutboxRequest, NoContentRequest {
    static let text = String(repeating: "note ", count: 200)
    var url: String
    var identifier: String { url }
    var validHTTPStatusCodes: [Int] { [200, 201, 204] }
    var shouldEnforceNoContent: Bool { false }

    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        guard let target = URL(string: url) else { return completion(.failure(URLError(.badURL))) }
        var request = URLRequest(url: target)
        request.httpMethod = "POST"
        request.httpBody = Data(Self.text.utf8)
        completion(.success(request))
    }
}

/// What a cell must end with.
enum LabExpectation: Equatable {
    case success
    case error(Set<URLError.Code>)
    case successOrError(Set<URLError.Code>)

    /// A connection lost before any answer: Linux reports a FIN as −1011 and a reset as −1005.
    static let lostCodes: Set<URLError.Code> = [.networkConnectionLost, .badServerResponse]

    /// The contract (issue 46): a server that never answers ends at its timeout; a cut answer is −1005 (as for a
    /// fresh connection in docs/faults.md); a connection that died before any answer is sent again on a fresh
    /// connection, whole, when that is safe (idempotent, or an outbox entry), and otherwise fails at once; an
    /// outbox entry is always sent in the end (its retries carry its key).
    ///
    /// On Linux a request that must not be sent twice never rides a kept-alive connection (`SentBody`): in the reused
    /// column it goes on a new connection of its own, which the fault (aimed at a connection's second request) never
    /// hits, so it succeeds; the check of its arrival makes sure it was a connection's first request.
    static func of(_ row: LabRow, _ column: LabColumn, _ kind: LabKind) -> LabExpectation {
        if kind == .outbox { return .success }
        if column == .reused, !kind.isSafeToResend, unsafeRequestsHaveConnectionsOfTheirOwn { return .success }
        if row.waitsForTimeout { return .error([.timedOut]) }
        if row == .disconnectDuringResponseBody {
            // An answer had begun: never sent again automatically; an event stream reconnects (its own policy).
            return kind == .events ? .success : .error([.networkConnectionLost])
        }
        if row.diesBeforeAnswer {
            // Sent again by libcurl (a reused connection, on the way back) or by the operation (see
            // `LostConnectionResend`): the fault fires once, so the second connection answers.
            return kind.isSafeToResend ? .success : .error(lostCodes)
        }
        // Answered, then closed: the next request (the reused column's) takes a fresh connection, or meets the close.
        if column == .fresh || kind.isSafeToResend { return .success }
        return .successOrError(lostCodes)
    }

    /// Whether a request that must not be sent twice goes on a connection of its own (Linux; see `SentBody`).
    static var unsafeRequestsHaveConnectionsOfTheirOwn: Bool {
        #if canImport(FoundationNetworking)
        return true
        #else
        return false
        #endif
    }

    var text: String {
        func codes(_ set: Set<URLError.Code>) -> String { set.map { String($0.rawValue) }.sorted().joined(separator: "/") }
        switch self {
        case .success: return "success"
        case .error(let set): return "URLError " + codes(set)
        case .successOrError(let set): return "success or URLError " + codes(set)
        }
    }
}
