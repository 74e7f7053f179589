#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

/// One loopback server for the whole test process.
enum TestServer {
    static let shared: LoopbackServer = {
        let server = try! LoopbackServer()
        server.route("/fakeapi/recipe/1") { _ in
            .json(#"{"name":"Pancakes","ingredients":["flour","milk","eggs"],"steps":["mix","fry"]}"#)
        }
        return server
    }()

    static func url(_ pathAndQuery: String) -> URL { shared.url(pathAndQuery) }

    /// A new path, served with the `/json` recipe, whose requests the server counts on their own.
    static func freshPath() -> String {
        let path = "/fresh/\(UUID().uuidString)"
        shared.route(path) { _ in .json(#"{"name":"Pancakes","ingredients":[],"steps":[]}"#) }
        return path
    }
}

/// Prints a line of a long test's progress and flushes it at once. When the output is a pipe or a file (CI, `| tee`),
/// `print` fills a buffer block by block: without the flush a line would show only when the test ends, or later.
func reportProgress(_ line: String) {
    print(line)
    fflush(nil)  // Every output stream: Swift 6 refuses the global `stdout`.
}

/// A session that shares nothing with other tests and caches nothing.
let testSession: URLSession = {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    configuration.httpMaximumConnectionsPerHost = 16
    return URLSession(configuration: configuration)
}()

/// The recipe served by `/json`.
struct ServedRecipe: Decodable, Equatable {
    let name: String
    let ingredients: [String]
    let steps: [String]
}

/// GET `url`, decoded as `Success`.
struct GetDecodable<Success: Decodable>: DecodableRequest {
    typealias Failure = Error
    var identifier: String { url.absoluteString }
    let url: URL
    /// Released with the request, for lifetime checks.
    var tracker: Sentinel?
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// GET `url`, the raw body.
struct GetData: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    var identifier: String { url.absoluteString }
    let url: URL
    var method = "GET"
    /// Released with the request, for lifetime checks.
    var tracker: Sentinel?
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// `url` with no content expected.
struct SendNoContent: NoContentRequest {
    typealias Failure = Error
    var identifier: String { url.absoluteString }
    let url: URL
    var shouldEnforceNoContent = true
    /// Released with the request, for lifetime checks.
    var tracker: Sentinel?
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// A request whose `makeURLRequest` is driven by the test: it hands its callback to `onMake`.
struct ManualRequest: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let identifier: String
    let onMake: @Sendable (@escaping (Result<URLRequest, Error>) -> Void) -> Void
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        onMake(completion)
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// Collects values from any thread.
final class Recorder<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [Value] = []

    func append(_ value: Value) {
        lock.lock()
        storage.append(value)
        lock.unlock()
    }

    var values: [Value] {
        lock.lock()
        defer { lock.unlock() }
        return storage
    }

    var count: Int { values.count }
}

/// Holds a callback handed over by another thread.
final class Box<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value?
    var value: Value? {
        get { lock.lock(); defer { lock.unlock() }; return stored }
        set { lock.lock(); stored = newValue; lock.unlock() }
    }
}

/// Carries a plain Foundation `OperationQueue`, `Operation` or `BlockOperation` (or an array of them) into a
/// `Task`, a `DispatchQueue` block or another `@Sendable` closure.
///
/// swift-corelibs-foundation marks those classes `Sendable`, but Apple's SDKs may not, and in Swift 6 mode a
/// `Task` or `@Sendable` closure that captures a non-`Sendable` value the caller goes on using does not compile.
/// The classes are documented as safe to use from any thread, and the box only holds the reference, hence
/// `@unchecked`. The library's own operations (`RequestOperation` and its subclasses, `BatchOperation`, …) are
/// `Sendable` and need no box.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

extension Result {
    var failure: Failure? {
        if case let .failure(error) = self { return error }
        return nil
    }
    var success: Success? {
        if case let .success(value) = self { return value }
        return nil
    }
}

extension Error {
    var isRequestCancellation: Bool {
        if case .cancelled? = self as? RequestQueueError { return true }
        return false
    }
}

extension XCTestCase {
    /// Waits until `condition` holds, polling; fails after `timeout`.
    func waitUntil(
        timeout: TimeInterval = 10,
        _ description: String,
        file: StaticString = #filePath,
        line: UInt = #line,
        _ condition: @escaping () -> Bool
    ) {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition() {
            if Date() > deadline {
                XCTFail("timed out waiting for: \(description)", file: file, line: line)
                return
            }
            // Runs the main queue when called on the main thread; a run loop without sources returns at once on
            // Linux, so a short sleep keeps the poll from taking a whole core from the code under test.
            RunLoop.current.run(until: Date().addingTimeInterval(0.01))
            Thread.sleep(forTimeInterval: 0.002)
        }
    }
}

/// An object whose release shows that whatever held it has been released.
final class Sentinel: @unchecked Sendable {}

/// A weak reference, to check that an object is released.
final class Weak<Object: AnyObject>: @unchecked Sendable {
    weak var object: Object?
    init(_ object: Object) { self.object = object }
}

/// A test case whose temporary directory (`TMPDIR`, where the library keeps its private folder) is a folder of its
/// own while each test runs, under ``root``; tests run one at a time, so the setting is theirs alone.
class OwnTemporaryDirectoryTestCase: XCTestCase {
    /// Removed after each test, with everything in it.
    var root: URL!
    /// `TMPDIR` during the test: `root/tmp`.
    var temporary: URL!
    private var savedTemporary: String?

    override func setUp() {
        super.setUp()
        root = FileManager.default.temporaryDirectory.appendingPathComponent("own-tmp-\(UUID().uuidString)", isDirectory: true)
        temporary = root.appendingPathComponent("tmp", isDirectory: true)
        try? FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        savedTemporary = ProcessInfo.processInfo.environment["TMPDIR"]
        setenv("TMPDIR", temporary.path, 1)
    }

    override func tearDown() {
        if let savedTemporary { setenv("TMPDIR", savedTemporary, 1) } else { unsetenv("TMPDIR") }
        try? FileManager.default.removeItem(at: root)
        super.tearDown()
    }
}
