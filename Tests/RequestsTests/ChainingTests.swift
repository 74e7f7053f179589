#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import RequestsTestServer
import XCTest

// login → token → profile → avatar, against routes that check the token for real.

private struct Token: Decodable { let token: String }
private struct Profile: Decodable { let name: String; let avatar: String }

private struct LoginRequest: DecodableRequest {
    typealias Success = Token
    typealias Failure = Error
    var identifier: String { "login-\(user)" }
    let user: String
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: ChainRoutes.server.url("/chain/login?user=\(user)"))
        request.httpMethod = "POST"
        completion(.success(request))
    }
}

private struct ProfileRequest: DecodableRequest {
    typealias Success = Profile
    typealias Failure = Error
    var identifier: String { "profile" }
    let token: String
    func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
        var request = URLRequest(url: ChainRoutes.server.url("/chain/profile"))
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        completion(.success(request))
    }
}

private enum ChainRoutes {
    static let server: LoopbackServer = {
        let server = TestServer.shared
        server.route("/chain/login") { request in
            request.query["user"] == "ada" ? .json(#"{"token":"t-ada"}"#) : .json(#"{"error":"no such user"}"#, status: 403)
        }
        server.route("/chain/profile") { request in
            request.headers["authorization"] == "Bearer t-ada"
                ? .json(#"{"name":"Ada","avatar":"/bytes/16"}"#)
                : .json(#"{"error":"bad token"}"#, status: 401)
        }
        return server
    }()
}

final class ChainingTests: XCTestCase {
    private let server = ChainRoutes.server

    func testDependentReadsTheTypedResultWithoutCasting() {
        // Given a request operation and a dependent on another queue
        let queue = OperationQueue()
        let recipe = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession)
        let names = Recorder<String?>()
        let dependent = BlockOperation { names.append(try? recipe.result?.get().name) }
        dependent.addDependency(recipe)
        // When both run
        OperationQueue().addOperations([dependent], waitUntilFinished: true)
        // Then the dependent read the typed value
        XCTAssertEqual(names.values, ["Pancakes"])
    }

    func testLoginTokenProfileAvatarChainOfThree() {
        // Given a chain where each request is built from the previous success value
        let queue = OperationQueue()
        let token = queue.addRequest(LoginRequest(user: "ada"), session: testSession)
        let profile = queue.addRequest(after: token, session: testSession) { ProfileRequest(token: $0.token) }
        let avatar = queue.addRequest(after: profile, session: testSession) { GetData(url: self.server.url($0.avatar)) }
        // When it runs
        queue.waitUntilAllOperationsAreFinished()
        // Then each link got the previous one's value
        XCTAssertEqual(try profile.result?.get().name, "Ada")
        XCTAssertEqual(try avatar.result?.get().count, 16)
    }

    func testFailedPreviousRequestMeansTheNextIsNeverSent() {
        // Given a login that fails with 403
        let queue = OperationQueue()
        let before = server.requestCount(path: "/chain/profile")
        let token = queue.addRequest(LoginRequest(user: "eve"), session: testSession)
        let results = Recorder<Result<Profile, Error>>()
        let profile = queue.addRequest(after: token, session: testSession, makeRequest: { ProfileRequest(token: $0.token) }) {
            results.append($0)
        }
        queue.waitUntilAllOperationsAreFinished()
        // Then the profile request was not sent, and its error carries the login's error
        XCTAssertEqual(server.requestCount(path: "/chain/profile"), before)
        XCTAssertEqual(results.count, 1)
        guard case let .dependencyFailed(cause)? = results.values.first?.failure as? RequestQueueError else {
            return XCTFail("expected dependencyFailed, got \(results.values)")
        }
        XCTAssertEqual((cause as? RequestQueueError)?.statusCode, 403)
        XCTAssertTrue(profile.isFinished)
    }

    func testCancelledPreviousRequestFailsTheNextWithTheCancellation() {
        let queue = OperationQueue()
        queue.isSuspended = true
        let first = queue.addRequest(GetData(url: server.url("/json")), session: testSession)
        let second = queue.addRequest(after: first, session: testSession) { _ in GetData(url: self.server.url("/json?second")) }
        first.cancel()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        guard case let .dependencyFailed(cause)? = second.result?.failure as? RequestQueueError else {
            return XCTFail("expected dependencyFailed, got \(String(describing: second.result))")
        }
        XCTAssertTrue(cause.isRequestCancellation)
    }

    func testErrorThrownWhileBuildingTheNextRequestFailsIt() {
        struct NoAvatar: Error {}
        let queue = OperationQueue()
        let token = queue.addRequest(LoginRequest(user: "ada"), session: testSession)
        let next = queue.addRequest(after: token, session: testSession) { _ -> GetData in throw NoAvatar() }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(next.result?.failure is NoAvatar)
    }

    func testCancellingTheLastLinkCancelsTheWholeChain() {
        // Given a chain whose first request the server holds for 60 s
        let queue = OperationQueue()
        let firstResults = Recorder<Result<Data, Error>>()
        let first = queue.addRequest(GetData(url: server.url("/delay/60000?chain")), session: testSession) { firstResults.append($0) }
        let second = queue.addRequest(after: first, session: testSession) { _ in GetData(url: self.server.url("/json?second")) }
        let third = queue.addRequest(after: second, session: testSession) { _ in GetData(url: self.server.url("/json?third")) }
        waitUntil("the first request is at the server") { self.server.requestCount(path: "/delay/60000") > 0 && first.isExecuting }
        // When the last link is cancelled
        third.cancel()
        // Then every link completes with cancellation, without waiting for the server
        waitUntil("the whole chain finishes") { first.isFinished && second.isFinished && third.isFinished }
        XCTAssertTrue(firstResults.values.first?.failure?.isRequestCancellation ?? false, "\(firstResults.values)")
        XCTAssertTrue(second.result?.failure?.isRequestCancellation ?? false)
        XCTAssertTrue(third.result?.failure?.isRequestCancellation ?? false)
        XCTAssertEqual(firstResults.count, 1)
    }

    func testCancellingOneBranchLeavesTheSharedPreviousRequestRunning() {
        // Given two requests built from one login
        let queue = OperationQueue()
        let token = queue.addRequest(GetDecodable<Token>(url: server.url("/chain/login?user=ada&delay=200")), session: testSession)
        let profile = queue.addRequest(after: token, session: testSession) { ProfileRequest(token: $0.token) }
        let other = queue.addRequest(after: token, session: testSession) { ProfileRequest(token: $0.token) }
        // When one branch is cancelled
        other.cancel()
        queue.waitUntilAllOperationsAreFinished()
        // Then the login and the other branch still succeed
        XCTAssertNotNil(token.result?.success)
        XCTAssertEqual(try profile.result?.get().name, "Ada")
        XCTAssertTrue(other.result?.failure?.isRequestCancellation ?? false)
    }

    func testChainHasNoRetainCycles() {
        weak var weakToken: Operation?
        weak var weakProfile: Operation?
        weak var weakStep: Operation?
        let queue = OperationQueue()
        let shown = expectation(description: "UI step")
        do {
            let token = queue.addRequest(LoginRequest(user: "ada"), session: testSession)
            let profile = queue.addRequest(after: token, session: testSession) { ProfileRequest(token: $0.token) }
            let step = profile.whenFinished(on: queue) { _ in shown.fulfill() }
            weakToken = token
            weakProfile = profile
            weakStep = step
        }
        wait(for: [shown], timeout: 10)
        queue.waitUntilAllOperationsAreFinished()
        waitUntil("the chain is released") { weakToken == nil && weakProfile == nil && weakStep == nil }
    }

    func testUIStepRunsOnMainWithTheResults() {
        // Given a login → profile chain
        let queue = OperationQueue()
        let token = queue.addRequest(LoginRequest(user: "ada"), session: testSession)
        let profile = queue.addRequest(after: token, session: testSession) { ProfileRequest(token: $0.token) }
        let recipe = queue.addRequest(GetDecodable<ServedRecipe>(url: server.url("/json")), session: testSession)
        // When UI steps wait for one, two and three of them
        let one = expectation(description: "one")
        let two = expectation(description: "two")
        let three = expectation(description: "three")
        profile.whenFinished { result in
            XCTAssertTrue(Thread.isMainThread)
            XCTAssertEqual(try? result.get().name, "Ada")
            one.fulfill()
        }
        token.whenFinished(with: profile) { tokenResult, profileResult in
            XCTAssertTrue(Thread.isMainThread)
            XCTAssertEqual(try? tokenResult.get().token, "t-ada")
            XCTAssertEqual(try? profileResult.get().name, "Ada")
            two.fulfill()
        }
        token.whenFinished(with: profile, recipe) { tokenResult, profileResult, recipeResult in
            XCTAssertNotNil(tokenResult.success)
            XCTAssertNotNil(profileResult.success)
            XCTAssertEqual(try? recipeResult.get().name, "Pancakes")
            three.fulfill()
        }
        // Then each runs on the main queue with typed results
        wait(for: [one, two, three], timeout: 10)
    }

    func testUIStepOnAGivenQueue() {
        let queue = OperationQueue()
        let ui = OperationQueue()
        ui.name = "ui"
        let done = expectation(description: "step")
        queue.addRequest(GetData(url: server.url("/json")), session: testSession).whenFinished(on: ui) { result in
            XCTAssertTrue(OperationQueue.current === ui)
            XCTAssertNotNil(result.success)
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
    }
}
