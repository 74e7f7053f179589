#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension TransferSink {
    /// One error for one event: a body cut off after its headers is `URLError.unknown` on Linux (libcurl's
    /// "transfer closed with N bytes remaining"), and `networkConnectionLost` on Apple platforms. It is reported as
    /// the latter everywhere, for every kind, so that a ``RetryPolicy`` decides the same way on both (and a
    /// download's retry resumes). Other −1 errors, such as invalid chunking, stay as they are.
    static func cutConnection(_ error: Error, received: Int64, expected: Int64) -> Error? {
        guard let urlError = error as? URLError, urlError.code == .unknown else { return nil }
        let isShort = expected > 0 && received < expected
        guard isShort || urlError.localizedDescription.hasPrefix("transfer closed") else { return nil }
        var info = urlError.userInfo
        info[NSUnderlyingErrorKey] = urlError
        return URLError(.networkConnectionLost, userInfo: info)
    }
}
