import FCMWire
import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

extension Request {
    /// The bearer secret of the `Authorization` header, if any.
    var bearerSecret: String? {
        guard let header = headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1])
    }

    /// The client API key (`x-goog-api-key`), if any.
    var apiKey: String? {
        HTTPField.Name("x-goog-api-key").flatMap { headers[$0] }
    }

    /// A request id for the events this request appends.
    var ledgerRequestID: String { RequestID.random() }
}
