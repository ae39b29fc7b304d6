import Foundation

/// Searches every regular file under a directory for an identifier in any form an erasure must leave none
/// of: its bytes, their hex (either case) and their base64 (standard and URL-safe, padded or not).
public enum IdentifierSearch {
    /// The forms of `identifier` searched for.
    public static func forms(of identifier: [UInt8]) -> [[UInt8]] {
        let hex = identifier.map { String(format: "%02x", $0) }.joined()
        let base64 = Data(identifier).base64EncodedString()
        let unpadded = base64.trimmingCharacters(in: CharacterSet(charactersIn: "="))
        let urlSafe = unpadded.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        return Set([
            identifier, Array(hex.utf8), Array(hex.uppercased().utf8), Array(unpadded.utf8), Array(urlSafe.utf8),
        ])
        .sorted { $0.count < $1.count }
    }

    /// The files under `directory` (recursively, hidden ones too) holding any form of `identifier`, each as
    /// `path: form`.
    public static func files(under directory: String, holding identifier: [UInt8]) -> [String] {
        let forms = forms(of: identifier)
        var found: [String] = []
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let relative = enumerator?.nextObject() as? String {
            let path = directory + "/" + relative
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
                let data = FileManager.default.contents(atPath: path)
            else { continue }
            for form in forms where data.range(of: Data(form)) != nil {
                found.append("\(relative): \(String(decoding: form, as: UTF8.self).prefix(40))")
            }
        }
        return found
    }
}
