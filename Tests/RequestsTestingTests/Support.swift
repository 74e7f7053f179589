#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import XCTest

/// GET `url`, the raw body.
struct FetchData: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let url: URL
    var method = "GET"
    var headers: [String: String] = [:]
    var body: Data?
    var identifier: String { "\(method) \(url.absoluteString)" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.httpBody = body
        headers.forEach { request.setValue($0.value, forHTTPHeaderField: $0.key) }
        completion(.success(request))
    }
    func processData(_ data: Data) throws -> Data { data }
}

/// GET `url`, decoded as `Success`.
struct FetchDecodable<Success: Decodable>: DecodableRequest {
    typealias Failure = Error
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        completion(.success(URLRequest(url: url)))
    }
}

/// DELETE `url`, expecting no content.
struct Delete: NoContentRequest {
    typealias Failure = Error
    let url: URL
    var identifier: String { url.absoluteString }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: url)
        request.httpMethod = "DELETE"
        completion(.success(request))
    }
}

let api = URL(string: "https://api.example.com")!

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
}

/// What a raw data task delivered.
struct Delivery: @unchecked Sendable {
    let data: Data?
    let response: HTTPURLResponse?
    let error: Error?
}

extension XCTestCase {
    /// Runs `request` on a new queue and returns every result its completion received.
    func run<R: DataRequest>(_ request: R, on session: URLSession) -> [Result<R.Success, R.Failure>] {
        let results = Recorder<Result<R.Success, R.Failure>>()
        let queue = OperationQueue()
        queue.addRequest(request, session: session) { results.append($0) }
        queue.waitUntilAllOperationsAreFinished()
        return results.values
    }

    /// Sends `request` with a raw data task and waits for its completion handler.
    func fetch(_ request: URLRequest, on session: URLSession, file: StaticString = #filePath, line: UInt = #line) -> Delivery? {
        let done = expectation(description: "data task completed")
        let deliveries = Recorder<Delivery>()
        session.dataTask(with: request) { data, response, error in
            deliveries.append(Delivery(data: data, response: response as? HTTPURLResponse, error: error))
            done.fulfill()
        }.resume()
        wait(for: [done], timeout: 10)
        XCTAssertEqual(deliveries.values.count, 1, "completion calls", file: file, line: line)
        return deliveries.values.first
    }

    /// Sends a GET for `path` under `api` with a raw data task.
    func fetch(_ path: String, method: String = "GET", on session: URLSession) -> Delivery? {
        var request = URLRequest(url: api.appendingPathComponent(path))
        request.httpMethod = method
        return fetch(request, on: session)
    }
}

extension Delivery {
    var text: String? { data.map { String(decoding: $0, as: UTF8.self) } }
    var status: Int? { response?.statusCode }
}

#if os(Linux) || os(macOS)
extension XCTestCase {
    /// Runs `scripts/check-har --browser` on `file` (an independent reader: the HAR 1.2 schema, and what Chrome's and
    /// Firefox's importers need), fails the test unless it accepts the file, and returns what it printed. Skips when
    /// python3 has no `jsonschema` (CI installs it).
    func checkHAR(_ file: URL, sourceFile: StaticString = #filePath, line: UInt = #line) throws -> String {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../scripts/check-har").standardized
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path, "--browser", file.path]
        let output = Pipe()
        (process.standardOutput, process.standardError) = (output, output)
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        if process.terminationStatus == 2 { throw XCTSkip("python3 has no jsonschema (CI installs python3-jsonschema): \(text)") }
        XCTAssertEqual(process.terminationStatus, 0, text, file: sourceFile, line: line)
        return text
    }
}
#endif
