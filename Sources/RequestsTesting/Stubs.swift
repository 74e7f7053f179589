#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// The stubbed responses of one or more sessions, and a record of the requests they received.
///
/// ```swift
/// let (session, stubs) = URLSession.stubbed()
/// stubs.stub("GET", path: "/users/7", .json(#"{"name":"Ada"}"#))
/// stubs.stub(path: "/flaky", .status(503), .json("{}"))   // first 503, then 200 for every later call
/// ```
///
/// The newest stub that matches a request answers it. Stubs are scoped to the sessions made by
/// ``makeSession(configuration:)``: other stubbed sessions in the same process never see them.
/// Keep the `Stubs` alive while its sessions are in use: once it is released, their requests fail with
/// ``StubError``. Thread-safe.
public final class Stubs: @unchecked Sendable {
    private struct Entry {
        let id: Int
        let description: String
        let matches: @Sendable (URLRequest) -> Bool
        let responses: [StubResponse]
        var calls = 0
    }

    /// The protocol class of this object's sessions, its own, and the key that finds this object from it.
    private let protocolClass: AnyClass
    let key: ObjectIdentifier
    private let lock = NSLock()
    private var entries: [Entry] = []
    private var nextEntryID = 0
    private var recorded: [RecordedRequest] = []
    /// Answers a request no stub matched (a HAR replay), and says whether it matched something of its own.
    private let fallback: (@Sendable (URLRequest) -> (response: StubResponse, matched: Bool))?

    /// Creates an empty set of stubs. Every request fails with ``StubError`` until a stub matches it.
    public convenience init() {
        self.init(fallback: nil)
    }

    init(fallback: (@Sendable (URLRequest) -> (response: StubResponse, matched: Bool))?) {
        self.fallback = fallback
        (protocolClass, key) = StubProtocolClasses.make(number: StubsRegistry.shared.nextNumber())
        StubsRegistry.shared.add(self)
    }

    deinit {
        StubsRegistry.shared.remove(key)
    }

    /// A session whose requests these stubs answer: a copy of `configuration` (ephemeral by default)
    /// with no cache, and a `URLProtocol` of this object's own as its only protocol class.
    public func makeSession(configuration: URLSessionConfiguration = .ephemeral) -> URLSession {
        let configuration = (configuration.copy() as? URLSessionConfiguration) ?? .ephemeral
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.protocolClasses = [protocolClass]
        return URLSession(configuration: configuration)
    }

    // MARK: Stubbing

    /// Answers requests whose URL path is `path` (for example `/users/7`; the query is ignored), and whose
    /// method is `method` when given. Each call takes the next response; the last one then repeats.
    public func stub(_ method: String? = nil, path: String, _ response: StubResponse, _ then: StubResponse...) {
        add("\(method ?? "any method") \(path)", [response] + then) { request in
            Self.method(of: request, is: method) && request.url?.path == path
        }
    }

    /// Answers requests for exactly `url` (query included), and whose method is `method` when given.
    /// Each call takes the next response; the last one then repeats.
    public func stub(_ method: String? = nil, url: URL, _ response: StubResponse, _ then: StubResponse...) {
        add("\(method ?? "any method") \(url.absoluteString)", [response] + then) { request in
            Self.method(of: request, is: method) && request.url?.absoluteString == url.absoluteString
        }
    }

    /// Answers requests for which `predicate` returns `true`. Each call takes the next response;
    /// the last one then repeats. The predicate runs on Foundation's threads, outside any lock of `Stubs`.
    /// It sees the body as `httpBody`, even one sent as a stream (not for upload tasks on Linux).
    public func stub(
        where predicate: @escaping @Sendable (URLRequest) -> Bool,
        _ response: StubResponse,
        _ then: StubResponse...
    ) {
        add("a predicate", [response] + then, matches: predicate)
    }

    /// Removes every stub and forgets every recorded request. The sessions keep working.
    public func reset() {
        withLock {
            entries.removeAll()
            recorded.removeAll()
        }
    }

    // MARK: Recorded requests

    /// Every request received so far, matched or not, in the order they arrived.
    public var requests: [RecordedRequest] {
        withLock { recorded }
    }

    /// The requests no stub matched. Each one failed with ``StubError``.
    public var unmatchedRequests: [RecordedRequest] {
        requests.filter { !$0.wasMatched }
    }

    /// Forgets the recorded requests, keeping the stubs.
    public func clearRequests() {
        withLock { recorded.removeAll() }
    }

    // MARK: Answering (called by StubProtocol)

    /// Records `request` and picks its response: the next one of the newest matching stub, or a ``StubError``.
    func response(for request: URLRequest) -> StubResponse {
        var request = request
        let method = request.httpMethod ?? "GET"
        guard let url = request.url else {
            return .failure(StubError(message: "The request has no URL."))
        }
        // A body stream can be read once: read it here, and show predicates the body as `httpBody`.
        if request.httpBody == nil, let stream = request.httpBodyStream {
            request.httpBody = Self.readAll(stream)
        }
        // Run the predicates outside the lock, so that one may call back into this object.
        let candidates = withLock { entries }
        let match = candidates.last { $0.matches(request) }
        let answer = match == nil ? fallback?(request) : nil
        let headers = request.allHTTPHeaderFields ?? [:]
        let body = request.httpBody

        return withLock {
            let index = match.flatMap { match in entries.firstIndex { $0.id == match.id } }
            let wasMatched = index != nil || answer?.matched == true
            recorded.append(RecordedRequest(method: method, url: url, headers: headers, body: body, wasMatched: wasMatched))
            if index == nil, let answer { return answer.response }
            guard let index else {
                let known = entries.isEmpty ? "no stubs" : "stubs: " + entries.map(\.description).joined(separator: ", ")
                return .failure(StubError(message: "No stub matched \(method) \(url.absoluteString) (\(known))."))
            }
            let entry = entries[index]
            entries[index].calls += 1
            return entry.responses[min(entry.calls, entry.responses.count - 1)]
        }
    }

    private func add(_ description: String, _ responses: [StubResponse], matches: @escaping @Sendable (URLRequest) -> Bool) {
        withLock {
            nextEntryID += 1
            entries.append(Entry(id: nextEntryID, description: description, matches: matches, responses: responses))
        }
    }

    /// Reads a body stream to its end. The stub is its only reader: nothing else sends this request.
    private static func readAll(_ stream: InputStream) -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        stream.open()
        defer { stream.close() }
        while true {
            let count = stream.read(&buffer, maxLength: buffer.count)
            guard count > 0 else { return data }
            data.append(buffer, count: count)
        }
    }

    private static func method(of request: URLRequest, is method: String?) -> Bool {
        guard let method else { return true }
        return (request.httpMethod ?? "GET").caseInsensitiveCompare(method) == .orderedSame
    }

    private func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }
}

extension URLSession {
    /// A new ephemeral, uncached session answered by a new ``Stubs``. Keep `stubs` alive while you use the session.
    public static func stubbed() -> (session: URLSession, stubs: Stubs) {
        let stubs = Stubs()
        return (stubs.makeSession(), stubs)
    }
}

/// Finds the `Stubs` of a protocol class by the key of its `Tag`, and numbers them.
/// Holds them weakly, so a released `Stubs` leaves.
final class StubsRegistry: @unchecked Sendable {
    private struct WeakStubs {
        weak var stubs: Stubs?
    }

    static let shared = StubsRegistry()
    private let lock = NSLock()
    private var byKey: [ObjectIdentifier: WeakStubs] = [:]
    private var count = 0

    /// A number never handed out before.
    func nextNumber() -> Int {
        lock.lock()
        defer { lock.unlock() }
        count += 1
        return count
    }

    func add(_ stubs: Stubs) {
        lock.lock()
        byKey[stubs.key] = WeakStubs(stubs: stubs)
        lock.unlock()
    }

    func remove(_ key: ObjectIdentifier) {
        lock.lock()
        byKey[key] = nil
        lock.unlock()
    }

    func stubs(for key: ObjectIdentifier) -> Stubs? {
        lock.lock()
        defer { lock.unlock() }
        return byKey[key]?.stubs
    }
}

/// The engine's side of a replay (``HARReplay``): a request the engine sends on a session registered with
/// `ReplaySessions` is answered here as a stub would answer it, with the body it sends (which a `URLProtocol` never
/// sees on Linux for an upload), and delivered by the engine's replay transport, which serves every request kind.
extension Stubs: ReplaySource {
    package func answer(for request: URLRequest, body: Data?, reply: @escaping @Sendable (ReplayedAnswer) -> Void) {
        var request = request
        // One setter: on Linux, setting `httpBodyStream` to `nil` clears `httpBody` too.
        if let body { request.httpBody = body }
        let response = self.response(for: request)
        if let deferred = response.deferred {
            deferred.whenReady { reply($0.replayed) }
        } else if response.delay > 0 {
            DispatchQueue.global().asyncAfter(deadline: .now() + response.delay) { reply(response.replayed) }
        } else {
            reply(response.replayed)
        }
    }
}
