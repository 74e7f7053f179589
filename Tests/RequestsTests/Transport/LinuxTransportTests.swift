#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import XCTest

/// `LinuxTransport.current` decides, request by request, whether an eligible session's requests go on libcurl.
final class LinuxTransportTests: XCTestCase {
    func testTheChoiceInCodeDecidesForTheRequestsThatFollow() throws {
        #if os(Linux)
        let session = URLSession(configuration: .ephemeral)
        defer { session.finishTasksAndInvalidate() }
        let request = URLRequest(url: TestServer.shared.url("/json"))
        let before = LinuxTransport.current
        defer { LinuxTransport.current = before }
        LinuxTransport.current = .urlSession
        XCTAssertNil(CurlSessions.loop(for: session, request: request))
        LinuxTransport.current = .libcurl
        XCTAssertNotNil(CurlSessions.loop(for: session, request: request))
        #else
        throw XCTSkip("Apple platforms always use URLSession")
        #endif
    }
}
