import FCMWire
import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

/// `pageSize` and `pageToken` (also snake_case) of a list request. Sizes above the maximum are coerced to
/// it (Google AIP-158); zero, negative or non-numeric sizes are 400.
struct PageRequest {
    let size: Int
    /// The last item of the previous page; the page starts after it.
    let after: String?

    init(_ request: Request, defaultSize: Int, maximumSize: Int) throws {
        let query = request.uri.queryParameters
        var size = defaultSize
        if let text = query["pageSize"] ?? query["page_size"] {
            guard let value = Int(text), value >= 1 else {
                throw FCMError.invalidArgument("pageSize must be a positive integer", field: "pageSize")
            }
            size = min(value, maximumSize)
        }
        self.size = size
        self.after = (query["pageToken"] ?? query["page_token"]).map(String.init)
    }
}
