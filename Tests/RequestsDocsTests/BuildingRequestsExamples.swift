// swift-format-ignore-file
// Kept out of swift-format: the marked part of this file is the ```swift block of BuildingRequests.md, character for
// character (ArticleExamplesTests checks it).

import Foundation
import Requests

// article-example-begin
let api = Endpoint("https://api.example.com/v1")

struct SearchRecipes: DecodableRequest, EndpointRequest {            // GET with a query
    typealias Success = [Recipe]
    let text: String
    var endpoint: Endpoint { api.get("recipes", query: ["q": text, "tags": ["quick"], "page": 2]) }
}

struct CreateRecipe: DecodableRequest, EndpointRequest {             // POST JSON
    typealias Success = Recipe
    let recipe: NewRecipe
    var endpoint: Endpoint { api.post("recipes", body: .json(recipe)) }
}

struct Login: DecodableRequest, EndpointRequest {                    // POST a form
    typealias Success = Token
    let user: String, password: String
    var endpoint: Endpoint { api.post("login", body: .form(["user": user, "password": password])) }
}

struct UploadPhoto: NoContentRequest, EndpointRequest {              // multipart upload
    let photo: URL
    var endpoint: Endpoint { api.post("photos", body: .multipart(MultipartFormData(files: ["photo": photo]))) }
}
// article-example-end
