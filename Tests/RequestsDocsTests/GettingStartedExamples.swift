// swift-format-ignore-file
// Kept out of swift-format: the marked parts of this file are the ```swift blocks of GettingStarted.md and Requests.md,
// character for character (ArticleExamplesTests checks it).

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation
// article-example-begin
import Requests

struct Recipe: Decodable { let name: String; let ingredients: [String]; let steps: [String] }

struct RecipeRequest: DecodableRequest {
  typealias Success = Recipe
  typealias Failure = Error
  var identifier: String { return recipeId }
  let recipeId: String
  func makeURLRequest(completion: @escaping (Result<URLRequest, Error>) -> Void) {
    let url = URL(string: "https://recipes.com/fakeapi/recipe/\(recipeId)")!
    completion(.success(URLRequest(url: url)))
  }
}
// article-example-end

func gettingStartedUsage() {
    // article-example-begin
    let queue = OperationQueue()
    queue.addRequest(RecipeRequest(recipeId: "1")) { result in
      switch result {
      case .success(let recipe): print("Recipe name: \(recipe.name)")
      case .failure(let error): print(error)
      }
    }
    // article-example-end
}
