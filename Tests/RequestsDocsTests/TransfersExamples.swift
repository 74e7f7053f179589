// swift-format-ignore-file
// Kept out of swift-format: the marked parts of this file are the ```swift blocks of Transfers.md, character for
// character (ArticleExamplesTests checks it).

import Foundation
import Requests

// article-example-begin
struct DownloadVideo: DownloadRequest, EndpointRequest {
    let id: String
    var endpoint: Endpoint { api.get("videos/\(id)") }
    var destination: URL? { videosFolder.appendingPathComponent("\(id).mp4") }
}

struct UploadVideo: UploadRequest, DecodableRequest, EndpointRequest {
    typealias Success = Video
    let file: URL
    var endpoint: Endpoint { api.post("videos") }
    var uploadBody: UploadBody { .file(file) }
}
// article-example-end

func progressUsage(queue: OperationQueue) {
    // article-example-begin
    let download = queue.addRequest(DownloadVideo(id: "42"))
    progressView.observedProgress = download.progress        // or parent.addChild(download.progress, withPendingUnitCount: 1)
    // article-example-end
}

func resumeUsage(queue: OperationQueue) async {
    // article-example-begin
    let stateFile = appSupport.appendingPathComponent("video-42.resume")
    let saved = (try? Data(contentsOf: stateFile)).flatMap { try? JSONDecoder().decode(ResumeState.self, from: $0) }

    let download = queue.addRequest(DownloadVideo(id: "42"), resumingFrom: saved) { result, resumeState in
        switch result {
        case let .success(file):
            try? FileManager.default.removeItem(at: stateFile)
            show(file)
        case .failure:
            // Store it: the next launch passes it to resumingFrom: and fetches only the missing bytes. A stored state is
            // untrusted input: Requests takes only the partial file's name from it, looks for that name in its own private
            // folder (checked as for new files), resumes only a regular file of this user, not a link, named as it names
            // them, with counts that make sense; any other state starts from zero, touches no file, and is told to
            // monitors as .resumeStateRefused(reason:).
            if let resumeState, let data = try? JSONEncoder().encode(resumeState) { try? data.write(to: stateFile) }
        }
    }
    // On the way out: stop, keeping what arrived.
    download.cancel(producingResumeState: true)

    // Or with async/await: cancelling the Task keeps the bytes, and the state comes back with the cancellation.
    let (result, resumeState) = await queue.download(DownloadVideo(id: "42"), resumingFrom: saved)
    // article-example-end
    _ = (result, resumeState)
}
