#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Which statuses an attempt accepts, as data: the request's valid codes, and what the transfer adds. Set when the
/// attempt is prepared, and read by both the interpreter and a stream's transfer, so that they cannot disagree.
struct StatusRule: Sendable {
    /// The codes accepted: `nil` for the request's own ``NetworkRequest/validHTTPStatusCodes`` (read where the
    /// response is interpreted), or the transfer's (a stream's first connection reads the request's, a reconnection
    /// takes `200` and `204`).
    var validCodes: [Int]? = nil
    /// A resumed download's `206` stands for the `200` it continues.
    var partialContinuesWhole = false

    /// Whether `status` passes, with `requestCodes` standing for the request's own codes.
    func accepts(_ status: Int, requestCodes: @autoclosure () -> [Int]) -> Bool {
        let codes = validCodes ?? requestCodes()
        if partialContinuesWhole, status == 206 {
            return codes.contains(200) || codes.contains(206)
        }
        return codes.contains(status)
    }
}

/// Turns the body of a response that passed the ``StatusRule`` and the validations into `Success`: a value chosen
/// once, from the request's kind (JSON with the empty-body rules, no content, text, data, a download's file), so
/// that it is the same whatever transfer carried the body (memory, an upload's, a file).
struct BodyInterpreter<R: NetworkRequest> {
    /// Returns the value, and sets in `finishing` what makes it final, if anything. (Not a `Processed<R.Success>`: in
    /// code the compiler could not specialize, each such value is a metadata lookup at run time.)
    let interpret: (_ body: ResponseBody, _ response: HTTPURLResponse, _ sent: URLRequest, _ request: R, _ finishing: inout Finishing) throws -> R.Success

    /// For an operation whose kind has no body to interpret (a stream's elements are decoded as they arrive).
    static var unsupported: BodyInterpreter {
        BodyInterpreter { _, _, _, _, _ in
            throw RequestQueueError.misuse("\(R.self) has no response body to interpret")
        }
    }
}

extension BodyInterpreter where R: DataRequest {
    /// A download's file, checked and committed to its destination (see `DownloadPlacement`).
    static var download: BodyInterpreter {
        BodyInterpreter { body, response, _, request, finishing in
            guard let download = request as? any DownloadRequest else {
                throw RequestQueueError.misuse("\(R.self) is not a download")
            }
            let placed = try DownloadPlacement.place(body, response: response, for: download)
            guard let value = placed.value as? R.Success else {
                throw RequestQueueError.misuse("\(R.self) does not succeed with a URL")
            }
            finishing = Finishing(commit: placed.commit, abandon: placed.abandon)
            return value
        }
    }

    /// A body kept in memory, turned into `Success` by ``DataRequest/processResponse(_:response:)``; for a
    /// ``DecodableRequest``, an empty body goes through its empty-body rules first (the only place that reads them).
    static func data(isDecodable: Bool) -> BodyInterpreter {
        BodyInterpreter { body, response, sent, request, _ in
            guard case let .data(data) = body else {
                throw RequestQueueError.misuse("\(R.self) received a file it cannot process")
            }
            if isDecodable, data.isEmpty, let decodable = request as? any DecodableRequest {
                return try EmptyBodyRule<R.Success>(decodable).value(of: data, response: response, sent: sent, processing: request)
            }
            return try request.processResponse(data, response: response)
        }
    }
}

extension DataRequest {
    /// What this request's own operation makes of a body kept in memory that passed the status rule and the
    /// validations: its kind's interpreter (JSON with the empty-body rules, no content, text, data). For a caller that
    /// sends the request as another type (the outbox's attempts), so that both judge an answer with the same code.
    package func interpretBody(_ data: Data, response: HTTPURLResponse, sent: URLRequest) throws -> Success {
        var finishing = Finishing()
        let interpreter = BodyInterpreter<Self>.data(isDecodable: RequestKind(of: Self.self).isDecodable)
        return try interpreter.interpret(.data(data), response, sent, self, &finishing)
    }
}

/// A ``DecodableRequest``'s rules for an empty body: `Success`'s empty value, when `Success` can be empty, for a response
/// that has no body (``ResponseBodyRule``: a `HEAD`'s, a `1xx`, `204`, `205` or `304`) and for the statuses and
/// methods the request lists; ``RequestQueueError/unexpectedEmptyBody(statusCode:method:)`` otherwise.
struct EmptyBodyRule<Success> {
    let statusCodes: Set<Int>
    let methods: Set<HTTPMethod>

    init(_ request: any DecodableRequest) {
        statusCodes = request.emptyResponseStatusCodes
        methods = request.emptyResponseMethods
    }

    func value<R: DataRequest>(of data: Data, response: HTTPURLResponse, sent: URLRequest, processing request: R) throws -> Success
    where R.Success == Success {
        let method = HTTPMethod(rawValue: sent.httpMethod ?? "GET")
        let hasNoBody = !ResponseBodyRule.hasBody(status: response.statusCode, method: method.rawValue)
        if hasNoBody || statusCodes.contains(response.statusCode) || methods.contains(method),
            let empty = (Success.self as? EmptyResponse.Type)?.emptyValue() as? Success
        {
            return empty
        }
        do {
            return try request.processResponse(data, response: response)
        } catch RequestQueueError.didNotReceiveData {
            throw RequestQueueError.unexpectedEmptyBody(statusCode: response.statusCode, method: method.rawValue)
        }
    }
}

extension NetworkRequestOperation {
    /// The outcome of an attempt that got a response: the status rule, the validations, then the body interpreter. A
    /// value completes the operation (its commit in the same step); the error of an attempt that produced none is
    /// returned, and its body discarded. (No `Result` of `R`'s types here: in generic code the compiler could not
    /// specialize, each one is a metadata lookup at run time, on every request.)
    func interpret(
        _ body: ResponseBody, response: URLResponse?, error: Error?, sent: URLRequest, request: R, rule: StatusRule, validations: [ResponseValidation]
    ) -> Error? {
        do {
            if let error {
                // URLSession's own redirect limit is the policy's (see `RedirectPolicy.reported(_:)`).
                throw withLock { policies.redirectPolicy }.reported(error)
            }
            guard let httpResponse = response as? HTTPURLResponse else {
                throw RequestQueueError.nonHTTPResponse(response)
            }
            guard rule.accepts(httpResponse.statusCode, requestCodes: request.validHTTPStatusCodes) else {
                throw RequestQueueError.invalidStatusCode(statusCode: httpResponse.statusCode, response: httpResponse, body: body.errorPayload)
            }
            try Self.validate(httpResponse, sent: sent, body: body.inMemory, with: validations)
            var finishing = Finishing()
            let value = try interpreter.interpret(body, httpResponse, sent, request, &finishing)
            if !succeed(with: value, committing: finishing.commit) {
                finishing.abandon?()
            }
            return nil
        } catch {
            body.discard()
            return error
        }
    }

    /// Runs the queue's and the request's validations, in order, on a response whose status was accepted. A stream's
    /// response is validated with an empty body, before any of it is decoded.
    static func validate(_ response: HTTPURLResponse, sent: URLRequest, body: Data, with validations: [ResponseValidation]) throws {
        for validation in validations {
            try validation.validate(sent, response: response, body: body)
        }
    }
}

/// A processed success value, with what makes it final: `commit` runs in the step that claims the outcome
/// (under the operation's lock, so it must be quick and must not call back into the operation; a throw turns
/// the outcome into that failure), and `abandon` runs if a cancellation claimed it first.
struct Processed<Value> {
    let value: Value
    var commit: (() throws -> Void)? = nil
    var abandon: (() -> Void)? = nil
}

/// What makes an interpreted value final (see ``Processed``), apart from the value.
struct Finishing {
    var commit: (() throws -> Void)? = nil
    var abandon: (() -> Void)? = nil
}

/// A response's body: bytes in memory, or the file a download wrote.
enum ResponseBody: Sendable {
    case data(Data)
    case file(URL)

    /// Its size in bytes.
    var count: Int {
        switch self {
        case let .data(data): return data.count
        case let .file(url): return Int(FileSink.size(of: url))
        }
    }

    /// The bytes validations see: a file's are not read (an empty `Data`).
    var inMemory: Data {
        if case let .data(data) = self { return data }
        return Data()
    }

    /// Removes a file body; one in memory is simply released.
    func discard() {
        if case let .file(url) = self {
            try? FileManager.default.removeItem(at: url)
        }
    }

    /// The bytes a status error carries: a file's first 64 KiB, which is where a server's error payload is.
    var errorPayload: Data {
        switch self {
        case let .data(data): return data
        case let .file(url): return (try? FileHandle(forReadingFrom: url)).flatMap { try? $0.read(upToCount: 64 * 1024) } ?? Data()
        }
    }
}
