import FCMWire
import Foundation
import Hummingbird
import LedgerCore

extension JSONBody {
    private static let decoder = JSONDecoder()

    /// The body decoded as `Body`, after ``bytes(_:limit:)``'s checks.
    ///
    /// - Throws: 413 when larger than `limit`; 400 INVALID_ARGUMENT when empty, not JSON or not a JSON
    ///   object, and whatever `Body` refuses, naming the field.
    static func decode<Body: Decodable>(_ type: Body.Type, _ request: Request, limit: Int) async throws -> Body {
        guard let body = try await decodeIfSent(Body.self, request, limit: limit) else {
            throw FCMError.invalidArgument("Request body is empty; a JSON object is expected.")
        }
        return body
    }

    /// Checks that a body whose members do not matter (the v1 subscribe call sends `{}`) is empty or a JSON
    /// object, with ``FlatJSONObject``: `JSONDecoder`'s set-up cost for `{}` was 2.7 % of that route's
    /// samples under load (`JSONSerialization`'s 0.7 %), the byte-level reader's is below 0.1 %.
    static func requireObjectIfSent(_ request: Request, limit: Int) async throws {
        let buffer = try await bytes(request, limit: limit)
        guard buffer.readableBytes > 0 else { return }
        let problem: String? = buffer.withUnsafeReadableBytes { raw in
            let bytes = raw.assumingMemoryBound(to: UInt8.self)
            guard let first = bytes.firstIndex(where: { !Self.whitespace.contains($0) }) else {
                return "Invalid JSON payload received."
            }
            guard bytes[first] == UInt8(ascii: "{") else {
                return "Invalid JSON payload received: the body must be a JSON object."
            }
            return (try? FlatJSONObject(parsing: bytes)) == nil ? "Invalid JSON payload received." : nil
        }
        if let problem { throw FCMError.invalidArgument(problem) }
    }

    /// JSON's insignificant whitespace.
    private static let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]

    /// As ``decode(_:_:limit:)``, but an empty body is `nil`.
    static func decodeIfSent<Body: Decodable>(_ type: Body.Type, _ request: Request, limit: Int) async throws
        -> Body?
    {
        let buffer = try await bytes(request, limit: limit)
        guard buffer.readableBytes > 0 else { return nil }
        do {
            return try decoder.decode(Body.self, from: Data(buffer.readableBytesView))
        } catch let error as FCMError {
            throw error
        } catch DecodingError.typeMismatch(_, let context) where context.codingPath.isEmpty {
            throw FCMError.invalidArgument("Invalid JSON payload received: the body must be a JSON object.")
        } catch {
            throw FCMError.invalidArgument("Invalid JSON payload received.")
        }
    }
}
