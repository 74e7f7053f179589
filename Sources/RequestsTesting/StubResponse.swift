#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// What a stub answers with: a status, headers and a body, or an error; optionally after a delay.
public struct StubResponse: Sendable {
    /// The HTTP status code. Default `200`.
    public var status: Int
    /// The response headers.
    public var headers: [String: String]
    /// The response body, delivered in one piece.
    public var body: Data
    /// When set, the task fails with this error instead of receiving a response.
    public var error: (any Error)?
    /// Seconds to wait before answering. Cancelling the task during the wait delivers nothing more.
    public var delay: TimeInterval
    /// An answer that comes later, from elsewhere (a HAR replay's request sent to the server): delivered like a
    /// delayed one, when it is ready.
    var deferred: DeferredAnswer?
    /// The body in the pieces a replay delivers it in (a recorded stream's), each after its delay; `nil`: ``body`` in
    /// one piece.
    var pieces: [ReplayedPiece]?
    /// The error the transfer breaks with after the body (a recorded transfer cut mid-body); only for the engine's
    /// replay transport.
    var errorAfterBody: (any Error)?

    /// A response with the given status, headers and body.
    public init(status: Int = 200, headers: [String: String] = [:], body: Data = Data(), delay: TimeInterval = 0) {
        self.status = status
        self.headers = headers
        self.body = body
        self.error = nil
        self.delay = delay
    }

    /// A response with `Content-Type: application/json` and `json` as its body.
    public static func json(_ json: String, status: Int = 200) -> StubResponse {
        StubResponse(status: status, headers: ["Content-Type": "application/json"], body: Data(json.utf8))
    }

    /// A response with `Content-Type: text/plain; charset=utf-8` and `text` as its body.
    public static func text(_ text: String, status: Int = 200) -> StubResponse {
        StubResponse(status: status, headers: ["Content-Type": "text/plain; charset=utf-8"], body: Data(text.utf8))
    }

    /// An empty response with the given status, for example `.status(204)` or `.status(503)`.
    public static func status(_ status: Int) -> StubResponse {
        StubResponse(status: status)
    }

    /// No response: the task fails with `error`, for example `URLError(.timedOut)`.
    public static func failure(_ error: any Error) -> StubResponse {
        var response = StubResponse()
        response.error = error
        return response
    }

    /// This response, answered after `seconds`.
    public func delayed(by seconds: TimeInterval) -> StubResponse {
        var response = self
        response.delay = seconds
        return response
    }
}

/// A request as a stub received it.
public struct RecordedRequest: Sendable, Equatable {
    /// The HTTP method, for example `GET`.
    public let method: String
    /// The full URL.
    public let url: URL
    /// The headers set on the `URLRequest`. On Linux the session's `httpAdditionalHeaders` are not among them:
    /// Foundation adds those below the protocol.
    public let headers: [String: String]
    /// The body (`httpBody`, or what `httpBodyStream` held). `nil` without a body, and for upload tasks on Linux,
    /// whose body never reaches a stub.
    public let body: Data?
    /// Whether a stub matched it. An unmatched request failed with ``StubError``.
    public let wasMatched: Bool

    /// The value of the header `name`, compared case-insensitively.
    public func header(_ name: String) -> String? {
        headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// The error a stubbed session delivers when it cannot answer a request, for example when no stub matched it.
public struct StubError: Error, LocalizedError, CustomStringConvertible {
    /// What went wrong, naming the method and URL.
    public let message: String

    /// The message.
    public var description: String { message }
    /// The message.
    public var errorDescription: String? { message }
}

extension StubResponse {
    /// This response as the engine's replay transport delivers it.
    var replayed: ReplayedAnswer {
        if let error { return .failure(error) }
        let pieces = self.pieces ?? (body.isEmpty ? [] : [ReplayedPiece(data: body)])
        return .response(ReplayedResponse(status: status, headers: headers, pieces: pieces, errorAfterBody: errorAfterBody))
    }
}
