import FCMWire
import Foundation
import HTTPTypes
import Hummingbird
import LedgerCore

extension Parameters {
    /// A path parameter, percent-decoded (the Admin SDKs percent-encode tokens and topic names).
    func decoded(_ name: String) throws -> String {
        let raw = try require(name)
        guard let decoded = PercentDecoding.decode(raw) else {
            throw FCMError.invalidArgument("invalid percent-encoding in the path", field: name)
        }
        return decoded
    }

    /// A message id from a path (`text`, the parameter or a part of it): a decimal number from 1 to 2^63-1,
    /// or 400 naming `message`.
    static func messageID(_ text: some StringProtocol) throws -> UInt64 {
        guard text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let id = UInt64(text),
            id >= 1, id <= UInt64(Int64.max)
        else {
            throw FCMError.invalidArgument("a message id is a decimal number from 1 to \(Int64.max)", field: "message")
        }
        return id
    }

    /// The project of the path, validated.
    func project() throws -> ProjectID {
        do {
            return try ProjectID(try decoded("project"), field: "project")
        } catch let error as LedgerCoreError {
            throw FCMError.notFound("Project not found: \(error.message)")
        }
    }
}
