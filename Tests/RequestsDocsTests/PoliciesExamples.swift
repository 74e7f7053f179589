// swift-format-ignore-file
// Kept out of swift-format: the marked parts of this file are the ```swift blocks of Policies.md, character for
// character (ArticleExamplesTests checks it).

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests

func policiesUsage(queue: OperationQueue) {
    // article-example-begin
    let tokens = TokenAuthenticator(token: keychain.token) { rejected, completion in
        auth.refresh(rejected, completion: completion)           // your call; runs once for all waiting requests
    }
    queue.requestPolicies.adapters.append(.setHeader("application/json", for: "Accept"))
    queue.requestPolicies.preconditions.append(RequestPrecondition { _ in if offline { throw AppError.offline } })
    queue.requestPolicies.validations.append(.contentTypeMatchesAccept)
    queue.requestPolicies.retryPolicy = .default
    queue.requestPolicies.authenticator = tokens
    queue.requestPolicies.monitors.append(RequestLogger(redaction: Redaction(queryItems: ["api_key"])))

    struct LoginRequest: DecodableRequest, EndpointRequest {
        typealias Success = Token
        let user: String, password: String
        var endpoint: Endpoint { api.post("login", body: .form(["user": user, "password": password])) }
        var usesAuthenticator: Bool { false }                    // a wrong password is not an expired token
        var retryPolicy: RetryPolicy? { RetryPolicy(maxAttempts: 1) }   // replaces the queue's policy
        var validations: [ResponseValidation] { [ResponseValidation { _, response, _ in /* throw to refuse */ }] }
    }
    // article-example-end
    _ = LoginRequest(user: "ada", password: "secret")
}

func customRetryUsage(queue: OperationQueue) {
    // article-example-begin
    queue.requestPolicies.retryPolicy = .custom { context in
        guard (context.error as? URLError)?.code == .notConnectedToInternet else { return .doNotRetry }
        await reachability.waitUntilOnline()
        return .retry
    }
    // article-example-end
}

func signature(of request: URLRequest) -> String { "signed" }

func retryAndAdapterUsage(queue: OperationQueue) {
    // article-example-begin
    queue.requestPolicies.retryPolicy = RetryPolicy(alsoRetrying: [.post])
    // article-example-end
    // article-example-begin
    queue.requestPolicies.adapters.append(RequestAdapter { request, completion in
        var signed = request
        signed.setValue(signature(of: request), forHTTPHeaderField: "X-Signature")   // your code
        completion(.success(signed))
    })
    queue.requestPolicies.adapters.append(.map { request in
        var request = request
        request.setValue(Locale.current.identifier, forHTTPHeaderField: "Accept-Language")
        return request
    })
    // article-example-end
}
