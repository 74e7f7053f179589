// swift-format-ignore-file
// Kept out of swift-format: the marked part of this file is the ```swift block of StreamsAndServerSentEvents.md,
// character for character (ArticleExamplesTests checks it).

import Foundation
import Requests

let textView = TextArea()

func streamsUsage(queue: OperationQueue) async throws {
    // article-example-begin
    struct Chat: StreamRequest, EndpointRequest {            // server-sent events
        let prompt: String
        var endpoint: Endpoint { api.post("chat", body: .json(["prompt": prompt])) }
        func makeDecoder() -> ServerSentEventDecoder { ServerSentEventDecoder() }
    }

    // A handler per element, on the completion queue, in order; then the completion, once, after the last one.
    queue.addRequest(Chat(prompt: "Hello"), completionQueue: .main) { event in
        textView.text += event.data
    } completion: { result in
        print(result)                                           // .success(StreamSummary) or the failure
    }

    // Or an AsyncThrowingStream. Breaking out of the loop or cancelling the Task cancels the operation.
    for try await event in queue.stream(for: Chat(prompt: "Hello")) {
        print(event.data)
    }
    // article-example-end
}
