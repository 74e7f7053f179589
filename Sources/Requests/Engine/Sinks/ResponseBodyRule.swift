#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

/// Whether a response has a body: the one rule of the engine. The code that reads a body follows it (the sinks' size
/// check on the announced length and their count of what is missing, a download's file, a stream's start), and so
/// does the code that judges an empty one (a ``DecodableRequest``'s empty-body rule), so that every kind agrees.
///
/// A response has **no body** when it answers a `HEAD`, or when its status is `1xx`, `204`, `205` or `304` (RFC 9110
/// §6.4.1 and §15.3.6: a server must not send content with a `205`; RFC 9112 §6.3), whatever its `Content-Length`
/// says: a `HEAD`'s or a `304`'s announces the representation, not a body. Every other response has a body, which may
/// be empty (`Content-Length: 0`).
///
/// What each kind makes of a response without a body, once its status is accepted: a data request gets an empty
/// `Data`, a text request `""`, a no-content request succeeds, a download gets an empty file, a stream ends with no
/// element and without reconnecting, and a decodable request gets `Success`'s empty value (``EmptyResponse``, an
/// optional) or fails with ``RequestQueueError/unexpectedEmptyBody(statusCode:method:)``. An empty body of a response
/// that has one is the same for every kind but two: a decodable request fails unless it lists the status or the method
/// (``DecodableRequest/emptyResponseStatusCodes``, ``DecodableRequest/emptyResponseMethods``), and a stream counts the
/// connection. No size limit applies to a length that no body follows.
package enum ResponseBodyRule {
    /// Whether the response with `status` to a request sent with `method` has a body (which may be empty). `method` is
    /// read only for a status that may have one.
    package static func hasBody(status: Int, method: @autoclosure () -> String?) -> Bool {
        guard !(100..<200).contains(status), status != 204, status != 205, status != 304 else { return false }
        return method()?.uppercased() != "HEAD"
    }

    /// The length of the body that follows `response`'s headers: `0` for a response without a body, else its
    /// `Content-Length` (`-1` when unknown).
    static func expectedLength(of response: URLResponse, method: @autoclosure () -> String?) -> Int64 {
        guard let http = response as? HTTPURLResponse else { return response.expectedContentLength }
        return hasBody(status: http.statusCode, method: method()) ? response.expectedContentLength : 0
    }
}
