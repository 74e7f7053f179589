// swift-format-ignore-file
// Kept out of swift-format: the marked parts of this file are the ```swift blocks of Caching.md, character for
// character (ArticleExamplesTests checks it).

import Foundation
import Requests

func cachingUsage(queue: OperationQueue) {
    // article-example-begin
    queue.requestPolicies.responseCache = ResponseCache()   // 10 MiB in memory, 100 MiB on disk

    struct Catalogue: DecodableRequest, EndpointRequest {
        typealias Success = [Product]
        var endpoint: Endpoint { api.get("catalogue") }
        var cacheUse: CacheUse { .useCache }      // the default; also .revalidate, .reload, .onlyIfCached, .bypass
    }
    // article-example-end
    queue.addRequest(Catalogue()) { _ in }
}

func cachingInMemoryAndWhyNotStored(queue: OperationQueue) {
    // article-example-begin
    queue.requestPolicies.responseCache = ResponseCache.inMemory()   // 10 MiB in memory, no disk

    struct CacheLog: RequestEventMonitor {
        func requestDidUseCache(_ attempt: RequestAttempt, event: CacheEvent) {
            if case let .notStored(reason) = event { print("Not cached:", attempt.identifier, reason) }
        }
    }
    queue.requestPolicies.monitors.append(CacheLog())
    // article-example-end
}
