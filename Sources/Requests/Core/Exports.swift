// `import Requests` alone is enough to use the library: its API is written in Foundation's types (`URL`,
// `URLRequest`, `URLSession`, `JSONDecoder`, `OperationQueue`), and on Linux the networking ones live in
// FoundationNetworking, which a user who only wrote `import Foundation` would not have.
@_exported import Foundation

#if canImport(FoundationNetworking)
@_exported import FoundationNetworking
#endif
