#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

// The endpoints the demo talks to, each a small request type.

/// Where the demo sends its requests.
enum DemoServer {
    /// Set once, before any request is made.
    nonisolated(unsafe) static var baseURL = URL(fileURLWithPath: "/")

    static func url(_ pathAndQuery: String) -> URL {
        URL(string: baseURL.absoluteString + pathAndQuery) ?? baseURL
    }

    /// Adds the demo's routes to a loopback server.
    static func addRoutes(to server: LoopbackServer) {
        server.route("/demo/login") { request in
            request.method == "POST" && request.query["user"] == "ada"
                ? .json(#"{"token":"t-4da"}"#)
                : .json(#"{"error":"unknown user","code":"E401"}"#, status: 401)
        }
        server.route("/demo/profile") { request in
            request.headers["authorization"] == "Bearer t-4da"
                ? .json(#"{"name":"Ada Lovelace","recipes":12}"#)
                : .json(#"{"error":"bad token","code":"E401"}"#, status: 401)
        }
        server.route("/demo/recipe") { request in
            let id = request.query["id"] ?? "?"
            var response = LoopbackResponse.json(#"{"id":"\#(id)","name":"Recipe \#(id)"}"#)
            response.delayMilliseconds = Int.random(in: 20...120)
            return response
        }
        server.script(
            "/demo/busy",
            [
                LoopbackResponse(status: 503, headers: ["Retry-After": "1"], body: Data(#"{"error":"busy","code":"E503"}"#.utf8)),
                .json(#"{"id":"busy","name":"Recipe served on the second try"}"#),
            ])
        server.protect(
            "/demo/vault", refreshPath: "/demo/refresh", response: .json(#"{"id":"vault","name":"Secret recipe"}"#),
            refreshDelayMilliseconds: 100)
        NotesLedger.addRoutes(to: server)
        server.route("/demo/missing") { _ in
            .json(#"{"error":"no such recipe","code":"E404"}"#, status: 404)
        }
        // A price ticker as server-sent events: the first connection drops in the middle of event 6; a
        // reconnection resumes after the Last-Event-ID it sends, and the feed ends after event 10.
        server.stream("/demo/ticker") { request in
            let after = request.headers["last-event-id"].flatMap(Int.init) ?? 0
            let ticks = (after + 1...10).map { n in "id: \(n)\nevent: price\ndata: {\"symbol\":\"RCP\",\"price\":\(100 + n * 7 % 11)}" }
            guard after == 0 else { return .events(ticks, intervalMilliseconds: 150) }
            var first = LoopbackStream.events(["retry: 400"] + ticks.prefix(5), intervalMilliseconds: 150, ending: .close)
            first.pieces.append(Data("id: 6\nevent: price\ndata: {\"sym".utf8))
            return first
        }
    }
}

struct Token: Decodable { let token: String }
struct Profile: Decodable { let name: String; let recipes: Int }
struct Recipe: Decodable { let id: String; let name: String }
struct ServerError: Decodable { let error: String; let code: String }

struct LoginRequest: DecodableRequest {
    typealias Success = Token
    typealias Failure = Error
    let user: String
    var identifier: String { "login-\(user)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: DemoServer.url("/demo/login?user=\(user)"))
        request.httpMethod = "POST"
        completion(.success(request))
    }
}

struct ProfileRequest: DecodableRequest {
    typealias Success = Profile
    typealias Failure = Error
    let token: String
    var identifier: String { "profile" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: DemoServer.url("/demo/profile"))
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        completion(.success(request))
    }
}

struct RecipeRequest: DecodableRequest {
    typealias Success = Recipe
    typealias Failure = Error
    let id: String
    var identifier: String { "recipe-\(id)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: DemoServer.url("/demo/recipe?id=\(id)"))))
    }
}

/// A request for a path, decoded as a recipe.
struct PathRequest: DecodableRequest {
    typealias Success = Recipe
    typealias Failure = Error
    let path: String
    var identifier: String { path }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: DemoServer.url(path))))
    }
}

/// A recipe from an endpoint that is sometimes busy: retried with the default policy.
struct BusyRecipeRequest: DecodableRequest {
    typealias Success = Recipe
    typealias Failure = Error
    var identifier: String { "busy" }
    var retryPolicy: RetryPolicy? { .default }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: DemoServer.url("/demo/busy"))))
    }
}

/// A recipe behind a bearer token, with an API key in the query that the log must not show.
struct VaultRequest: DecodableRequest {
    typealias Success = Recipe
    typealias Failure = Error
    var identifier: String { "vault" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: DemoServer.url("/demo/vault?api_key=demo-secret"))))
    }
}

/// Collects the log lines written from the session's threads.
final class LogLines: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []

    var values: [String] {
        lock.lock()
        defer { lock.unlock() }
        return lines
    }

    func append(_ line: String) {
        lock.lock()
        lines.append(line)
        lock.unlock()
    }
}

/// 8 MB from the server's trickling route, to a file.
struct DemoDownload: DownloadRequest {
    let destination: URL?
    var identifier: String { "demo-download" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: DemoServer.url("/trickle/8000000?chunk=65536&interval=8"))))
    }
}

/// The server's price ticker, as server-sent events that reconnect.
struct TickerRequest: StreamRequest {
    var identifier: String { "ticker" }
    func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: DemoServer.url("/demo/ticker"))))
    }
}

struct Tick: Decodable { let symbol: String; let price: Int }

/// Prints each reconnection of a stream.
struct ReconnectionPrinter: RequestEventMonitor {
    let print: @Sendable (String) -> Void
    func requestDidFail(_ attempt: RequestAttempt, error: Error, duration: TimeInterval) {
        print("connection \(attempt.number) dropped (\((error as? URLError).map { "URLError \($0.code.rawValue)" } ?? "\(error)"))")
    }
    func requestWillSend(_ attempt: RequestAttempt) {
        guard attempt.number > 1 else { return }
        print("reconnecting with Last-Event-ID: \(attempt.urlRequest.value(forHTTPHeaderField: "Last-Event-ID") ?? "none")")
    }
}

/// What a queue's monitor saw, by request identifier: the attempts sent and how each request ended. The demo's checks
/// read it, so that they hold against any server (`--url`), not only one that counts its requests.
final class AttemptLog: RequestEventMonitor, @unchecked Sendable {
    private let lock = NSLock()
    private var sent: [String: Int] = [:]
    private var finished: [String: [RequestSummary]] = [:]

    func requestWillSend(_ attempt: RequestAttempt) {
        lock.lock()
        sent[attempt.identifier, default: 0] += 1
        lock.unlock()
    }

    func requestDidFinish(_ summary: RequestSummary) {
        lock.lock()
        finished[summary.identifier, default: []].append(summary)
        lock.unlock()
    }

    /// The attempts sent for requests with this identifier, in all.
    func attemptsSent(_ identifier: String) -> Int {
        lock.lock()
        defer { lock.unlock() }
        return sent[identifier] ?? 0
    }

    /// How each request with this identifier ended, in the order they finished.
    func summaries(_ identifier: String) -> [RequestSummary] {
        lock.lock()
        defer { lock.unlock() }
        return finished[identifier] ?? []
    }
}
