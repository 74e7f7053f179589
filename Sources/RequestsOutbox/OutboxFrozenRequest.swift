#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// What every attempt of an entry sends, fixed when it was enqueued: the method, the URL, the request's own header
/// fields, the body's bytes and the timeout, as the request's `makeURLRequest` made them then. The queue's adapters
/// and authenticator still add theirs on each attempt, and the outbox its `Idempotency-Key`.
///
/// Fixed because a server may fingerprint the payload of an idempotency key and refuse (422) the same key with other
/// bytes: a request that encodes a dictionary, or reads the clock or a setting in `makeURLRequest`, would send other
/// bytes after a restart.
struct FrozenRequest: Sendable, Hashable {
    struct Field: Sendable, Hashable {
        var name: String
        var value: String
    }

    var method: String
    var url: String
    /// Sorted by name, so that the stored form is the same for the same request.
    var fields: [Field]
    var body: Data
    /// The request's own timeout; 0 when it had `URLRequest`'s default, which leaves the session's in force.
    var timeout: TimeInterval

    /// The request as the transport gets it (before the adapters).
    var urlRequest: URLRequest? {
        guard let url = URL(string: url) else { return nil }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if timeout > 0, timeout.isFinite { request.timeoutInterval = timeout }
        if !fields.isEmpty {
            request.allHTTPHeaderFields = Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
        }
        if !body.isEmpty { request.httpBody = body }
        return request
    }
}

extension FrozenRequest {
    /// Why a request could not be fixed.
    enum Failure: Error {
        case noURL
        case made(Error)
        case bodyTooLarge(Int)
        case unreadableBody(String)
        case notCompleted(waited: TimeInterval)
        case notCompletedOnMainThread
    }

    /// `request` as it is sent, with its body read from a stream when it has one (at most `bodyLimit` bytes).
    init(_ request: URLRequest, bodyLimit: Int) throws {
        guard let url = request.url?.absoluteString else { throw Failure.noURL }
        self.url = url
        method = request.httpMethod ?? "GET"
        // 60 s is `URLRequest`'s default. Set on the request again, any value would take precedence over the
        // session's `timeoutIntervalForRequest` (corelibs gives a timeout that was set precedence, whatever its
        // value), so the default is kept as "not set" (0).
        timeout = request.timeoutInterval == 60 ? 0 : request.timeoutInterval
        // Names are unique (a URLRequest's fields are case-insensitive), so sorting by name is a total order.
        fields = (request.allHTTPHeaderFields ?? [:]).map { Field(name: $0.key, value: $0.value) }.sorted { $0.name < $1.name }
        if let data = request.httpBody {
            guard data.count <= bodyLimit else { throw Failure.bodyTooLarge(data.count) }
            body = data
        } else if let stream = request.httpBodyStream {
            body = try Self.read(stream, limit: bodyLimit)
        } else {
            body = Data()
        }
    }

    private static func read(_ stream: InputStream, limit: Int) throws -> Data {
        stream.open()
        defer { stream.close() }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let count = buffer.withUnsafeMutableBufferPointer { pointer in
                pointer.baseAddress.map { stream.read($0, maxLength: pointer.count) } ?? -1
            }
            if count == 0 { return data }
            guard count > 0 else {
                throw Failure.unreadableBody(stream.streamError.map { String(describing: $0) } ?? "the body stream failed")
            }
            guard data.count + count <= limit else { throw Failure.bodyTooLarge(data.count + count) }
            data.append(contentsOf: buffer[0..<count])
        }
    }

    /// Makes and fixes `request`'s URL request, for the synchronous `enqueue`: a `makeURLRequest` that completes
    /// later is waited for, up to `wait` seconds, except on the main thread, where waiting could wait for the main
    /// thread itself (the asynchronous `enqueue` waits without blocking).
    static func make<R: OutboxRequest>(_ request: R, bodyLimit: Int, wait: TimeInterval) throws -> FrozenRequest {
        let made = MadeRequest()
        request.makeURLRequest { made.set($0) }
        if let result = made.result { return try fix(result, bodyLimit: bodyLimit) }
        guard !Thread.isMainThread else { throw Failure.notCompletedOnMainThread }
        guard made.wait(seconds: wait), let result = made.result else { throw Failure.notCompleted(waited: wait) }
        return try fix(result, bodyLimit: bodyLimit)
    }

    /// Makes and fixes `request`'s URL request, suspending until `makeURLRequest` completes, at most `wait` seconds.
    static func make<R: OutboxRequest>(_ request: R, bodyLimit: Int, wait: TimeInterval) async throws -> FrozenRequest {
        let result: Result<URLRequest, Error> = await withCheckedContinuation { continuation in
            let made = MadeRequest(continuation)
            request.makeURLRequest { made.set($0) }
            if wait.isFinite {
                DispatchQueue.global().asyncAfter(deadline: .now() + wait) { made.set(.failure(Failure.notCompleted(waited: wait))) }
            }
        }
        return try fix(result, bodyLimit: bodyLimit)
    }

    private static func fix(_ result: Result<URLRequest, Error>, bodyLimit: Int) throws -> FrozenRequest {
        switch result {
        case let .success(request): return try FrozenRequest(request, bodyLimit: bodyLimit)
        case let .failure(error): throw Failure.made(error)
        }
    }

    /// The failure's description, for ``OutboxError/cannotEncode(requestType:_:)``.
    static func describe(_ error: Error) -> String {
        guard let failure = error as? Failure else { return OutboxVerdict.describe(error) }
        switch failure {
        case .noURL: return "its makeURLRequest made a request without a URL"
        case let .made(error): return "its makeURLRequest failed: \(OutboxVerdict.describe(error))"
        case let .bodyTooLarge(size): return "its body has \(size) bytes or more, more than an entry may hold"
        case let .unreadableBody(text): return "its body stream could not be read: \(text)"
        case let .notCompleted(waited):
            return "its makeURLRequest did not complete within \(String(format: "%g", waited)) s (OutboxOptions.attemptTimeout)"
        case .notCompletedOnMainThread:
            return "its makeURLRequest did not complete at once, and the synchronous enqueue does not wait on the main "
                + "thread; use `try await outbox.enqueue(...)`"
        }
    }
}

/// The outcome of one `makeURLRequest`, kept once whichever thread calls its completion, and how often.
private final class MadeRequest: @unchecked Sendable {
    private let lock = NSLock()
    /// Made only by a caller that waits (most `makeURLRequest`s complete at once).
    private var done: DispatchSemaphore?
    private var kept: Result<URLRequest, Error>?
    private var continuation: CheckedContinuation<Result<URLRequest, Error>, Never>?

    init(_ continuation: CheckedContinuation<Result<URLRequest, Error>, Never>? = nil) {
        self.continuation = continuation
    }

    var result: Result<URLRequest, Error>? { lock.withLock { kept } }

    func set(_ result: Result<URLRequest, Error>) {
        let (waiting, waiter): (CheckedContinuation<Result<URLRequest, Error>, Never>?, DispatchSemaphore?) = lock.withLock {
            guard kept == nil else { return (nil, nil) }
            kept = result
            defer { continuation = nil }
            return (continuation, done)
        }
        waiting?.resume(returning: result)
        waiter?.signal()
    }

    func wait(seconds: TimeInterval) -> Bool {
        let waiter: DispatchSemaphore? = lock.withLock {
            guard kept == nil else { return nil }
            let semaphore = DispatchSemaphore(value: 0)
            done = semaphore
            return semaphore
        }
        guard let waiter else { return true }
        let limit = seconds.isFinite ? DispatchTime.now() + seconds : .distantFuture
        return waiter.wait(timeout: limit) == .success
    }
}
