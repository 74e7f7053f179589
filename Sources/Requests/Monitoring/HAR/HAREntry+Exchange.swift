#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Foundation

extension HAREntry {
    /// The entry of an exchange made outside the engine (a replay that forwards a request it has no entry for):
    /// `request` sent, `started` at that date, answered after `duration` seconds with `response` and `body`, or with
    /// `error` and no response.
    package init(
        request: URLRequest, response: HTTPURLResponse?, error: Error?, body: Data, started: Date, duration: TimeInterval, redaction: Redaction,
        maximumBodyBytes: Int
    ) {
        let exchange = RecordedExchange(
            attempt: RequestAttempt(identifier: "", number: 1, urlRequest: request), startedDate: started, duration: duration, metrics: nil,
            requestBody: CapturedBody.sent(request, upload: nil, limit: maximumBodyBytes), response: response,
            transportError: error, responseBody: CapturedBody(body, limit: maximumBodyBytes))
        self.init(exchange, redaction: redaction)
    }

    /// The entry of `exchange`, with what `redaction` hides replaced by its placeholder.
    init(_ exchange: RecordedExchange, redaction: Redaction) {
        let sent = exchange.attempt.urlRequest
        let url = sent.url.map(redaction.string(for:)) ?? ""
        let request = HARRequest(
            method: sent.httpMethod ?? "GET", url: url,
            headers: Self.headers(sent.allHTTPHeaderFields ?? [:], redaction: redaction),
            queryString: HARQuery.items(of: url).map { HARHeader(name: $0.name, value: $0.value) },
            postData: exchange.requestBody.map {
                let (text, encoding, comment) = Self.text(of: $0, mimeType: sent.value(forHTTPHeaderField: "Content-Type"), redaction: redaction)
                return HARPostData(mimeType: sent.value(forHTTPHeaderField: "Content-Type") ?? "", text: text ?? "", encoding: encoding, comment: comment)
            },
            bodySize: exchange.requestBody?.size ?? 0)
        var harResponse = exchange.response.map { Self.response($0, body: exchange.responseBody, redaction: redaction) } ?? Self.noResponse(exchange.transportError)
        // A transfer that broke after its headers: the error beside the status (a replay delivers the body, then it).
        if exchange.response != nil, let error = exchange.transportError { harResponse.error = HARResponse.errorText(error) }
        var finalURL: String?
        if let answered = exchange.response?.url, answered != sent.url { finalURL = redaction.string(for: answered) }
        self.init(
            startedDateTime: HARTimestamp.string(exchange.startedDate), request: request, response: harResponse,
            timings: HARTimings(duration: exchange.duration, metrics: exchange.metrics),
            comment: finalURL.map { "answered by \($0) after redirects" })
    }

    private static func response(_ response: HTTPURLResponse, body: CapturedBody, redaction: Redaction) -> HARResponse {
        let headers = Dictionary(response.allHeaderFields.map { ("\($0.key)", "\($0.value)") }, uniquingKeysWith: { first, _ in first })
        let mimeType = response.value(forHTTPHeaderField: "Content-Type") ?? ""
        let content: HARContent
        if body.chunks != nil, mimeType.lowercased().contains("json"), !redaction.jsonFields.isEmpty {
            // A streamed JSON body is pieces that do not parse on their own (or lines of JSON), so hidden fields could
            // not be found in them: neither the pieces nor the whole are kept.
            let comment = "a streamed JSON body is not kept when JSON fields are redacted (\(body.size) bytes)"
            content = HARContent(size: body.size, mimeType: mimeType, text: nil, encoding: nil, comment: comment)
        } else {
            let (text, encoding, comment) = Self.text(of: body, mimeType: mimeType, redaction: redaction)
            content = HARContent(
                size: body.size, mimeType: mimeType, text: text, encoding: encoding, comment: comment,
                chunks: body.chunks?.map { Self.chunk($0, mimeType: mimeType, redaction: redaction) })
        }
        // `Location` may be relative: the URL it names, as browsers write it.
        let location = response.value(forHTTPHeaderField: "Location").flatMap { URL(string: $0, relativeTo: response.url)?.absoluteURL }
        return HARResponse(
            status: response.statusCode, statusText: HTTPURLResponse.localizedString(forStatusCode: response.statusCode),
            headers: Self.headers(headers, redaction: redaction), content: content, redirectURL: location.map(redaction.string(for:)) ?? "",
            bodySize: body.size)
    }

    /// A piece of a streamed body, written as ``text(of:mimeType:redaction:)`` writes a whole body (a piece of text
    /// that ends inside a character is written in Base64).
    private static func chunk(_ chunk: CapturedChunk, mimeType: String, redaction: Redaction) -> HARChunk {
        let (text, encoding, _) = Self.text(of: CapturedBody(bytes: chunk.bytes, size: chunk.bytes.count, omission: nil), mimeType: mimeType, redaction: redaction)
        return HARChunk(time: (chunk.time * 1_000_000).rounded() / 1000, text: text ?? "", encoding: encoding)
    }

    /// What browsers write for a request that got no response: status `0`, and the error in `_error`.
    private static func noResponse(_ error: Error?) -> HARResponse {
        var response = HARResponse(
            status: 0, statusText: "", headers: [], content: HARContent(size: 0, mimeType: "", text: nil, encoding: nil, comment: nil),
            redirectURL: "", bodySize: -1)
        response.error = HARResponse.errorText(error)
        return response
    }

    /// `headers` sorted by name, with hidden values replaced.
    private static func headers(_ headers: [String: String], redaction: Redaction) -> [HARHeader] {
        redaction.fields(headers).map { HARHeader(name: $0.name, value: $0.value) }
    }

    /// How `body` is written: UTF-8 text for a textual type (JSON with its hidden fields replaced), Base64 otherwise;
    /// and a comment when it is not whole.
    static func text(of body: CapturedBody, mimeType: String?, redaction: Redaction) -> (text: String?, encoding: String?, comment: String?) {
        if let omission = body.omission { return (nil, nil, omission) }
        guard !body.bytes.isEmpty else { return ("", nil, nil) }
        let type = (mimeType ?? "").lowercased()
        let truncation = body.isTruncated ? "truncated: \(body.bytes.count) of \(body.size) bytes kept" : nil
        if type.contains("json") {
            guard !body.isTruncated || redaction.jsonFields.isEmpty else {
                // A JSON body cut short cannot be parsed, so its hidden fields could not be found: not kept.
                return (nil, nil, "a truncated JSON body is not kept when JSON fields are redacted (\(body.size) bytes)")
            }
            if let text = String(data: redaction.json(body.bytes), encoding: .utf8) { return (text, nil, truncation) }
        } else if isTextual(type), let text = String(data: body.bytes, encoding: .utf8) {
            return (text, nil, truncation)
        }
        return (body.bytes.base64EncodedString(), "base64", truncation)
    }

    private static func isTextual(_ type: String) -> Bool {
        type.hasPrefix("text/") || type.hasPrefix("multipart/")
            || ["xml", "javascript", "x-www-form-urlencoded", "event-stream"].contains { type.contains($0) }
    }
}

extension HARTimings {
    /// The phases of an attempt that took `duration` seconds: the wait up to the first byte and the receive after it
    /// (all of it a wait when the first byte's time is unknown), and the connection's phases when it opened one.
    init(duration: TimeInterval, metrics: TransferMetrics?) {
        self.init()
        func milliseconds(_ seconds: TimeInterval?) -> Double { seconds.map { ($0 * 1_000_000).rounded() / 1000 } ?? -1 }
        let total = max(duration, 0)
        let firstByte = min(metrics?.timeToFirstByte ?? total, total)
        (wait, receive) = (milliseconds(firstByte), milliseconds(total - firstByte))
        dns = milliseconds(metrics?.domainLookupDuration)
        ssl = milliseconds(metrics?.secureConnectionDuration)
        if let connectDuration = metrics?.connectDuration {
            connect = milliseconds(connectDuration + (metrics?.secureConnectionDuration ?? 0))
        }
    }
}

/// The query items of a URL as HAR writes them: split on `&` and `=` and percent-decoded, without parsing the URL
/// (a redacted value, `<redacted>`, is not valid in a URL).
package enum HARQuery {
    package static func items(of url: String) -> [(name: String, value: String)] {
        let withoutFragment = url.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let parts = withoutFragment.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return [] }
        return parts[1].split(separator: "&").map { item in
            let pair = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map { String($0) }
            func decoded(_ text: String) -> String { (text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding) ?? text }
            return (decoded(pair[0]), pair.count > 1 ? decoded(pair[1]) : "")
        }
    }
}

extension Int64 {
    /// The quotient rounded toward negative infinity.
    fileprivate func floorDivided(by divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }

    /// The remainder of ``floorDivided(by:)``, of the divisor's sign.
    fileprivate func floorModulo(_ divisor: Int64) -> Int64 {
        self - floorDivided(by: divisor) * divisor
    }
}

/// The `startedDateTime` of an entry.
package enum HARTimestamp {
    /// `date` in ISO 8601, UTC, with milliseconds (`2026-11-29T14:30:23.278Z`), as browsers write `startedDateTime`.
    /// Written by hand: an `ISO8601DateFormatter` costs more than the rest of an entry, and one per entry was most of
    /// what a recording cost.
    package static func string(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded())
        let (days, millisecondOfDay) = (milliseconds.floorDivided(by: 86_400_000), milliseconds.floorModulo(86_400_000))
        // The civil date of a day count since 1970-01-01 (the proleptic Gregorian calendar, in 400-year eras).
        let shifted = days + 719_468
        let era = shifted.floorDivided(by: 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func padded(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(width - digits.count, 0)) + digits
        }
        let (hour, minute) = (millisecondOfDay / 3_600_000, millisecondOfDay / 60_000 % 60)
        let (second, millisecond) = (millisecondOfDay / 1000 % 60, millisecondOfDay % 1000)
        return "\(padded(year, 4))-\(padded(month, 2))-\(padded(day, 2))T\(padded(hour, 2)):\(padded(minute, 2)):\(padded(second, 2))."
            + "\(padded(millisecond, 3))Z"
    }
}
