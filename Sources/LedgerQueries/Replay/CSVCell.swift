/// A value written as one cell of a CSV file that a spreadsheet may open.
///
/// OWASP's CSV-injection rule: a cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return is read
/// by spreadsheets as a formula, so it is written with a leading `'` inside double quotes (and its own double
/// quotes doubled). Any other cell that holds a comma, a double quote or a line break is quoted as RFC 4180
/// says; the rest is written as it is. Registration tokens may begin with `-` (`[A-Za-z0-9_:.-]`), and so may
/// topic names.
public enum CSVCell {
    /// Appends `value` to `out` as one cell.
    public static func append(_ value: String, to out: inout [UInt8]) {
        let utf8 = value.utf8
        let formula = utf8.first.map { Self.formulaStarts.contains($0) } ?? false
        let needsQuotes =
            formula
            || utf8.contains { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == 0x0A || $0 == 0x0D }
        guard needsQuotes else {
            out += utf8
            return
        }
        out.append(UInt8(ascii: "\""))
        if formula { out.append(UInt8(ascii: "'")) }
        for byte in utf8 {
            if byte == UInt8(ascii: "\"") { out.append(byte) }
            out.append(byte)
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `value` as one cell.
    public static func encode(_ value: String) -> String {
        var out: [UInt8] = []
        append(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private static let formulaStarts: Set<UInt8> = [
        UInt8(ascii: "="), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "@"), 0x09, 0x0D,
    ]
}
