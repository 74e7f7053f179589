// swift-format-ignore-file
// Kept out of swift-format: the article examples in this target must stay verbatim.

// The names the article examples assume exist in an app: models, views, stores. Each is the smallest thing that lets
// an example compile unchanged; none of them runs against a network.

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

struct NewRecipe: Encodable, Sendable { let name: String }
struct Token: Decodable, Sendable { let token: String }
struct Profile: Decodable, Sendable { let name: String }
struct Product: Decodable, Sendable { let id: Int }
struct Video: Decodable, Sendable { let id: String }

struct ProfileRequest: DecodableRequest, EndpointRequest {
    typealias Success = Profile
    let token: String
    var endpoint: Endpoint { api.get("profile", headers: ["Authorization": "Bearer \(token)"]) }
}

enum AppError: Error { case offline }

/// A label: text that a completion handler on the main queue sets.
final class TextBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value: String? = ""
    var text: String? {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}

/// A text view: text that a handler on the main queue appends to.
final class TextArea: @unchecked Sendable {
    private let lock = NSLock()
    private var value = ""
    var text: String {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}

/// A progress bar.
final class ProgressBar: @unchecked Sendable {
    private let lock = NSLock()
    private var progress: Progress?
    var observedProgress: Progress? {
        get { lock.withLock { progress } }
        set { lock.withLock { progress = newValue } }
    }
}

let nameLabel = TextBox()
let progressView = ProgressBar()
let videosFolder = FileManager.default.temporaryDirectory.appendingPathComponent("videos")
let appSupport = FileManager.default.temporaryDirectory.appendingPathComponent("app-support")
var offline: Bool { false }

enum keychain { static let token: String? = nil }

enum auth {
    static func refresh(_ rejected: String?, completion: @escaping @Sendable (Result<String, Error>) -> Void) {
        completion(.success("new-token"))
    }
}

enum reachability {
    static func waitUntilOnline() async {}
}

func show(_ file: URL) {}
