#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

/// Sends the requests a replay has no entry for to the real server, in ``HARRecordMode/newEpisodes`` mode, and keeps
/// their exchanges as new entries. The stub delivers the server's answer when it comes (see `DeferredAnswer`): it
/// must not wait for it inside `startLoading`, since on Linux every session's tasks share one work queue.
final class LiveForwarder: @unchecked Sendable {
    private let session: URLSession
    private let redaction: Redaction
    private let maximumBodyBytes: Int
    private let lock = NSLock()
    private var recorded: [HAREntry] = []

    init(redaction: Redaction, maximumBodyBytes: Int) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
        (self.redaction, self.maximumBodyBytes) = (redaction, maximumBodyBytes)
    }

    /// The entries recorded so far, in the order the answers came.
    var newEntries: [HAREntry] { lock.withLock { recorded } }

    /// Sends `request`, and returns a stub response that the server's answer completes, after it is recorded.
    func forward(_ request: URLRequest) -> StubResponse {
        let deferred = DeferredAnswer()
        let started = Date()
        let startTime = DispatchTime.now()
        let session = self.session
        // Not created here: on Linux, creating a task waits for the work queue that `startLoading` runs on.
        DispatchQueue.global().async {
            self.send(request, on: session, started: started, startTime: startTime, answering: deferred)
        }
        var answer = StubResponse()
        answer.deferred = deferred
        return answer
    }

    private func send(_ request: URLRequest, on session: URLSession, started: Date, startTime: DispatchTime, answering deferred: DeferredAnswer) {
        let (redaction, maximumBodyBytes) = (self.redaction, self.maximumBodyBytes)
        session.dataTask(with: request) { [weak self] data, response, error in
            let response = response as? HTTPURLResponse
            let duration = Double(DispatchTime.now().uptimeNanoseconds - startTime.uptimeNanoseconds) / 1e9
            let entry = HAREntry(
                request: request, response: response, error: error, body: data ?? Data(), started: started, duration: duration,
                redaction: redaction, maximumBodyBytes: maximumBodyBytes)
            self?.record(entry)
            guard let response else {
                deferred.give(.failure(error ?? URLError(.badServerResponse)))
                return
            }
            let headers = response.allHeaderFields.map { HARHeader(name: "\($0.key)", value: "\($0.value)") }
            deferred.give(ReplayEntry.stubResponse(status: response.statusCode, headers: headers, body: data ?? Data()))
        }.resume()
    }

    private func record(_ entry: HAREntry) {
        lock.withLock { recorded.append(entry) }
    }

    func close() {
        session.finishTasksAndInvalidate()
    }
}
