// swift-format-ignore-file
// Kept out of swift-format: the marked parts of this file are the ```swift blocks of DurableOutbox.md (in
// Sources/RequestsOutbox/RequestsOutbox.docc), character for character (ArticleExamplesTests checks it).

import Foundation
// article-example-begin
import Requests
import RequestsOutbox

struct FieldReport: Codable, Sendable {
    var site: String
    var notes: String
}

struct SubmitReport: OutboxRequest, EndpointRequest, NoContentRequest {
    var report: FieldReport
    var endpoint: Endpoint { api.post("reports", body: .json(report)) }
    // The server answers 201 with the stored report: accepted, as the queue would accept it.
    var shouldEnforceNoContent: Bool { false }
}
// article-example-end

/// A label, as in a UI.
final class SyncLabel: @unchecked Sendable { var text = "" }
let syncLabel = SyncLabel()

@MainActor
func outboxUsage(report: FieldReport, photoURL: URL) async throws {
    // article-example-begin
    let folder = appSupport.appendingPathComponent("Outbox", isDirectory: true)
    let outbox = try await Outbox.open(directory: folder, queue: OperationQueue(), requestTypes: [SubmitReport.self])

    let photo = OutboxAttachment(file: photoURL, name: "photo", mimeType: "image/jpeg")
    let entry = try await outbox.enqueue(
        SubmitReport(report: report), lane: "reports", files: .multipart([photo], requestPart: "report"))
    print("Saved with its photo; it will be sent with Idempotency-Key \(entry.idempotencyKey)")

    Task {
        for await change in outbox.changes {
            syncLabel.text = change.pendingCount == 0 ? "All changes synced" : "\(change.pendingCount) changes waiting to sync"
        }
    }
    // article-example-end
}

// article-example-begin
func saveDraft(_ report: FieldReport, outbox: Outbox) async throws {
    try await outbox.enqueue(SubmitReport(report: report), replacing: "draft-\(report.site)")
}
// article-example-end

func outboxDeadLetters(outbox: Outbox) throws {
    // article-example-begin
    for letter in outbox.deadLetters {
        let report = letter.request(as: SubmitReport.self)
        print(report?.report.site ?? "?", letter.deadLetter?.reason as Any, letter.deadLetter?.response?.statusCode as Any)
        if letter.deadLetter?.response?.statusCode == 409 {
            try outbox.drop(letter.id)      // the server already has a newer one
        } else {
            try outbox.retry(letter.id)     // sent again, with the same key
        }
    }
    // article-example-end
}

// article-example-begin
final class OutboxAlarm: OutboxMonitor {
    func outboxDidOpen(_ directory: URL, report: OutboxOpeningReport) {
        guard !report.isAllClear else { return }
        if let loss = report.loss {
            print("The outbox lost its journal (\(loss.kind)): it knew \(loss.entriesAtLastCheckpoint ?? 0) entries, found \(loss.entriesFound)")
        }
        print("Skipped \(report.skippedRecords) damaged records")
        for file in report.damagedAttachments {
            print("Entry \(file.entryID) was parked: its file \(file.fileName) \(file.problem)")
        }
    }
}
// article-example-end
