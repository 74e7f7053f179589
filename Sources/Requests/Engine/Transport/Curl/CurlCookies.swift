#if os(Linux)
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// The session's cookies on libcurl transfers, as URLSession handles them: sent from the configuration's storage
/// when `httpShouldSetCookies`, and stored from each response (the storage applies its accept policy).
enum CurlCookies {
    /// The `Cookie` field for `request` from the session's storage, or `nil` when none is to be sent. A request
    /// that sets `Cookie` itself keeps its own (the caller checks).
    static func header(for request: URLRequest, from configuration: URLSessionConfiguration) -> String? {
        guard configuration.httpShouldSetCookies, request.httpShouldHandleCookies, let url = request.url,
            let cookies = configuration.httpCookieStorage?.cookies(for: url), !cookies.isEmpty
        else { return nil }
        return HTTPCookie.requestHeaderFields(with: cookies)["Cookie"]
    }

    static func store(from response: HTTPURLResponse, for request: URLRequest, in configuration: URLSessionConfiguration) {
        guard configuration.httpShouldSetCookies, request.httpShouldHandleCookies, let storage = configuration.httpCookieStorage,
            let url = response.url, let fields = response.allHeaderFields as? [String: String],
            fields.keys.contains(where: { $0.equalsIgnoringASCIICase("Set-Cookie") })
        else { return }
        let cookies = HTTPCookie.cookies(withResponseHeaderFields: fields, for: url)
        storage.setCookies(cookies, for: url, mainDocumentURL: request.mainDocumentURL ?? url)
    }
}
#endif
