// swift-format-ignore-file
// Kept out of swift-format: each marked part of this file is a ```swift block of RecordingAndReplaying.md,
// character for character (RequestsDocsTests' ArticleExamplesTests checks it). The test replays the committed
// Fixtures/profile.har: it never reaches api.example.com.

// article-example-begin
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Requests
import RequestsTesting
import XCTest

struct Profile: Decodable, Sendable { let name: String }

struct ProfileRequest: DecodableRequest {
    typealias Success = Profile
    typealias Failure = Error
    let token: String
    var identifier: String { "profile" }
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: URL(string: "https://api.example.com/users/7")!)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        completion(.success(request))
    }
}

final class ProfileTests: XCTestCase {
    func testTheProfileDecodes() async throws {
        let fixture = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().appendingPathComponent("Fixtures/profile.har")
        // Records when the file is missing, replays it when it exists.
        let replay = try HARReplay(file: fixture, mode: .once)
        let queue = OperationQueue()
        queue.requestPolicies.monitors = replay.monitors

        let token = ProcessInfo.processInfo.environment["API_TOKEN"] ?? "unused-when-replaying"
        let profile = try await queue.response(for: ProfileRequest(token: token), session: replay.session)
        try replay.finish()  // writes the file when it recorded

        XCTAssertEqual(profile.name, "Ada")
        XCTAssertFalse(replay.isRecording, "the committed fixture is replayed")
    }
}
// article-example-end

/// Keeps the article's app-side example compiling.
func exportForABugReport(queue: OperationQueue, reportFolder: URL) throws {
    // article-example-begin
    let recorder = HARRecorder(
        redaction: Redaction(queryItems: ["api_key"], jsonFields: ["password", "refresh_token"]),
        maximumEntries: 50)
    queue.requestPolicies.monitors.append(recorder)
    // … later, when the user sends a bug report:
    try recorder.write(to: reportFolder.appendingPathComponent("last-requests.har"))
    // article-example-end
}
