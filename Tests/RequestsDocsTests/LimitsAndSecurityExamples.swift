// swift-format-ignore-file
// Kept out of swift-format: the marked part of this file is the ```swift block of LimitsAndSecurity.md, character for
// character (ArticleExamplesTests checks it).

import Foundation
import Requests

func limitsUsage(queue: OperationQueue) {
    // article-example-begin
    queue.requestPolicies.limits = TransferLimits(maximumBodySize: 8 << 20, deadline: 30)   // nil anywhere = no limit
    queue.requestPolicies.redirectPolicy = .sameOrigin
    queue.requestPolicies.sensitiveHeaders.append("X-Api-Key")

    struct Export: DownloadRequest, EndpointRequest {
        var endpoint: Endpoint { api.get("export") }
        var limits: TransferLimits? { TransferLimits(maximumDownloadSize: 2 << 30, minimumSpeed: MinimumSpeed(bytes: 64 << 10, seconds: 30)) }
    }
    // article-example-end
    queue.addRequest(Export()) { _ in }
}
