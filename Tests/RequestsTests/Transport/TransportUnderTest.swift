#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests

/// Whether a plain request on `session` goes on libcurl rather than URLSession (`REQUESTS_TRANSPORT=curl` on Linux,
/// see `Transport`): some expectations differ there, where libcurl behaves as Apple's URLSession does.
func isOnCurl(_ session: URLSession) -> Bool {
    #if os(Linux)
    return CurlSessions.loop(for: session, request: URLRequest(url: URL(string: "http://127.0.0.1/")!)) != nil
    #else
    return false
    #endif
}
