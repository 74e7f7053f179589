import Foundation

/// Which transport carries requests on Linux: URLSession (swift-corelibs-foundation's, the default), or libcurl
/// driven directly by Requests, where waiting costs no CPU, a stream whose consumer falls behind pauses, and a
/// request lost on a reused connection is sent again whole. The platform differences article (item 15) says what
/// each one does, and which requests stay on URLSession whatever the choice (a session with a delegate, stub protocol
/// classes or stored credentials, among others). Apple platforms always use URLSession; there the choice is ignored.
public enum LinuxTransport: Sendable, Hashable {
    /// URLSession, as on Apple platforms.
    case urlSession
    /// libcurl, loaded at run time from the `libcurl.so.4` FoundationNetworking already needs (URLSession when it
    /// cannot be loaded).
    case libcurl

    private static let lock = NSLock()
    nonisolated(unsafe) private static var chosen: LinuxTransport =
        ProcessInfo.processInfo.environment["REQUESTS_TRANSPORT"] == "curl" ? .libcurl : .urlSession

    /// The transport for the attempts that start from now on (one already sent keeps its own). Default: ``libcurl``
    /// when the environment has `REQUESTS_TRANSPORT=curl`, else ``urlSession``. Set it once, early, for example in
    /// `main` of a service.
    public static var current: LinuxTransport {
        get { lock.withLock { chosen } }
        set { lock.withLock { chosen = newValue } }
    }
}
