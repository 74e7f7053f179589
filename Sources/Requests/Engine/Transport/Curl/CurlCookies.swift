#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The session's cookies on libcurl transfers, as URLSession handles them: sent from the configuration's storage
/// when `httpShouldSetCookies`, and stored from each response (the storage applies its accept policy).
enum CurlCookies {
    static func add(to request: inout URLRequest, from configuration: URLSessionConfiguration) {
        guard configuration.httpShouldSetCookies, request.httpShouldHandleCookies,
            request.value(forHTTPHeaderField: "Cookie") == nil, let url = request.url,
            let cookies = configuration.httpCookieStorage?.cookies(for: url), !cookies.isEmpty
        else { return }
        for (name, value) in HTTPCookie.requestHeaderFields(with: cookies) { request.setValue(value, forHTTPHeaderField: name) }
    }

    static func store(from response: HTTPURLResponse, for request: URLRequest, in configuration: URLSessionConfiguration) {
        guard configuration.httpShouldSetCookies, request.httpShouldHandleCookies, let storage = configuration.httpCookieStorage,
            let url = response.url, let fields = response.allHeaderFields as? [String: String],
            fields.keys.contains(where: { $0.caseInsensitiveCompare("Set-Cookie") == .orderedSame })
        else { return }
        let cookies = HTTPCookie.cookies(withResponseHeaderFields: fields, for: url)
        storage.setCookies(cookies, for: url, mainDocumentURL: request.mainDocumentURL ?? url)
    }
}
#endif
