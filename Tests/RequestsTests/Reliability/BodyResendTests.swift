#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// A request with a body whose kept-alive connection dies after the server read it, before any answer (the server
/// resets the connection): sent again with its whole body when it may be sent twice, and otherwise ended at once with
/// `URLError(.networkConnectionLost)`, never left waiting for its timeout (see `SentBody`).
final class BodyResendTests: XCTestCase {
    private let server = TestServer.shared

    /// A session of its own (its own connections), with a timeout far longer than any cell may take.
    private func makeSession() -> URLSession {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.timeoutIntervalForRequest = 30
        return URLSession(configuration: configuration)
    }

    /// A path whose second request (the first on the reused connection) is read and then answered with a reset; the
    /// others get a 200. Returns the bodies the server read, in order.
    private func lostSecondAnswer() -> (path: String, bodies: @Sendable () -> [Data]) {
        let path = "/resend/\(UUID().uuidString)"
        let seen = SeenBodies()
        server.route(path) { request in
            let count = seen.append(request.body)
            return count == 2 ? LoopbackResponse(fault: .resetBeforeHeaders) : .json(#"{"ok":true}"#)
        }
        return (path, { seen.all })
    }

    private func send(_ endpoint: Endpoint, on session: URLSession) async -> (Result<[String: Bool], Error>, TimeInterval) {
        let start = Date()
        do {
            let data = try await OperationQueue().response(for: endpoint, as: [String: Bool].self, session: session)
            return (.success(data), Date().timeIntervalSince(start))
        } catch {
            return (.failure(error), Date().timeIntervalSince(start))
        }
    }

    private let body = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })

    func testAnIdempotentPutIsSentAgainWithItsWholeBody() async throws {
        let (path, bodies) = lostSecondAnswer()
        let session = makeSession()
        let api = Endpoint(server.baseURL.absoluteString)
        _ = await send(api.put(path, body: .data(body, contentType: "application/octet-stream")), on: session)
        let (result, _) = await send(api.put(path, body: .data(body, contentType: "application/octet-stream")), on: session)
        XCTAssertNoThrow(try result.get())
        XCTAssertEqual(bodies(), [body, body, body], "the re-send carries the whole body")
    }

    func testAPostWithAnIdempotencyKeyIsSentAgainWithItsWholeBody() async throws {
        let (path, bodies) = lostSecondAnswer()
        let session = makeSession()
        let api = Endpoint(server.baseURL.absoluteString)
        let post = api.post(path, headers: ["Idempotency-Key": "\"k1\""], body: .data(body, contentType: "application/octet-stream"))
        _ = await send(post, on: session)
        let (result, _) = await send(post, on: session)
        XCTAssertNoThrow(try result.get())
        XCTAssertEqual(bodies(), [body, body, body])
    }

    func testAPlainPostIsNotSentAgainAndFailsAtOnce() async throws {
        let (path, bodies) = lostSecondAnswer()
        let session = makeSession()
        let api = Endpoint(server.baseURL.absoluteString)
        let post = api.post(path, body: .data(body, contentType: "application/octet-stream"))
        _ = await send(post, on: session)
        let (result, _) = await send(post, on: session)
        XCTAssertEqual((result.failure as? URLError)?.code, .networkConnectionLost, "\(result)")
        XCTAssertEqual(bodies(), [body, body], "the server applied it once")
    }

    /// A POST without a body gives libcurl nothing to ask for before it sends it again, so it goes on a connection of
    /// its own (`Connection: close`): a reset there is not on a reused connection, and libcurl does not send it again.
    func testAPlainPostWithoutABodyHasAConnectionOfItsOwnAndIsNotSentAgain() async throws {
        let (path, bodies) = lostSecondAnswer()
        let session = makeSession()
        let api = Endpoint(server.baseURL.absoluteString)
        _ = await send(api.post(path), on: session)
        let (result, _) = await send(api.post(path), on: session)
        XCTAssertEqual((result.failure as? URLError)?.code, .networkConnectionLost, "\(result)")
        XCTAssertEqual(bodies().count, 2, "the server applied it once")
    }

    /// A server that ignores `Connection: close` lets a plain POST ride a kept-alive connection after all; when that
    /// connection dies after the server read the POST, libcurl asks for the body to send it again, and is refused: the
    /// POST fails at once, and only the head of the second sending reaches the server.
    func testAPlainPostOnAConnectionKeptAgainstItsWillIsRefusedWhenLibcurlWouldSendItAgain() async throws {
        let careless = try LoopbackServer()
        defer { careless.stop() }
        careless.route("/post") { request in .json(#"{"bytes":\#(request.body.count)}"#) }
        careless.connectionPolicy = ConnectionPolicy(fault: .disconnectAfterRequest, onRequest: 2, times: 1, ignoresConnectionClose: true)
        let session = makeSession()
        let api = Endpoint(careless.baseURL.absoluteString)
        let post = api.post("/post", body: .data(body, contentType: "application/octet-stream"))
        _ = await send(post, on: session)
        let (result, _) = await send(post, on: session)
        let arrivals = careless.arrivals.filter { $0.path == "/post" }
        XCTAssertEqual(arrivals.filter(\.isComplete).count, 2, "\(arrivals)")
        if isOnCurl(session) {
            // libcurl is told to close each such connection itself (no reuse, whatever the server says): the second
            // POST goes on a new connection, and is answered (`{"bytes":N}`, which this request cannot decode).
            XCTAssertFalse(result.failure is URLError, "\(result)")
            XCTAssertEqual(arrivals.map(\.index), [1, 1], "\(arrivals)")
            return
        }
        #if canImport(FoundationNetworking)
        // The error comes from the refusal, whose own description says so.
        XCTAssertEqual((result.failure as? URLError)?.code, .networkConnectionLost, "\(result)")
        XCTAssertTrue(((result.failure as? URLError)?.localizedDescription ?? "").contains("not safe to send twice"), "\(result)")
        // The head of the second sending, if it arrived by now (libcurl writes it before it asks for the body).
        XCTAssertLessThanOrEqual(arrivals.count, 3, "\(arrivals)")
        // At once: what libcurl stopped with is its "operation aborted by callback", not the session's timeout.
        let underlying = (result.failure as? URLError)?.userInfo[NSUnderlyingErrorKey] as? Error
        XCTAssertEqual(underlying.map { ($0 as NSError).code }, NSURLErrorUnknown, "\(String(describing: underlying))")
        #endif
    }

    /// A 401 answered with a credential makes URLSession send the request again itself, with the same body object: the
    /// body starts again from its first byte (on Linux a stream that went on from where it stopped would leave the
    /// server waiting for the body until the timeout).
    func testABodySentAgainAfterAChallengeIsWhole() async throws {
        let path = "/resend-basic/\(UUID().uuidString)"
        let expected = "Basic " + Data("ada:secret".utf8).base64EncodedString()
        let seen = SeenBodies()
        server.route(path) { request in
            guard request.headers["authorization"] == expected else {
                return LoopbackResponse(status: 401, headers: ["WWW-Authenticate": #"Basic realm="resend""#])
            }
            _ = seen.append(request.body)
            return .json(#"{"ok":true}"#)
        }
        var components = try XCTUnwrap(URLComponents(url: server.url(path), resolvingAgainstBaseURL: false))
        components.user = "ada"
        components.password = "secret"
        let url = try XCTUnwrap(components.url)
        let api = Endpoint(url.deletingLastPathComponent().absoluteString)
        let (result, _) = await send(api.put(url.lastPathComponent, body: .data(body, contentType: "application/octet-stream")), on: makeSession())
        XCTAssertNoThrow(try result.get())
        XCTAssertEqual(seen.all, [body])
    }

    /// A 301 that keeps the method of a PUT with a body: Requests sends the body again to the new place (corelibs
    /// would follow without it, announcing the old `Content-Length` on Linux, and the server would wait for it).
    func testAMovedPutIsSentAgainWithItsBody() async throws {
        let target = "/resend-moved/\(UUID().uuidString)"
        let seen = SeenBodies()
        server.route(target) { request in
            _ = seen.append(request.body)
            return .json(#"{"ok":true}"#)
        }
        let moved = "/resend-moved-from/\(UUID().uuidString)"
        server.route(moved) { _ in LoopbackResponse(status: 301, headers: ["Location": target]) }
        let api = Endpoint(server.baseURL.absoluteString)
        let (result, _) = await send(api.put(moved, body: .data(body, contentType: "application/octet-stream")), on: makeSession())
        XCTAssertNoThrow(try result.get())
        XCTAssertEqual(seen.all, [body])
    }

    /// A GET whose answer is lost on a reused connection is sent again (by libcurl on Linux): success.
    func testAGetIsSentAgain() async throws {
        let (path, bodies) = lostSecondAnswer()
        let session = makeSession()
        let api = Endpoint(server.baseURL.absoluteString)
        _ = await send(api.get(path), on: session)
        let (result, _) = await send(api.get(path), on: session)
        XCTAssertNoThrow(try result.get())
        XCTAssertEqual(bodies().count, 3)
    }
}

/// The bodies a route read, in order.
private final class SeenBodies: @unchecked Sendable {
    private let lock = NSLock()
    private var bodies: [Data] = []

    /// Adds `body`; returns how many there are now.
    func append(_ body: Data) -> Int {
        lock.withLock {
            bodies.append(body)
            return bodies.count
        }
    }

    var all: [Data] { lock.withLock { bodies } }
}
