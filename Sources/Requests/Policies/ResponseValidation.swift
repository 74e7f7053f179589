#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// A check of a response whose status code is valid, made before the body is processed. A check that
/// throws fails the request with that error (a ``RetryPolicy`` does not retry it: it retries statuses and
/// transport errors).
public struct ResponseValidation: Sendable {
    private let body: @Sendable (URLRequest, HTTPURLResponse, Data) throws -> Void

    /// A validation that throws when the response to `request` is not acceptable.
    public init(_ validate: @escaping @Sendable (_ request: URLRequest, _ response: HTTPURLResponse, _ body: Data) throws -> Void) {
        body = validate
    }

    /// Throws when the response to `request` is not acceptable.
    public func validate(_ request: URLRequest, response: HTTPURLResponse, body data: Data) throws {
        try body(request, response, data)
    }

    /// Fails with ``RequestQueueError/unacceptableContentType(_:acceptable:)`` unless the response's
    /// `Content-Type` matches a media range of the request's `Accept` header (`type/subtype`, `type/*` or
    /// `*/*`, compared without regard to case). The most specific matching range decides, and one with `q=0` refuses.
    ///
    /// Passes when the request has no `Accept` header, and when the body is empty (a 204 has no type).
    /// A body without a `Content-Type` fails. Structured suffixes are not special: `application/json` does not
    /// accept `application/problem+json`; list it.
    public static let contentTypeMatchesAccept = ResponseValidation { request, response, body in
        guard let accept = request.value(forHTTPHeaderField: "Accept"), !body.isEmpty else { return }
        let ranges = accept.split(separator: ",").compactMap(MediaRange.init)
        guard !ranges.isEmpty else { return }
        let contentType = response.value(forHTTPHeaderField: "Content-Type")
        // The most specific matching range decides, so `application/json;q=0, */*` refuses JSON.
        let decidingRange = contentType.flatMap(MediaRange.init).flatMap { mediaType in
            ranges.filter { $0.matches(mediaType) }.max { $0.specificity < $1.specificity }
        }
        guard decidingRange?.isAcceptable == true else {
            throw RequestQueueError.unacceptableContentType(contentType, acceptable: ranges.filter(\.isAcceptable).map(\.text))
        }
    }
}

/// `type/subtype` with its quality, parsed from an `Accept` element or a `Content-Type`.
private struct MediaRange {
    let type: Substring
    let subtype: Substring
    let isAcceptable: Bool

    var text: String { "\(type)/\(subtype)" }

    init?<S: StringProtocol>(_ element: S) {
        let parts = element.lowercased().split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        let typeAndSubtype = parts.first?.split(separator: "/", omittingEmptySubsequences: false) ?? []
        guard typeAndSubtype.count == 2, !typeAndSubtype[0].isEmpty, !typeAndSubtype[1].isEmpty else { return nil }
        type = Substring(typeAndSubtype[0])
        subtype = Substring(typeAndSubtype[1])
        let quality = parts.dropFirst().first { $0.hasPrefix("q=") }.flatMap { Double($0.dropFirst(2)) }
        isAcceptable = (quality ?? 1) > 0
    }

    /// 2 for `type/subtype`, 1 for `type/*`, 0 for `*/*`.
    var specificity: Int { type == "*" ? 0 : subtype == "*" ? 1 : 2 }

    func matches(_ mediaType: MediaRange) -> Bool {
        (type == "*" || type == mediaType.type) && (subtype == "*" || subtype == mediaType.subtype)
    }
}
