import LMDBKit
import LedgerStore
import Testing

/// Makes the ledger of `directory` (project `demo-project`) what an older build left: `prepare` undoes what
/// came after layout `version`, then the ledger claims that layout. A reader must then refuse it, naming the
/// layout (checked here); the caller opens it with a writer to see it upgraded in place.
public func makeOlderLayout(
    _ version: UInt32, in directory: TemporaryDirectory, sourceLocation: SourceLocation = #_sourceLocation,
    prepare: (LMDBTransaction) throws -> Void = { _ in }
) throws {
    do {
        let environment = try LMDBEnvironment(path: directory.path + "/demo-project")
        try environment.write { txn throws in
            try prepare(txn)
            try txn.put(try txn.openDatabase("meta"), key: "layoutVersion", value: version)
        }
    }
    #expect(sourceLocation: sourceLocation) {
        try openTestLedger(directory, mode: .readOnly)
    } throws: { error in
        "\(error)".contains("store layout \(version)")
    }
}
