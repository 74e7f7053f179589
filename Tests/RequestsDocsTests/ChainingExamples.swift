// swift-format-ignore-file
// Kept out of swift-format: the marked part of this file is the ```swift block of Chaining.md, character for
// character (ArticleExamplesTests checks it).

import Foundation
import Requests

func chainingUsage(password: String) {
    // article-example-begin
    let queue = OperationQueue()

    // login → token → profile → UI
    let token = queue.addRequest(Login(user: "ada", password: password))
    let profile = queue.addRequest(after: token) { ProfileRequest(token: $0.token) }
    profile.whenFinished { result in                     // on OperationQueue.main
        nameLabel.text = (try? result.get())?.name
    }
    // article-example-end
}
