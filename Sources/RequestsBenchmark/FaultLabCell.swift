// One cell of `requests-bench --fault-lab`, run in a child process (`--fault-lab-cell`): raw URLSession can crash on
// these faults, and a crash must end one cell only.

#if os(macOS) || os(Linux)  // requests-bench runs on macOS and Linux only (see main.swift)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer

/// The request kinds of the raw comparison, each made the plain URLSession way and through Requests.
enum FaultLabKind: String, CaseIterable {
    case get = "GET data"
    case postBody = "POST httpBody"
    case uploadPUT = "upload data PUT"
    case uploadPOST = "upload data POST"
    case uploadFilePOST = "upload file POST"
    case download = "download GET"

    var path: String {
        switch self {
        case .get: return "/lab/json"
        case .download: return "/lab/bytes"
        default: return "/lab/upload"
        }
    }

    var method: String {
        switch self {
        case .get, .download: return "GET"
        case .uploadPUT: return "PUT"
        case .postBody, .uploadPOST, .uploadFilePOST: return "POST"
        }
    }

    var argument: String { rawValue.replacingOccurrences(of: " ", with: "-") }
    static func named(_ argument: String) -> FaultLabKind? { allCases.first { $0.argument == argument } }
}

/// How the child sends: URLSession with completion handlers (as `URLSession.shared` is used), a session with a
/// delegate (tasks without handlers), or Requests (on a session derived from the given one, with a delegate).
enum FaultLabStyle: String, CaseIterable {
    case plain = "URLSession, completion handlers"
    case delegate = "URLSession with a delegate"
    case library = "Requests"

    var argument: String { String(describing: self) }
    static func named(_ argument: String) -> FaultLabStyle? { allCases.first { $0.argument == argument } }
}

enum FaultLabBodies {
    static let length = 200_000
    static let body = Data((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) })
}

/// Collects a delegate session's outcome.
private final class LabDelegate: NSObject, URLSessionDataDelegate, URLSessionDownloadDelegate, @unchecked Sendable {
    let done = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var error: Error?
    private var status = 0

    var outcome: (Int, Error?) { lock.withLock { (status, error) } }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        lock.withLock {
            self.error = error
            status = (task.response as? HTTPURLResponse)?.statusCode ?? 0
        }
        done.signal()
    }

    func urlSession(_ session: URLSession, downloadTask: URLSessionDownloadTask, didFinishDownloadingTo location: URL) {
        try? FileManager.default.removeItem(at: location)
    }
}

private struct LabData: DataRequest {
    typealias Success = Data
    typealias Failure = Error
    let request: URLRequest
    var identifier: String { request.url?.absoluteString ?? "" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(request)) }
    func processData(_ data: Data) throws -> Data { data }
}

private struct LabUploadRequest: UploadRequest {
    typealias Success = Data
    let request: URLRequest
    let uploadBody: UploadBody
    var identifier: String { request.url?.absoluteString ?? "" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(request)) }
    func processData(_ data: Data) throws -> Data { data }
}

private struct LabDownloadRequest: DownloadRequest {
    let request: URLRequest
    var destination: URL?
    var identifier: String { request.url?.absoluteString ?? "" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) { completion(.success(request)) }
}

/// `--fault-lab-cell KIND STYLE BASE-URL TIMEOUT WARM-UP(0|1|2) IDLE-MS`: warms the connection up if asked, sends the
/// cell's request, and prints `RESULT <outcome> <seconds>`.
func runFaultLabCell(_ arguments: [String]) -> Never {
    guard arguments.count == 6, let kind = FaultLabKind.named(arguments[0]), let style = FaultLabStyle.named(arguments[1]),
        let base = URL(string: arguments[2]), let timeout = Double(arguments[3]), let idle = Int(arguments[5])
    else {
        print("usage: requests-bench --fault-lab-cell KIND STYLE BASE-URL TIMEOUT WARM-UP IDLE-MS")
        exit(2)
    }
    let configuration = URLSessionConfiguration.ephemeral
    configuration.urlCache = nil
    configuration.timeoutIntervalForRequest = timeout
    let delegate = LabDelegate()
    let session =
        style == .delegate ? URLSession(configuration: configuration, delegate: delegate, delegateQueue: nil) : URLSession(configuration: configuration)
    let file = FileManager.default.temporaryDirectory.appendingPathComponent("fault-lab-\(getpid()).bin")
    _ = FileManager.default.createFile(atPath: file.path, contents: FaultLabBodies.body)

    var request = URLRequest(url: LoopbackServer.url(kind.path, on: base))
    request.httpMethod = kind.method
    request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
    if kind == .postBody { request.httpBody = FaultLabBodies.body }

    // 1: warm the connection up with a GET; 2: with the cell's own request (as three POSTs in a row do).
    if arguments[4] == "1" || arguments[4] == "2" {
        var warmUp = URLRequest(url: LoopbackServer.url("/lab/warm-up", on: base))
        warmUp.httpMethod = "GET"
        let same = arguments[4] == "2"
        let (status, error) = send(same ? request : warmUp, kind: same ? kind : .get, style: style, session: session, delegate: delegate, file: file)
        guard error == nil, status == 200 else {
            try? FileManager.default.removeItem(at: file)
            print("RESULT warm-up-failed 0")
            exit(1)
        }
        if idle > 0 { Thread.sleep(forTimeInterval: Double(idle) / 1000) }  // the race with the server's idle close
    }
    let start = Date()
    let (status, error) = send(request, kind: kind, style: style, session: session, delegate: delegate, file: file)
    let elapsed = Date().timeIntervalSince(start)
    let outcome: String
    if let error = error as? URLError {
        outcome = "URLError \(error.code.rawValue)"
    } else if let error {
        outcome = String(describing: type(of: error))
    } else {
        outcome = "success \(status)"
    }
    try? FileManager.default.removeItem(at: file)  // (`exit` runs no `defer`; the parent removes the folder too)
    print("RESULT \(outcome.replacingOccurrences(of: " ", with: "_")) \(String(format: "%.2f", elapsed))")
    exit(0)
}

/// Sends `request` the `style` way and waits for its outcome: the status and the error.
private func send(
    _ request: URLRequest, kind: FaultLabKind, style: FaultLabStyle, session: URLSession, delegate: LabDelegate, file: URL
) -> (Int, Error?) {
    let done = DispatchSemaphore(value: 0)
    let result = LabBox()
    switch style {
    case .plain:
        let handler: @Sendable (Data?, URLResponse?, Error?) -> Void = { _, response, error in
            result.set((response as? HTTPURLResponse)?.statusCode ?? 0, error)
            done.signal()
        }
        let task: URLSessionTask
        switch kind {
        case .get, .postBody: task = session.dataTask(with: request, completionHandler: handler)
        case .uploadPUT, .uploadPOST: task = session.uploadTask(with: request, from: FaultLabBodies.body, completionHandler: handler)
        case .uploadFilePOST: task = session.uploadTask(with: request, fromFile: file, completionHandler: handler)
        case .download:
            task = session.downloadTask(with: request) { location, response, error in
                location.map { try? FileManager.default.removeItem(at: $0) }
                handler(nil, response, error)
            }
        }
        task.resume()
        done.wait()
        return result.value
    case .delegate:
        let task: URLSessionTask
        switch kind {
        case .get, .postBody: task = session.dataTask(with: request)
        case .uploadPUT, .uploadPOST: task = session.uploadTask(with: request, from: FaultLabBodies.body)
        case .uploadFilePOST: task = session.uploadTask(with: request, fromFile: file)
        case .download: task = session.downloadTask(with: request)
        }
        task.resume()
        delegate.done.wait()
        return delegate.outcome
    case .library:
        let queue = OperationQueue()
        let finish: @Sendable (Error?) -> Void = { error in
            result.set(error == nil ? 200 : 0, error)
            done.signal()
        }
        switch kind {
        case .get, .postBody:
            queue.addRequest(LabData(request: request), session: session) { finish($0.failure) }
        case .uploadPUT, .uploadPOST:
            queue.addRequest(LabUploadRequest(request: request, uploadBody: .data(FaultLabBodies.body)), session: session) { finish($0.failure) }
        case .uploadFilePOST:
            queue.addRequest(LabUploadRequest(request: request, uploadBody: .file(file)), session: session) { finish($0.failure) }
        case .download:
            let destination = FileManager.default.temporaryDirectory.appendingPathComponent("fault-lab-\(getpid())-\(UUID().uuidString)")
            queue.addRequest(LabDownloadRequest(request: request, destination: destination), session: session) {
                try? FileManager.default.removeItem(at: destination)
                finish($0.failure)
            }
        }
        done.wait()
        return result.value
    }
}

private final class LabBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: (Int, Error?) = (0, nil)
    var value: (Int, Error?) { lock.withLock { stored } }
    func set(_ status: Int, _ error: Error?) { lock.withLock { stored = (status, error) } }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
#endif
