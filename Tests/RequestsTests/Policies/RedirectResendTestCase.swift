#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// What every kind below sends: `body` POSTed to `url` with `headers` (an upload sends its `UploadBody` instead).
struct Post: Sendable {
    let url: URL
    var body = Data()
    var headers: [String: String] = [:]
    var limits: TransferLimits?
    var method = "POST"
    func make(withBody: Bool = true) -> URLRequest {
        var request = URLRequest(url: url, timeoutInterval: 60)
        request.httpMethod = method
        if withBody, method == "POST" { request.httpBody = body }
        headers.forEach { request.setValue($0.value, forHTTPHeaderField: $0.key) }
        return request
    }
}

struct PostData: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let post: Post
    var identifier: String { post.url.absoluteString }
    var limits: TransferLimits? { post.limits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(post.make())) }
    func processData(_ data: Data) throws -> Data { data }
}

struct PostDecodable: DecodableRequest {
    typealias Success = ServedRecipe
    typealias Failure = Error
    let post: Post
    var identifier: String { post.url.absoluteString }
    var limits: TransferLimits? { post.limits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(post.make())) }
}

struct PostNoContent: NoContentRequest {
    typealias Failure = Error
    let post: Post
    var identifier: String { post.url.absoluteString }
    var limits: TransferLimits? { post.limits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(post.make())) }
}

struct PostText: TextRequest {
    let post: Post
    var identifier: String { post.url.absoluteString }
    var limits: TransferLimits? { post.limits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(post.make())) }
}

struct PostDownload: DownloadRequest {
    let post: Post
    var identifier: String { post.url.absoluteString }
    var limits: TransferLimits? { post.limits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(post.make())) }
}

struct PostUpload: UploadRequest {
    typealias Success = Data
    let post: Post
    let uploadBody: UploadBody
    var identifier: String { post.url.absoluteString }
    var limits: TransferLimits? { post.limits }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(post.make(withBody: false))) }
    func processData(_ data: Data) throws -> Data { data }
}

struct PostStream: StreamRequest {
    let post: Post
    var identifier: String { post.url.absoluteString }
    var limits: TransferLimits? { post.limits ?? .stream }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(post.make())) }
}

let resendRecipe = #"{"name":"Pancakes","ingredients":[],"steps":[]}"#

/// Every kind of request, POSTing a body.
enum ResendKind: String, CaseIterable {
    case data, decodable, noContent, text, download, uploadData, uploadFile, uploadMultipart, uploadStreamedMultipart, stream
    var isUpload: Bool { rawValue.hasPrefix("upload") }
}

/// One request's outcome: its completions (the bytes it produced, as the caller sees them) and the tasks it made.
final class ResendRun: @unchecked Sendable {
    let results = Recorder<Result<Data, Error>>()
    let tasks = Recorder<any TransportTask>()
    let chunks = Recorder<Data>()
    var operation: Operation!
    var error: Error? { results.values.first?.failure }
    var bytes: Data? { results.values.first?.success }
}

/// Records redirects and summaries; calls `onRedirect` at the first redirect.
final class ResendMonitor: RequestEventMonitor, @unchecked Sendable {
    let redirects = Recorder<URL>()
    let summaries = Recorder<RequestSummary>()
    let onRedirect = Box<@Sendable () -> Void>()
    func requestWillRedirect(_ attempt: RequestAttempt, response: HTTPURLResponse, to request: URLRequest) {
        request.url.map(redirects.append)
        if redirects.count == 1 { onRedirect.value?() }
    }
    func requestDidFinish(_ summary: RequestSummary) { summaries.append(summary) }
}

/// A session delegate that sends every redirect to `target` (when set), on its queue.
final class Rerouter: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    let target: URL?
    let onMain = Recorder<Bool>()
    init(_ target: URL?) { self.target = target }
    func urlSession(
        _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
        newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
    ) {
        onMain.append(Thread.isMainThread)
        var changed = request
        if let target { changed.url = target }
        completionHandler(changed)
    }
}

/// Attacks on the 307/308 resend (`RedirectResend`) from outside: every kind of request, limits, cancellation,
/// origins, retries, the authenticator, the response cache and the caller's session delegate.
class RedirectResendTestCase: XCTestCase {
    let server = TestServer.shared
    var before: Set<String> = []
    var file: URL!
    /// 200 000 bytes that are not a repetition of a short pattern, so that a cut or a shift shows.
    let payload = Data((0..<200_000).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) })

    override func setUp() {
        super.setUp()
        before = transferLeftovers()
        file = FileManager.default.temporaryDirectory.appendingPathComponent("resend-attack-\(UUID().uuidString)")
        try? payload.write(to: file)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(at: file)
        super.tearDown()
    }

    // MARK: - Helpers

    /// A route that records each request and answers `answer`.
    func recording(_ answer: LoopbackResponse? = nil, _ path: String = "/resend/\(UUID().uuidString)") -> (String, Recorder<LoopbackRequest>) {
        let seen = Recorder<LoopbackRequest>()
        let answer = answer ?? .json(resendRecipe)
        server.route(path) { request in
            seen.append(request)
            return answer
        }
        return (path, seen)
    }

    /// A route that records each request and redirects it to `location` with `status`.
    func hop(_ status: Int, to location: String, on target: LoopbackServer? = nil) -> (String, Recorder<LoopbackRequest>) {
        let path = "/resend-hop/\(UUID().uuidString)"
        let seen = Recorder<LoopbackRequest>()
        (target ?? server).route(path) { request in
            seen.append(request)
            return LoopbackResponse(status: status, headers: ["Location": location], body: Data("moved".utf8))
        }
        return (path, seen)
    }

    func uploadBody(_ kind: ResendKind) -> UploadBody {
        var form = MultipartFormData()
        if kind == .uploadStreamedMultipart { form.streamingThreshold = 10 }
        form.append(payload, name: "part", fileName: "p.bin")
        switch kind {
        case .uploadFile: return .file(file)
        case .uploadMultipart, .uploadStreamedMultipart: return .multipart(form)
        default: return .data(payload)
        }
    }

    /// Whether the landing received the kind's body whole.
    func landedWhole(_ request: LoopbackRequest?, _ kind: ResendKind) -> Bool {
        guard let request, request.method == "POST" else { return false }
        if kind == .uploadMultipart || kind == .uploadStreamedMultipart { return request.body.range(of: payload) != nil }
        return request.body == payload
    }

    /// Starts `kind` POSTing `post` (with `payload` as its body) on `queue`; the run holds its outcome and tasks.
    func start(_ kind: ResendKind, _ post: Post, on queue: OperationQueue, session: URLSession = testSession, run: ResendRun = ResendRun()) -> ResendRun {
        var post = post
        post.body = payload
        let done: @Sendable (Result<Data, Error>) -> Void = { run.results.append($0) }
        queue.isSuspended = true
        defer { queue.isSuspended = false }
        switch kind {
        case .data: run.operation = queue.addRequest(PostData(post: post), session: session) { done($0) }
        case .decodable: run.operation = queue.addRequest(PostDecodable(post: post), session: session) { done($0.map { Data($0.name.utf8) }) }
        case .noContent: run.operation = queue.addRequest(PostNoContent(post: post), session: session) { done($0.map { Data() }) }
        case .text: run.operation = queue.addRequest(PostText(post: post), session: session) { done($0.map { Data($0.utf8) }) }
        case .download:
            run.operation = queue.addRequest(PostDownload(post: post), session: session) { result in
                done(
                    result.flatMap { url in
                        defer { try? FileManager.default.removeItem(at: url) }
                        return Result { try Data(contentsOf: url) }
                    })
            }
        case .uploadData, .uploadFile, .uploadMultipart, .uploadStreamedMultipart:
            run.operation = queue.addRequest(PostUpload(post: post, uploadBody: uploadBody(kind)), session: session) { done($0) }
        case .stream:
            run.operation = queue.addRequest(PostStream(post: post), session: session, receive: { run.chunks.append($0) }) { result in
                done(result.map { _ in run.chunks.values.reduce(Data(), +) }.mapError { $0 })
            }
        }
        observe(run)
        return run
    }

    func observe(_ run: ResendRun) {
        let record: TaskObserver = { run.tasks.append($0) }
        switch run.operation {
        case let op as NetworkRequestOperation<PostData>: op.observeTasks(record)
        case let op as NetworkRequestOperation<PostDecodable>: op.observeTasks(record)
        case let op as NetworkRequestOperation<PostNoContent>: op.observeTasks(record)
        case let op as NetworkRequestOperation<PostText>: op.observeTasks(record)
        case let op as NetworkRequestOperation<PostDownload>: op.observeTasks(record)
        case let op as NetworkRequestOperation<PostUpload>: op.observeTasks(record)
        case let op as NetworkRequestOperation<PostStream>: op.observeTasks(record)
        default: XCTFail("unknown operation \(String(describing: run.operation))")
        }
    }

    /// Waits for the outcome with the main queue served; checks one completion, a finished operation, no task still
    /// running and no temporary file left.
    func finish(_ run: ResendRun, _ name: String, file: StaticString = #filePath, line: UInt = #line) {
        waitUntil(timeout: 60, "\(name): the outcome", file: file, line: line) { run.results.count > 0 && run.operation.isFinished }
        waitUntil(timeout: 60, "\(name): every task completed", file: file, line: line) { run.tasks.values.allSatisfy { $0.sessionTask.map { $0.state == .completed } ?? true } }
        waitUntil(timeout: 20, "\(name): no temporary file left", file: file, line: line) { transferLeftovers().subtracting(self.before).isEmpty }
        XCTAssertEqual(run.results.count, 1, "\(name): completions", file: file, line: line)
    }

    func run(_ kind: ResendKind, _ post: Post, policies: RequestPolicies = RequestPolicies(), session: URLSession = testSession) -> ResendRun {
        let queue = OperationQueue()
        queue.requestPolicies = policies
        let run = start(kind, post, on: queue, session: session)
        finish(run, kind.rawValue)
        return run
    }

    // MARK: - Every kind
}
