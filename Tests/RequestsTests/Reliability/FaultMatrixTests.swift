#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import RequestsTestServer
import XCTest

/// Every fault of the matrix against every request kind: a typed error (the table in docs/faults.md), one
/// completion, a finished operation, no temporary file left, and nothing kept alive: the operation, the request,
/// the completion closure and every `URLSessionTask` the operation created are released.
final class FaultMatrixTests: XCTestCase {
    private let server = TestServer.shared

    /// Timeouts of one second (Linux rounds them down to whole seconds), for the two rows about the timeout.
    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.timeoutIntervalForRequest = 1
        return URLSession(configuration: configuration)
    }()

    /// For every other row: each is about another rule (a size limit, a speed rule, a deadline, a parse), which must
    /// win however slowly the machine runs. With a one-second idle timeout, a loaded machine (CI) sometimes stalled
    /// the in-process server or libcurl's inflating for longer, and a row failed with -1001 instead of its error; a
    /// gzip bomb under ThreadSanitizer on a loaded machine took more than URLSession's default 60 s. The timeout
    /// stays finite, so that a row that hangs still ends.
    private static let patientSession: URLSession = {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        configuration.timeoutIntervalForRequest = 900
        return URLSession(configuration: configuration)
    }()

    enum Fault: String, CaseIterable {
        case connectionRefused = "connection refused"
        case resetBeforeHeaders = "reset before the headers"
        case resetMidBody = "reset in the middle of the body"
        case contentLengthLargerThanBody = "Content-Length larger than the body sent"
        case slowTricklePastTimeout = "slow trickle past the timeout"
        case neverResponds = "never responds"
        case invalidChunkedEncoding = "invalid chunked encoding"
        case hugeBodyForSmallModel = "100 MB body for a small model"
        case invalidJSON = "invalid JSON"
        case htmlErrorPage = "HTML error page for a JSON request"
        case htmlPageWithSuccess = "HTML page with a 200 for a JSON request"
        case bodyOnNoContent = "body on a no-content request"
        case redirectLoop = "redirect loop"
        case hugeContentLength = "3 GiB Content-Length (8 MiB limit)"
        case endlessChunked = "endless chunked body (8 MiB limit)"
        case gzipBomb = "gzip bomb, 0.1 MB inflating to 16 MiB (8 MiB limit)"
        case trickleForever = "1 byte every 200 ms, forever (minimum speed 1,000 B/s)"
        case pastDeadline = "endless trickle past a 1.5 s deadline"
        case redirectToFile = "redirect to file:///etc/passwd"
        case redirectChainSameOrigin = "5 redirects on one origin, .sameOrigin"
        case redirectRefused = "a 302 under .refuse"
    }

    enum Kind: String, CaseIterable {
        case data, decodable, noContent = "no-content", download, upload
    }

    private static let refusedURL: URL = {
        // A port that was just closed: nothing listens there.
        guard let stopped = try? LoopbackServer() else { return URL(fileURLWithPath: "/") }
        let url = stopped.url("/json")
        stopped.stop()
        return url
    }()

    private func url(for fault: Fault) -> URL {
        switch fault {
        case .connectionRefused: return Self.refusedURL
        case .resetBeforeHeaders: return server.url("/fault/reset-before-headers")
        case .resetMidBody: return server.url("/fault/reset-mid-body")
        case .contentLengthLargerThanBody: return server.url("/fault/close-mid-body")
        case .slowTricklePastTimeout: return server.url("/trickle/100000?chunk=1000&interval=1500")
        case .neverResponds: return server.url("/fault/never-respond")
        case .invalidChunkedEncoding: return server.url("/fault/invalid-chunked")
        case .hugeBodyForSmallModel: return server.url("/bytes/100000000")
        case .invalidJSON: return server.url("/fault/invalid-json")
        case .htmlErrorPage: return server.url("/fault/html-error")
        case .htmlPageWithSuccess: return server.url("/fault/html-page")
        case .bodyOnNoContent: return server.url("/json")
        case .redirectLoop: return server.url("/fault/redirect-loop")
        // Paced like the endless body: unpaced, the in-process server starves the session (docs/reliability.md).
        case .hugeContentLength: return server.url("/trickle/3221225472?chunk=65536&interval=1")
        // 64 KiB a millisecond: at full speed an in-process server starves the session on Linux (docs/reliability.md).
        case .endlessChunked: return server.url("/hostile/endless?chunk=65536&interval=1")
        case .gzipBomb: return server.url("/hostile/gzip-bomb/16777216")
        case .trickleForever, .pastDeadline: return server.url("/hostile/endless?chunk=1&interval=200")
        case .redirectToFile: return server.url("/hostile/redirect?to=file:///etc/passwd")
        case .redirectChainSameOrigin: return server.url("/hostile/redirect-chain/5")
        case .redirectRefused: return server.url("/hostile/redirect?to=/json")
        }
    }

    /// The size limit of the rows about huge bodies, bodies in memory and downloads alike. Below the default (the
    /// 100 MB row tests that one): Linux inflates and reads on for a while after the cancel (docs/reliability.md), so a
    /// smaller limit and body keep the matrix to a minute, and to minutes under ThreadSanitizer on a busy machine.
    static let sizeLimit: Int64 = 8 << 20

    /// The queue's policies for a fault: the defaults, but the size rows with ``sizeLimit`` for every kind, and the
    /// speed, deadline and redirect rows with the rule they test.
    private func policies(for fault: Fault) -> RequestPolicies {
        switch fault {
        case .hugeContentLength, .endlessChunked, .gzipBomb:
            return RequestPolicies(limits: TransferLimits(maximumBodySize: Self.sizeLimit, maximumDownloadSize: Self.sizeLimit))
        case .trickleForever:
            return RequestPolicies(limits: TransferLimits(minimumSpeed: MinimumSpeed(bytes: 1000, seconds: 1)))
        case .pastDeadline:
            return RequestPolicies(limits: TransferLimits(deadline: 1.5, minimumSpeed: nil))
        case .redirectChainSameOrigin:
            return RequestPolicies(redirectPolicy: .sameOrigin)
        case .redirectRefused:
            return RequestPolicies(redirectPolicy: .refuse)
        default:
            return RequestPolicies()
        }
    }

    /// What each cell must fail with; `nil` where the kind succeeds (a download of a body it does not parse).
    private func expectation(_ fault: Fault, _ kind: Kind) -> ((Error) -> Bool)? {
        func urlError(_ codes: URLError.Code...) -> (Error) -> Bool {
            urlErrors(codes)
        }
        func urlErrors(_ codes: [URLError.Code]) -> (Error) -> Bool {
            { codes.contains(($0 as? URLError)?.code ?? .unknown) && ($0 as? URLError) != nil }
        }
        let status: (Int) -> (Error) -> Bool = { code in { ($0 as? RequestQueueError)?.statusCode == code } }
        let decoding: (Error) -> Bool = { $0 is DecodingError }
        let nonEmpty: (Error) -> Bool = {
            if case .nonEmptyData? = $0 as? RequestQueueError { return true }; return false
        }
        switch fault {
        case .connectionRefused: return urlError(.cannotConnectToHost)
        case .resetBeforeHeaders, .resetMidBody: return urlError(.networkConnectionLost)
        // A body cut short is a lost connection on every platform and for every kind (libcurl says −1), which
        // RetryPolicy retries (a download resumes).
        case .contentLengthLargerThanBody: return urlError(.networkConnectionLost)
        case .invalidChunkedEncoding:
            // On libcurl, as on Apple platforms.
            return urlErrors(isOnCurl(Self.patientSession) ? [.cannotParseResponse, .networkConnectionLost] : Self.invalidChunkingCodes)
        case .slowTricklePastTimeout, .neverResponds: return urlError(.timedOut)
        case .hugeBodyForSmallModel:
            // Bodies held in memory stop at the 64 MiB default limit; a download writes its file.
            let tooLarge: (Error) -> Bool = { ($0 as? TransferLimitError) == .responseTooLarge(limit: TransferLimits.defaultMaximumBodySize) }
            return kind == .download ? nil : tooLarge
        case .invalidJSON, .htmlPageWithSuccess:
            switch kind {
            case .decodable: return decoding
            case .noContent: return nonEmpty
            case .data, .download, .upload: return nil
            }
        case .bodyOnNoContent:
            return kind == .noContent ? nonEmpty : nil
        case .htmlErrorPage: return status(500)
        case .redirectLoop: return { ($0 as? RedirectError) == .tooManyRedirects(limit: 10) }
        case .hugeContentLength, .endlessChunked, .gzipBomb:
            return { ($0 as? TransferLimitError) == .responseTooLarge(limit: Self.sizeLimit) }
        case .trickleForever: return { ($0 as? TransferLimitError) == .tooSlow(MinimumSpeed(bytes: 1000, seconds: 1)) }
        case .pastDeadline: return { ($0 as? TransferLimitError) == .deadlineExceeded(1.5) }
        case .redirectToFile: return { ($0 as? RedirectError) == .unsupportedScheme("file:///etc/passwd") }
        case .redirectChainSameOrigin: return kind == .noContent ? nonEmpty : nil
        case .redirectRefused: return status(302)
        }
    }

    /// What the platform's URLSession reports for a chunked body whose chunk size is not hexadecimal; Requests passes it
    /// on as it is. Linux (libcurl): −1, `unknown`. Apple platforms
    /// (read in Apple's documentation, not run here: CI has no Apple SDK): CFNetwork's HTTP parse failure,
    /// `cannotParseResponse` (−1017), or, if it counts the body as cut short, `networkConnectionLost` (−1005).
    #if canImport(FoundationNetworking)
    static let invalidChunkingCodes: [URLError.Code] = [.unknown]
    #else
    static let invalidChunkingCodes: [URLError.Code] = [.cannotParseResponse, .networkConnectionLost]
    #endif

    /// Runs one cell; returns the outcome description for the table.
    private func run(_ fault: Fault, _ kind: Kind) -> String {
        let url = url(for: fault)
        let queue = OperationQueue()
        queue.requestPolicies = policies(for: fault)
        defer { queue.requestPolicies = RequestPolicies() }
        let results = Recorder<Result<Void, Error>>()
        let before = transferLeftovers()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("faults-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        weak var weakOperation: Operation?
        weak var weakClosureState: Sentinel?
        weak var weakRequestState: Sentinel?
        let tasks = Recorder<Weak<AnyObject>>()
        let observeTasks: @Sendable (any TransportTask) -> Void = { tasks.append(Weak($0)) }
        let cell = "\(fault.rawValue) × \(kind.rawValue)"
        do {
            let operation: Operation = {
                // Captured by the completion closure: gone once the operation has let go of the closure.
                let sentinel = Sentinel()
                weakClosureState = sentinel
                // Held by the request value: gone once the operation has let go of the request.
                let tracker = Sentinel()
                weakRequestState = tracker
                let record: @Sendable (Result<Void, Error>) -> Void = { result in
                    withExtendedLifetime(sentinel) { results.append(result) }
                }
                // Suspended until the task observer is in place.
                queue.isSuspended = true
                defer { queue.isSuspended = false }
                func add<R: DataRequest>(_ request: R) -> Operation {
                    let session = fault == .slowTricklePastTimeout || fault == .neverResponds ? Self.session : Self.patientSession
                    let operation = queue.addRequest(request, session: session) { record($0.map { _ in }.mapError { $0 as Error }) }
                    (operation as? DataRequestOperation<R>)?.observeTasks(observeTasks)
                    return operation
                }
                switch kind {
                case .data: return add(GetData(url: url, tracker: tracker))
                case .decodable: return add(GetDecodable<ServedRecipe>(url: url, tracker: tracker))
                case .noContent: return add(SendNoContent(url: url, tracker: tracker))
                case .download: return add(Download(url: url, destination: folder.appendingPathComponent("f"), tracker: tracker))
                case .upload: return add(Upload(url: url, uploadBody: .data(Data(count: 10_000)), tracker: tracker))
                }
            }()
            weakOperation = operation
            queue.waitUntilAllOperationsAreFinished()
            // Still holding the finished operation, as app code that made other operations depend on it does; an
            // optimised build could otherwise release it after its last use.
            withExtendedLifetime(operation) {
                XCTAssertTrue(operation.isFinished, "\(cell): finished")
                XCTAssertEqual(results.count, 1, "\(cell): exactly one completion")
                // Every cell reaches the network, so each created at least one task (a failed cast would show here).
                XCTAssertGreaterThanOrEqual(tasks.count, 1, "\(cell): tasks observed")
                waitUntil("\(cell): the request is released") { weakRequestState == nil }
                waitUntil("\(cell): the completion closure is released") { weakClosureState == nil }
                waitUntil("\(cell): every task is released") { tasks.values.allSatisfy { $0.object == nil } }
            }
        }
        waitUntil("\(cell): the operation is released") { weakOperation == nil }
        waitUntil("\(cell): no temporary file is left") { transferLeftovers().subtracting(before).isEmpty }
        let outcome = results.values.first
        switch (outcome, expectation(fault, kind)) {
        case let (.failure(error)?, isExpected?):
            XCTAssertTrue(isExpected(error), "\(cell): unexpected \(error)")
            return Self.describe(error)
        case (.success?, nil):
            return "success"
        case let (outcome, expected):
            XCTFail("\(cell): \(String(describing: outcome)), expected \(expected == nil ? "success" : "a failure")")
            return "unexpected"
        }
    }

    static func describe(_ error: Error) -> String {
        switch error {
        case let error as URLError: return "URLError \(error.code.rawValue)"
        case let error as RequestQueueError:
            switch error {
            case let .invalidStatusCode(code, _, _): return "invalidStatusCode(\(code))"
            case .nonEmptyData: return "nonEmptyData"
            default: return "\(error)"
            }
        case is DecodingError: return "DecodingError"
        case let error as TransferLimitError: return "\(error)"
        case let error as RedirectError: return "\(error)"
        default: return String(describing: type(of: error))
        }
    }

    func testEveryFaultForEveryKind() {
        var table: [String] = []
        for (index, fault) in Fault.allCases.enumerated() {
            // A line per row as it ends, flushed: the whole matrix takes half a minute, and minutes under
            // ThreadSanitizer on a busy machine.
            let start = Date()
            let cells = Kind.allCases.map { run(fault, $0) }
            table.append("| \(fault.rawValue) | " + cells.joined(separator: " | ") + " |")
            reportProgress(
                "fault matrix: row \(index + 1) of \(Fault.allCases.count), \(fault.rawValue), in \(String(format: "%.1f", Date().timeIntervalSince(start))) s")
        }
        reportProgress("fault matrix:\n| Fault | " + Kind.allCases.map(\.rawValue).joined(separator: " | ") + " |\n" + table.joined(separator: "\n"))
    }
}
