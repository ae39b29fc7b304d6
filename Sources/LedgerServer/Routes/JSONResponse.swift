import Foundation
import Hummingbird

/// JSON responses: `Encodable` bodies (the routes' own types in ResponseBodies.swift, LedgerStore's `AuditJSON`
/// shapes and `LedgerProofs` documents), or bytes written by hand on the hottest routes.
enum JSONResponse {
    /// `value` encoded by `JSONEncoder`, keys sorted and slashes unescaped.
    static func encoded(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        bytes(try encoder.encode(value), status: status)
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// A body that is JSON already (assembled from bytes, as delivery pages are).
    static func bytes(_ json: some Sequence<UInt8>, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=UTF-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: json)))
    }
}
