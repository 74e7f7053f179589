import Foundation

/// An HTTP Archive (HAR 1.2) file, as ``HARRecorder`` writes it and the replay of `RequestsTesting` reads it: only the
/// fields they use. Reading is lenient, as files exported by browsers and proxies need: every field the library does
/// not need may be missing, and unknown fields are ignored. Writing puts every field HAR 1.2 requires.
package struct HARFile: Codable, Sendable {
    package var log: HARLog

    package init(log: HARLog) {
        self.log = log
    }
}

package struct HARLog: Codable, Sendable {
    package var version = "1.2"
    package var creator = HARCreator(name: "Requests", version: "0.1.0")
    /// Always empty: the library has no pages. Written because Firefox's importer refuses a file without the array.
    package var pages: [HAREmpty] = []
    package var entries: [HAREntry]

    package init(entries: [HAREntry]) {
        self.entries = entries
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        version = container.lenient(.version, or: "1.2")
        creator = try container.decodeIfPresent(HARCreator.self, forKey: .creator) ?? HARCreator(name: "", version: "")
        entries = try container.decodeIfPresent([HAREntry].self, forKey: .entries) ?? []
    }
}

package struct HARCreator: Codable, Sendable {
    package var name: String
    package var version: String

    package init(name: String, version: String) {
        (self.name, self.version) = (name, version)
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = container.lenient(.name, or: "")
        version = container.lenient(.version, or: "")
    }
}

package struct HAREntry: Codable, Sendable {
    /// ISO 8601, with milliseconds.
    package var startedDateTime: String
    /// Milliseconds: the sum of the non-negative ``timings``.
    package var time: Double
    package var request: HARRequest
    package var response: HARResponse
    package var cache = HAREmpty()
    package var timings: HARTimings
    package var comment: String?

    package init(startedDateTime: String, request: HARRequest, response: HARResponse, timings: HARTimings, comment: String?) {
        (self.startedDateTime, self.request, self.response, self.timings, self.comment) = (startedDateTime, request, response, timings, comment)
        time = (timings.total * 1000).rounded() / 1000
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        request = try container.decode(HARRequest.self, forKey: .request)
        response = try container.decode(HARResponse.self, forKey: .response)
        startedDateTime = container.lenient(.startedDateTime, or: "")
        timings = try container.decodeIfPresent(HARTimings.self, forKey: .timings) ?? HARTimings()
        time = container.lenient(.time, or: timings.total)
        comment = container.lenient(.comment)
    }
}

/// `{}`: HAR's `cache` object, which the library neither writes nor reads.
package struct HAREmpty: Codable, Sendable {
    package init() {}
    package init(from decoder: Decoder) throws {}
}

package struct HARHeader: Codable, Sendable, Equatable {
    package var name: String
    package var value: String

    package init(name: String, value: String) {
        (self.name, self.value) = (name, value)
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = container.lenient(.name, or: "")
        value = container.lenient(.value, or: "")
    }
}

package struct HARRequest: Codable, Sendable {
    package var method: String
    package var url: String
    package var httpVersion = "HTTP/1.1"
    package var cookies: [HAREmpty] = []
    package var headers: [HARHeader]
    package var queryString: [HARHeader]
    package var postData: HARPostData?
    package var headersSize = -1
    package var bodySize: Int

    package init(method: String, url: String, headers: [HARHeader], queryString: [HARHeader], postData: HARPostData?, bodySize: Int) {
        (self.method, self.url, self.headers, self.queryString, self.postData, self.bodySize) = (method, url, headers, queryString, postData, bodySize)
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        method = try container.strict(.method) ?? "GET"
        url = try container.decode(String.self, forKey: .url)
        httpVersion = container.lenient(.httpVersion, or: "HTTP/1.1")
        headers = try container.decodeIfPresent([HARHeader].self, forKey: .headers) ?? []
        queryString = try container.decodeIfPresent([HARHeader].self, forKey: .queryString) ?? []
        postData = try container.decodeIfPresent(HARPostData.self, forKey: .postData)
        bodySize = container.lenient(.bodySize, or: -1)
    }
}

package struct HARPostData: Codable, Sendable {
    package var mimeType: String
    package var text: String
    /// Not in HAR 1.2 for a request, but written by some tools (and by ``HARRecorder`` for a binary body).
    package var encoding: String?
    package var params: [HARHeader] = []
    package var comment: String?

    package init(mimeType: String, text: String, encoding: String?, comment: String?) {
        (self.mimeType, self.text, self.encoding, self.comment) = (mimeType, text, encoding, comment)
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        mimeType = container.lenient(.mimeType, or: "")
        text = try container.strict(.text) ?? ""
        encoding = try container.strict(.encoding)
        comment = container.lenient(.comment)
    }
}

package struct HARResponse: Codable, Sendable {
    package var status: Int
    package var statusText: String
    package var httpVersion = "HTTP/1.1"
    package var cookies: [HAREmpty] = []
    package var headers: [HARHeader]
    package var content: HARContent
    package var redirectURL: String
    package var headersSize = -1
    package var bodySize: Int
    /// Why there is no response (status `0`), as browsers write it: for an error of URLSession, `URLError` and its
    /// code first (`URLError -1004: …`), which the replay turns back into that error.
    package var error: String?

    enum CodingKeys: String, CodingKey {
        case status, statusText, httpVersion, cookies, headers, content, redirectURL, headersSize, bodySize
        case error = "_error"
    }

    /// The text of `error` for ``error``.
    package static func errorText(_ error: Error?) -> String {
        guard let error else { return "no response" }
        if let urlError = error as? URLError { return "URLError \(urlError.code.rawValue): \(urlError.localizedDescription)" }
        return "\(type(of: error)): \(error)"
    }

    /// The `URLError` that ``error`` names: the library's own `URLError <code>: …`, or the nearest code for a browser's
    /// or a proxy's words (``foreignErrors``); `.unknown`, with the text as its description, for any other.
    package var urlError: URLError {
        let text = error ?? "no response"
        let parts = text.split(separator: " ", maxSplits: 2)
        // `URLError.Code(rawValue:)` is failable on Linux only: `as` makes it optional on both.
        if parts.count >= 2, parts[0] == "URLError", let number = Int(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: ":"))),
            let code = URLError.Code(rawValue: number) as URLError.Code?
        {
            return URLError(code)
        }
        let lowered = text.lowercased()
        let code = Self.foreignErrors.first { lowered.contains($0.words) }?.code ?? .unknown
        return URLError(code, userInfo: [NSLocalizedDescriptionKey: text])
    }

    /// What Chrome (`net::ERR_…`), Firefox and proxies such as mitmproxy write for a request without a response, and
    /// the `URLError` code URLSession gives for the same failure.
    private static let foreignErrors: [(words: String, code: URLError.Code)] = [
        ("err_connection_refused", .cannotConnectToHost), ("connection refused", .cannotConnectToHost),
        ("err_name_not_resolved", .cannotFindHost), ("name or service not known", .cannotFindHost),
        ("err_timed_out", .timedOut), ("err_connection_timed_out", .timedOut), ("timed out", .timedOut),
        ("err_internet_disconnected", .notConnectedToInternet),
        ("err_connection_reset", .networkConnectionLost), ("err_connection_closed", .networkConnectionLost),
        ("err_empty_response", .networkConnectionLost), ("connection reset", .networkConnectionLost),
        ("err_aborted", .cancelled), ("err_cert_", .serverCertificateUntrusted), ("certificate", .serverCertificateUntrusted),
    ]

    package init(status: Int, statusText: String, headers: [HARHeader], content: HARContent, redirectURL: String, bodySize: Int) {
        (self.status, self.statusText, self.headers, self.content, self.redirectURL, self.bodySize) = (status, statusText, headers, content, redirectURL, bodySize)
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        status = try container.decode(Int.self, forKey: .status)
        statusText = container.lenient(.statusText, or: "")
        httpVersion = container.lenient(.httpVersion, or: "HTTP/1.1")
        headers = try container.decodeIfPresent([HARHeader].self, forKey: .headers) ?? []
        content = try container.decodeIfPresent(HARContent.self, forKey: .content) ?? HARContent(size: 0, mimeType: "", text: nil, encoding: nil, comment: nil)
        redirectURL = container.lenient(.redirectURL, or: "")
        bodySize = container.lenient(.bodySize, or: -1)
        error = container.lenient(.error)
    }
}

package struct HARContent: Codable, Sendable {
    package var size: Int
    package var mimeType: String
    /// The body: text, or Base64 when ``encoding`` is `base64`; missing when it was not kept.
    package var text: String?
    package var encoding: String?
    package var comment: String?
    /// A stream's body as it arrived (`_chunks`, the library's own field; other tools ignore it): each piece and when
    /// it came. ``text`` still holds the whole body kept, so that other readers show it. `nil` for a body that was not
    /// streamed.
    package var chunks: [HARChunk]?

    enum CodingKeys: String, CodingKey {
        case size, mimeType, text, encoding, comment
        case chunks = "_chunks"
    }

    package init(size: Int, mimeType: String, text: String?, encoding: String?, comment: String?, chunks: [HARChunk]? = nil) {
        (self.size, self.mimeType, self.text, self.encoding, self.comment) = (size, mimeType, text, encoding, comment)
        self.chunks = chunks
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        size = container.lenient(.size, or: -1)
        mimeType = container.lenient(.mimeType, or: "")
        text = try container.strict(.text)
        encoding = try container.strict(.encoding)
        comment = container.lenient(.comment)
        chunks = try container.decodeIfPresent([HARChunk].self, forKey: .chunks)
    }
}

/// One piece of a streamed body (``HARContent/chunks``), as the client received it.
package struct HARChunk: Codable, Sendable, Equatable {
    /// Milliseconds from the arrival of the response's headers to this piece's.
    package var time: Double
    /// The bytes: UTF-8 text, or Base64 when ``encoding`` is `base64`.
    package var text: String
    package var encoding: String?

    package init(time: Double, text: String, encoding: String?) {
        (self.time, self.text, self.encoding) = (time, text, encoding)
    }

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        time = container.lenient(.time, or: 0)
        text = try container.strict(.text) ?? ""
        encoding = try container.strict(.encoding)
    }
}

/// Milliseconds; `-1` where a phase does not apply or is unknown (never for `send`, `wait` and `receive`).
package struct HARTimings: Codable, Sendable {
    package var blocked: Double = -1
    package var dns: Double = -1
    package var connect: Double = -1
    package var ssl: Double = -1
    package var send: Double = 0
    package var wait: Double = 0
    package var receive: Double = 0

    package init() {}

    package init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        for (key, path) in [(CodingKeys.blocked, \Self.blocked), (.dns, \.dns), (.connect, \.connect), (.ssl, \.ssl)] {
            self[keyPath: path] = container.lenient(key, or: -1)
        }
        for (key, path) in [(CodingKeys.send, \Self.send), (.wait, \.wait), (.receive, \.receive)] {
            self[keyPath: path] = container.lenient(key, or: 0)
        }
    }

    /// The sum of the phases that apply; `ssl` is part of `connect`, as HAR 1.2 says.
    var total: Double {
        [blocked, dns, connect, send, wait, receive].filter { $0 > 0 }.reduce(0, +)
    }
}

extension KeyedDecodingContainer {
    /// The scalar at `key`, or `fallback` when it is missing, `null` or of another type: files written by other tools
    /// differ in such fields (a size as a string, a `null` text), and the library does not need them to be exact.
    fileprivate func lenient<Value: Decodable>(_ key: Key, or fallback: Value) -> Value {
        lenient(key) ?? fallback
    }

    /// The scalar at `key`, or `nil` when it is missing, `null` or of another type.
    fileprivate func lenient<Value: Decodable>(_ key: Key) -> Value? {
        (try? decodeIfPresent(Value.self, forKey: key)) ?? nil
    }

    /// The value at `key`, or `nil` when it is missing or `null`; a value of another type is an error. For the fields a
    /// replay answers with (a method, a body and its encoding), which must not silently become something else.
    fileprivate func strict<Value: Decodable>(_ key: Key) throws -> Value? {
        try decodeIfPresent(Value.self, forKey: key)
    }
}
