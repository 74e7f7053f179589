// swift-format-ignore-file
// Kept out of swift-format: the marked part of this file is the ```swift block of Caching.md, character for
// character (ArticleExamplesTests checks it).

import Foundation
import Requests

func cachingUsage(queue: OperationQueue) {
    // article-example-begin
    queue.requestPolicies = RequestPolicies(responseCache: ResponseCache())   // 10 MiB in memory, 100 MiB on disk

    struct Catalogue: DecodableRequest, EndpointRequest {
        typealias Success = [Product]
        var endpoint: Endpoint { api.get("catalogue") }
        var cacheUse: CacheUse { .useCache }      // the default; also .revalidate, .reload, .onlyIfCached, .bypass
    }
    // article-example-end
    queue.addRequest(Catalogue()) { _ in }
}
