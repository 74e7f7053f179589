import Foundation

// TEMPORARY until the journal's non-blocking calls land.
extension Journal {
    func append(_ payloads: [Data], completion: @escaping @Sendable (Result<[UInt64], JournalError>) -> Void) {
        DispatchQueue.global().async {
            do { completion(.success(try self.append(payloads))) } catch { completion(.failure(JournalError(error))) }
        }
    }
    func remove(_ ids: [UInt64], completion: @escaping @Sendable (Result<Void, JournalError>) -> Void) {
        DispatchQueue.global().async {
            do { completion(.success(try self.remove(ids))) } catch { completion(.failure(JournalError(error))) }
        }
    }
}
