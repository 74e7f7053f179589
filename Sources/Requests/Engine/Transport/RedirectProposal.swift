#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// How a transport that follows redirects itself (libcurl, a replay) reads a 3xx, as URLSession does: where it sends
/// the request, the request it proposes to the sink (`TransferSink.willRedirect`), and whether the operation must send
/// that request again itself because it keeps its body (`RedirectResend`).
enum RedirectProposal {
    /// The absolute URL a 3xx sends the request to, when it is a redirect URLSession follows.
    static func location(of response: HTTPURLResponse) -> URL? {
        guard [301, 302, 303, 307, 308].contains(response.statusCode),
            let location = response.value(forHTTPHeaderField: "Location"), !location.isEmpty
        else { return nil }
        return URL(string: location, relativeTo: response.url)?.absoluteURL
    }

    /// The request URLSession would propose after `response`: a 303, or a 301 or 302 of a POST, becomes a bodiless GET
    /// (a HEAD stays a HEAD); others keep their method, headers and body.
    static func proposal(after response: HTTPURLResponse, to location: URL, from sent: URLRequest) -> URLRequest {
        var next = sent
        next.url = location
        let method = sent.httpMethod?.uppercased() ?? "GET"
        let becomesGet =
            (response.statusCode == 303 && method != "HEAD" && method != "GET")
            || ([301, 302].contains(response.statusCode) && method == "POST")
        if becomesGet {
            next.httpMethod = "GET"
            next.httpBody = nil
            next.setValue(nil, forHTTPHeaderField: "Content-Type")
            next.setValue(nil, forHTTPHeaderField: "Content-Length")
        }
        return next
    }

    /// Whether the request `allowed` after `response` keeps the body `sent` carried (itself, or as an upload's when
    /// `sendsUploadBody`): then the operation sends it again on a new task, as on URLSession, and the 3xx is the
    /// attempt's response.
    static func keepsBody(_ response: HTTPURLResponse, allowed: URLRequest, sent: URLRequest, sendsUploadBody: Bool) -> Bool {
        [301, 302, 307, 308].contains(response.statusCode)
            && (allowed.httpMethod ?? "GET") == (sent.httpMethod ?? "GET") && (sendsUploadBody || !(sent.httpBody?.isEmpty ?? true))
    }

    /// The request to send next after a redirect the sink allowed: without a body when its method changed.
    static func next(_ allowed: URLRequest, after sent: URLRequest) -> URLRequest {
        var next = allowed
        if (next.httpMethod ?? "GET") != (sent.httpMethod ?? "GET") { next.httpBody = nil }
        return next
    }
}
