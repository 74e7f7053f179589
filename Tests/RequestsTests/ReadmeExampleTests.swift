// swift-format-ignore-file
// Kept out of swift-format: part of this file must stay verbatim (the original README's example).

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
import Requests
import XCTest

// The original library's README example, verbatim except for the URL, which points at the loopback server.
// It must compile unchanged in Swift 6 language mode (this target) and Swift 5 mode (RequestsSwift5Tests).

private struct Recipe: Decodable { let name: String; let ingredients: [String]; let steps: [String] }
private struct RecipeRequest: DecodableRequest {
  typealias Success = Recipe
  typealias Failure = Error
  var identifier: String { return recipeId }
  let recipeId: String
  func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
    let url = URL(string: "\(TestServer.shared.baseURL.absoluteString)/fakeapi/recipe/\(recipeId)")!
    completion(.success(URLRequest(url: url)))
  }
}

final class ReadmeExampleTests: XCTestCase {
    func testReadmeExampleCompilesAndRuns() {
        let before = TestServer.shared.requestCount(path: "/fakeapi/recipe/1")

        // --- verbatim ---
        let queue = OperationQueue()
        queue.addRequest(RecipeRequest(recipeId: "1")) { result in
          switch result {
          case .success(let recipe): print("Recipe name: \(recipe.name)")
          case .failure(let error): print(error)
          }
        }
        // --- end verbatim ---

        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(TestServer.shared.requestCount(path: "/fakeapi/recipe/1"), before + 1)
    }

    func testReadmeRequestDecodesTheRecipe() {
        // Given the README's request type
        let queue = OperationQueue()
        let done = expectation(description: "completion")
        // When it runs
        queue.addRequest(RecipeRequest(recipeId: "1")) { result in
            // Then the recipe is decoded
            XCTAssertEqual(try? result.get().name, "Pancakes")
            XCTAssertEqual(try? result.get().steps, ["mix", "fry"])
            done.fulfill()
        }
        wait(for: [done], timeout: 10)
    }
}
