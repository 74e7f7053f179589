#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
@testable import Requests
import XCTest

/// The library never decides a server-trust challenge itself: it asks for the default handling (the system's
/// validation), or passes the challenge to the caller's session delegate, which may pin but is the caller's.
final class TLSValidationTests: XCTestCase {
    private final class Sender: NSObject, URLAuthenticationChallengeSender {
        func use(_ credential: URLCredential, for challenge: URLAuthenticationChallenge) {}
        func continueWithoutCredential(for challenge: URLAuthenticationChallenge) {}
        func cancel(_ challenge: URLAuthenticationChallenge) {}
        func performDefaultHandling(for challenge: URLAuthenticationChallenge) {}
        func rejectProtectionSpaceAndContinue(with challenge: URLAuthenticationChallenge) {}
    }

    /// A caller delegate that answers every challenge by cancelling it, so that its answer is recognisable.
    private final class CancellingDelegate: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
        func urlSession(
            _ session: URLSession,
            task: URLSessionTask,
            didReceive challenge: URLAuthenticationChallenge,
            completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
        ) {
            completionHandler(.cancelAuthenticationChallenge, nil)
        }
    }

    private let serverTrust = URLAuthenticationChallenge(
        protectionSpace: URLProtectionSpace(
            host: "example.com", port: 443, protocol: "https", realm: nil,
            // NSURLAuthenticationMethodServerTrust's value; the constant is unavailable on Linux.
            authenticationMethod: "NSURLAuthenticationMethodServerTrust"
        ),
        proposedCredential: nil, previousFailureCount: 0, failureResponse: nil, error: nil, sender: Sender()
    )

    // The same code runs on Apple platforms: every task runs on a session derived from the caller's there too.
    // corelibs raises no server-trust challenge, so one is made up.

    /// What the transfer session answers to a server-trust challenge for a task of the session made from `base`.
    private func answer(base: URLSession) throws -> (URLSession.AuthChallengeDisposition, URLCredential?)? {
        let (session, delegate) = TransferSession.session(for: base)
        let task = session.dataTask(with: try XCTUnwrap(URL(string: "https://example.com/")))
        defer { task.cancel() }
        let answer = Recorder<(URLSession.AuthChallengeDisposition, URLCredential?)>()
        let answered = expectation(description: "answered")
        // Answered on another queue: the answer waits for the session's work queue, where the challenge arrives.
        delegate.urlSession(session, task: task, didReceive: serverTrust) {
            answer.append(($0, $1))
            answered.fulfill()
        }
        wait(for: [answered], timeout: 10)
        XCTAssertEqual(answer.values.count, 1, "the challenge is answered once")
        return answer.values.first
    }

    func testWithoutACallerDelegateTheDefaultHandlingDecides() throws {
        // Given a caller session without a delegate
        let base = URLSession(configuration: .ephemeral)
        defer { base.invalidateAndCancel() }
        // When a server-trust challenge reaches the session Requests made from it
        let result = try XCTUnwrap(try answer(base: base))
        // Then Requests asks for the default handling and offers no credential
        XCTAssertEqual(result.0, .performDefaultHandling)
        XCTAssertNil(result.1)
    }

    func testTheCallerDelegateDecidesWhenThereIsOne() throws {
        // Given a caller session whose delegate cancels every challenge
        let delegate = CancellingDelegate()
        let base = URLSession(configuration: .ephemeral, delegate: delegate, delegateQueue: nil)
        defer { base.invalidateAndCancel() }
        // When a server-trust challenge reaches the session Requests made from it
        let result = try XCTUnwrap(try answer(base: base))
        // Then the caller's delegate answered it, not Requests
        XCTAssertEqual(result.0, .cancelAuthenticationChallenge)
        XCTAssertNil(result.1)
    }

    func testNoSourceFileAcceptsATrustOrTurnsValidationOff() throws {
        // Given every Swift file of the library
        let sources = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources")
        let files = try XCTUnwrap(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
            .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }
        XCTAssertGreaterThan(files.count, 20, "found the sources at \(sources.path)")
        // When they are searched for the ways to accept a certificate without the system's validation
        let forbidden = [
            ".useCredential", "URLCredential(trust", "URLCredential.init(trust", "serverTrust", "SecTrust",
            "allowsAnyHTTPSCertificate",
            "CURLOPT_SSL_VERIFY", "setAllowsAnyHTTPSCertificate",
        ]
        // The one exception: on Linux, TransferSession answers an HTTP authentication challenge (Basic, Digest) with
        // the credential its default handling would use, a user and password from the session's storage, or passes
        // the caller's delegate's own answer on; it never answers a server-trust challenge itself.
        let allowed: Set<String> = ["TransferSession.swift: .useCredential"]
        var found: [String] = []
        for file in files {
            // Code only: a comment may explain what the library does not do.
            let text = try String(contentsOf: file, encoding: .utf8).split(separator: "\n")
                .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }.joined(separator: "\n")
            found += forbidden.filter(text.contains).map { "\(file.lastPathComponent): \($0)" }
        }
        // Then none is used
        XCTAssertEqual(found.filter { !allowed.contains($0) }, [])
    }
}
