#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// The one rule for "has a body" (`ResponseBodyRule`), over the loopback server: every status and method pair the rule
/// knows, for every kind of request, has the outcome the rule states. The limits are 1 KiB, far below the 64 KiB a
/// `HEAD` and a `304` announce, so that a size check that took such a length for a body would fail the cell.
///
/// A `1xx` is never the final response URLSession hands over (it answers `100 Continue` itself and skips interim
/// responses), so the loopback cells cover `HEAD`, `204`, `205`, `304` and a `200` with `Content-Length: 0`, and
/// ``testTheRuleOverEveryStatus`` covers the whole table, `1xx` included.
final class ResponseBodyRuleTests: XCTestCase {
    private let server = TestServer.shared
    private static let limit: Int64 = 1024
    private static let announced = 64 * 1024

    /// A response the rule knows: the request's method, and what the server answers.
    private struct Cell {
        let name: String
        let method: String
        let status: Int
        let response: LoopbackResponse
    }

    private var cells: [Cell] {
        let resource = LoopbackResponse(headers: ["Content-Type": "application/json"], body: Data(repeating: 0x20, count: Self.announced))
        return [
            Cell(name: "HEAD of a 64 KiB resource", method: "HEAD", status: 200, response: resource),
            Cell(name: "204", method: "GET", status: 204, response: LoopbackResponse(status: 204)),
            Cell(name: "204 to a POST", method: "POST", status: 204, response: LoopbackResponse(status: 204)),
            Cell(name: "205", method: "GET", status: 205, response: LoopbackResponse(status: 205)),
            Cell(
                name: "304 announcing 64 KiB", method: "GET", status: 304,
                response: LoopbackResponse(status: 304, headers: ["Content-Length": String(Self.announced), "ETag": "\"v1\""])),
            Cell(name: "200 with Content-Length: 0", method: "GET", status: 200, response: LoopbackResponse(headers: ["Content-Type": "application/json"])),
        ]
    }

    private enum Kind: String, CaseIterable {
        case data, decodableEmpty = "decodable (EmptyBody)", decodableValue = "decodable (a struct)", noContent = "no-content", text
        case download, stream
    }

    /// What a cell ended with, comparable across kinds.
    private enum Outcome: Equatable, CustomStringConvertible {
        case bytes(Int)
        case text(String)
        case success
        case file(Int64)
        case stream(elements: Int, connections: Int)
        case unexpectedEmptyBody(status: Int, method: String)
        case other(String)

        var description: String {
            switch self {
            case let .bytes(count): return "\(count) bytes"
            case let .text(text): return "text \"\(text)\""
            case .success: return "success"
            case let .file(size): return "a file of \(size) bytes"
            case let .stream(elements, connections): return "a stream of \(elements) elements over \(connections) connections"
            case let .unexpectedEmptyBody(status, method): return "unexpectedEmptyBody(\(status), \(method))"
            case let .other(text): return text
            }
        }

        init(failure: Error) {
            if case let .unexpectedEmptyBody(status, method)? = failure as? RequestQueueError {
                self = .unexpectedEmptyBody(status: status, method: method)
            } else {
                self = .other("\(failure)")
            }
        }
    }

    /// The outcome the rule states for `kind` on `cell` (see `ResponseBodyRule`).
    private func stated(_ kind: Kind, _ cell: Cell) -> Outcome {
        let hasBody = ResponseBodyRule.hasBody(status: cell.status, method: cell.method)
        switch kind {
        case .data: return .bytes(0)
        case .text: return .text("")
        case .noContent: return .success
        case .download: return .file(0)
        // Without a body, the empty value; an empty body of a response that has one is an error unless listed.
        case .decodableEmpty: return hasBody ? .unexpectedEmptyBody(status: cell.status, method: cell.method) : .success
        case .decodableValue: return .unexpectedEmptyBody(status: cell.status, method: cell.method)
        // Without a body the stream ends at the headers: no connection is counted, and it does not reconnect.
        case .stream: return .stream(elements: 0, connections: hasBody ? 1 : 0)
        }
    }

    func testEveryKindAgreesWithTheRuleOnEveryResponseItKnows() throws {
        let queue = OperationQueue()
        queue.requestPolicies = RequestPolicies(limits: TransferLimits(maximumBodySize: Self.limit, maximumDownloadSize: Self.limit))
        var table: [String] = []
        for cell in cells {
            let path = "/body-rule/\(UUID().uuidString)"
            server.route(path) { _ in cell.response }
            let url = server.url(path)
            for kind in Kind.allCases {
                let outcome = run(kind, url: url, method: cell.method, on: queue)
                let expected = stated(kind, cell)
                table.append("\(cell.name) × \(kind.rawValue): \(outcome)")
                XCTAssertEqual(outcome, expected, "\(cell.name) × \(kind.rawValue)")
            }
        }
        reportProgress(table.joined(separator: "\n"))
    }

    func testTheRuleOverEveryStatus() {
        for status in 100...599 {
            let noBody = (100..<200).contains(status) || [204, 205, 304].contains(status)
            XCTAssertEqual(ResponseBodyRule.hasBody(status: status, method: "GET"), !noBody, "\(status)")
            XCTAssertFalse(ResponseBodyRule.hasBody(status: status, method: "HEAD"), "HEAD \(status)")
            XCTAssertFalse(ResponseBodyRule.hasBody(status: status, method: "head"), "head \(status)")
        }
        XCTAssertTrue(ResponseBodyRule.hasBody(status: 200, method: nil))
        let headers = ["Content-Length": "65536"]
        let url = server.url("/unused")
        let notModified = HTTPURLResponse(url: url, statusCode: 304, httpVersion: "HTTP/1.1", headerFields: headers)
        let ok = HTTPURLResponse(url: url, statusCode: 200, httpVersion: "HTTP/1.1", headerFields: headers)
        XCTAssertEqual(notModified.map { ResponseBodyRule.expectedLength(of: $0, method: "GET") }, 0)
        XCTAssertEqual(ok.map { ResponseBodyRule.expectedLength(of: $0, method: "HEAD") }, 0)
        XCTAssertEqual(ok.map { ResponseBodyRule.expectedLength(of: $0, method: "GET") }, 65536)
    }

    func testAServerSentEventStreamAnsweredWithoutABodyEndsWithoutAnEvent() {
        // An event stream's decoder accepts a response without a body whatever its type: there is nothing to decode.
        for status in [204, 205, 304] {
            let response = HTTPURLResponse(url: server.url("/events"), statusCode: status, httpVersion: "HTTP/1.1", headerFields: [:])
            XCTAssertNoThrow(try response.map { try ServerSentEventDecoder().validate($0) }, "\(status)")
        }
        let notEvents = HTTPURLResponse(url: server.url("/events"), statusCode: 200, httpVersion: "HTTP/1.1", headerFields: ["Content-Type": "text/plain"])
        XCTAssertThrowsError(try notEvents.map { try ServerSentEventDecoder().validate($0) })
    }

    // MARK: - One cell

    private func run(_ kind: Kind, url: URL, method: String, on queue: OperationQueue) -> Outcome {
        switch kind {
        case .data:
            return outcome(of: RuleData(url: url, method: method), on: queue) { .bytes($0.count) }
        case .decodableEmpty:
            return outcome(of: RuleDecodable<EmptyBody>(url: url, method: method), on: queue) { _ in .success }
        case .decodableValue:
            return outcome(of: RuleDecodable<RuleProfile>(url: url, method: method), on: queue) { .other("decoded \($0)") }
        case .noContent:
            return outcome(of: RuleNoContent(url: url, method: method), on: queue) { _ in .success }
        case .text:
            return outcome(of: RuleText(url: url, method: method), on: queue) { .text($0) }
        case .download:
            return outcome(of: RuleDownload(url: url, method: method), on: queue) { file in
                defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
                return .file(FileSink.size(of: file))
            }
        case .stream:
            let done = expectation(description: "the stream's outcome")
            let result = Box<Result<StreamSummary, Error>>()
            let elements = Recorder<Data>()
            queue.addRequest(RuleStream(url: url, method: method, ownLimits: TransferLimits(maximumBodySize: Self.limit)), session: testSession) {
                elements.append($0)
            } completion: {
                result.value = $0.mapError { $0 }
                done.fulfill()
            }
            wait(for: [done], timeout: 30)
            switch result.value {
            case let .success(summary)?:
                XCTAssertEqual(summary.elements, elements.count)
                return .stream(elements: elements.count, connections: summary.connections)
            case let .failure(error)?: return Outcome(failure: error)
            case nil: return .other("no outcome")
            }
        }
    }

    private func outcome<R: DataRequest>(of request: R, on queue: OperationQueue, _ success: @escaping (R.Success) -> Outcome) -> Outcome {
        let done = expectation(description: "\(R.self)'s completion")
        let result = Box<Outcome>()
        queue.addRequest(request, session: testSession) { completion in
            switch completion {
            case let .success(value): result.value = success(value)
            case let .failure(error): result.value = Outcome(failure: error)
            }
            done.fulfill()
        }
        wait(for: [done], timeout: 30)
        return result.value ?? .other("no outcome")
    }
}

// MARK: - The kinds, with a method of their choosing and 304 among their valid statuses

private let validWithNotModified = Array(200..<300) + [304]

private func ruleRequest(_ url: URL, _ method: String) -> URLRequest {
    var request = URLRequest(url: url)
    request.httpMethod = method
    return request
}

private struct RuleProfile: Decodable, Sendable {
    let name: String
}

private struct RuleData: DataRequest {
    typealias Success = Data
    let url: URL
    let method: String
    var identifier: String { "\(method) \(url)" }
    var validHTTPStatusCodes: [Int] { validWithNotModified }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(ruleRequest(url, method))) }
    func processData(_ data: Data) throws -> Data { data }
}

private struct RuleDecodable<S: Decodable & Sendable>: DecodableRequest {
    typealias Success = S
    let url: URL
    let method: String
    var identifier: String { "\(method) \(url)" }
    var validHTTPStatusCodes: [Int] { validWithNotModified }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(ruleRequest(url, method))) }
}

private struct RuleNoContent: NoContentRequest {
    let url: URL
    let method: String
    var identifier: String { "\(method) \(url)" }
    var validHTTPStatusCodes: [Int] { validWithNotModified }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(ruleRequest(url, method))) }
}

private struct RuleText: TextRequest {
    let url: URL
    let method: String
    var identifier: String { "\(method) \(url)" }
    var validHTTPStatusCodes: [Int] { validWithNotModified }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(ruleRequest(url, method))) }
}

private struct RuleDownload: DownloadRequest {
    let url: URL
    let method: String
    var identifier: String { "\(method) \(url)" }
    var validHTTPStatusCodes: [Int] { validWithNotModified }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(ruleRequest(url, method))) }
}

private struct RuleStream: StreamRequest {
    let url: URL
    let method: String
    let ownLimits: TransferLimits
    var identifier: String { "\(method) \(url)" }
    var validHTTPStatusCodes: [Int] { validWithNotModified }
    var limits: TransferLimits? { ownLimits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(ruleRequest(url, method))) }
}
