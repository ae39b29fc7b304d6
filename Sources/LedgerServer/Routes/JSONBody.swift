import FCMWire
import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

extension FCMError {
    /// 413: a request body over `limit` bytes (INVALID_ARGUMENT, as FCM says it).
    static func bodyTooLarge(limit: Int) -> FCMError {
        FCMError(
            status: .contentTooLarge, googleStatus: "INVALID_ARGUMENT", errorCode: "INVALID_ARGUMENT",
            message: "Request body is larger than \(limit) bytes.")
    }
}

/// Reading request bodies as JSON objects, with FCM-shaped errors.
enum JSONBody {
    /// The body as a JSON object, typed (``JSONValue/init(parsing:)``): what the send route validates.
    ///
    /// - Throws: 413 when larger than `limit`; 400 INVALID_ARGUMENT when empty or not a JSON object.
    static func parsedObject(_ request: Request, limit: Int) async throws -> [String: JSONValue] {
        let buffer = try await bytes(request, limit: limit)
        if buffer.readableBytes == 0 {
            throw FCMError.invalidArgument("Request body is empty; a JSON object is expected.")
        }
        let value: JSONValue
        do {
            value = try JSONValue(parsing: buffer.readableBytesView)
        } catch {
            throw FCMError.invalidArgument("Invalid JSON payload received: \(error).")
        }
        guard let object = value.object else {
            throw FCMError.invalidArgument("Invalid JSON payload received: the body must be a JSON object.")
        }
        return object
    }

    /// The body's bytes, empty or passing ``StrictJSON`` (UTF-8, no byte-order mark, no repeated names).
    ///
    /// - Throws: 413 when larger than `limit`; 400 INVALID_ARGUMENT when the strict checks fail.
    static func bytes(_ request: Request, limit: Int) async throws -> ByteBuffer {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: limit)
        } catch {
            throw FCMError.bodyTooLarge(limit: limit)
        }
        if buffer.readableBytes > 0, let problem = StrictJSON.problem(in: buffer.readableBytesView) {
            throw FCMError.invalidArgument("Invalid JSON payload received: \(problem).")
        }
        return buffer
    }
}
