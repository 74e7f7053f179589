// swift-format-ignore-file
// Kept out of swift-format: part of this file must stay verbatim (the original README's example).

import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Requests
import RequestsTestServer
import XCTest

// Code written for the original library, compiled in Swift 5 language mode: the README example verbatim
// (URL changed), an optional completion, `nil`, and the `CompletionType` alias.

private let server = try! LoopbackServer()

struct Recipe: Decodable { let name: String; let ingredients: [String]; let steps: [String] }
struct RecipeRequest: DecodableRequest {
  typealias Success = Recipe
  typealias Failure = Error
  var identifier: String { return recipeId }
  let recipeId: String
  func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
    let url = URL(string: "\(server.baseURL.absoluteString)/json?recipe=\(recipeId)")!
    completion(.success(URLRequest(url: url)))
  }
}

final class ReadmeExampleSwift5Tests: XCTestCase {
    func testOriginalCallSitesCompileAndRun() {
        let queue = OperationQueue()
        queue.addRequest(RecipeRequest(recipeId: "1")) { result in
          switch result {
          case .success(let recipe): print("Recipe name: \(recipe.name)")
          case .failure(let error): print(error)
          }
        }

        let handler: RecipeRequest.CompletionType? = nil
        queue.addRequest(RecipeRequest(recipeId: "2"), completion: handler)
        queue.addRequest(RecipeRequest(recipeId: "3"), session: .shared, completion: nil)

        let done = expectation(description: "completion")
        var name: String?
        let operation: Operation = queue.addRequest(RecipeRequest(recipeId: "4"), session: .shared, completionQueue: .main) { result in
            name = try? result.get().name
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(name, "Pancakes")
        XCTAssertTrue(operation.isFinished)
        XCTAssertNil(queue.requestCurrentlyExecuting(RecipeRequest(recipeId: "4")))
        XCTAssertEqual(server.requestCount(path: "/json"), 4)
    }

    func testTheShortFormsCompileAndRunInSwift5Mode() async throws {
        struct Recipe: Decodable { let name: String }
        server.route("/short-form") { _ in .json(#"{"name":"Pancakes"}"#) }
        let api = Endpoint(server.baseURL.absoluteString)
        let queue = OperationQueue()
        let recipe = try await queue.response(for: api.get("short-form"), as: Recipe.self)
        let operation = queue.addRequest(api.get("short-form").decoding(Recipe.self))
        let again = try await operation.value
        XCTAssertEqual([recipe.name, again.name], ["Pancakes", "Pancakes"])
    }
}
