internal import CLMDB

/// Makes chosen LMDB calls of write transactions fail, for tests of what a failure leaves behind.
///
/// Each write transaction counts its LMDB calls from 1 (gets, puts, deletes, cursor moves, the commit).
/// Before each call the injector is asked whether that call fails; when it says so, the call is not made
/// and returns the chosen code instead — exactly what LMDB does for `MDB_BAD_VALSIZE` (the transaction
/// itself stays usable), which is the hardest case for a caller that must not commit after an error.
///
/// Set it through ``LMDBEnvironment/Options/faultInjector``. Never set in production.
///
/// - Note: Thread-safe: `decide` is called on the writing thread only, and must itself be thread-safe if
///   it keeps state shared with other threads.
public final class LMDBFaultInjector: Sendable {
    /// Decides, for write transaction number `transaction` (from 1, counted per environment) and its LMDB
    /// call number `call` (from 1), the code that call fails with, or `nil` to let it run.
    public typealias Decide = @Sendable (_ transaction: Int, _ call: Int) -> LMDBError.Code?

    let decide: Decide

    public init(_ decide: @escaping Decide) { self.decide = decide }
}

/// The health of one transaction, shared with its cursors: the first failed LMDB call (after which the
/// transaction must never commit) and the call counter the fault injector sees.
///
/// The model is GRDB's `checkForAbortedTransaction`: once any call failed, commit refuses, whatever the
/// caller did with the error.
final class TransactionHealth {
    private(set) var failure: LMDBError?
    private var calls = 0
    private let transactionNumber: Int
    private let injector: LMDBFaultInjector?

    init(transactionNumber: Int, injector: LMDBFaultInjector?) {
        self.transactionNumber = transactionNumber
        self.injector = injector
    }

    /// Makes one LMDB call, unless the fault injector fails it.
    @inline(__always)
    func perform(_ call: () -> Int32) -> Int32 {
        guard let injector else { return call() }
        calls += 1
        if let code = injector.decide(transactionNumber, calls) { return code.rawValue }
        return call()
    }

    /// Throws an `LMDBError` unless `result` is `MDB_SUCCESS`, remembering the first failure.
    @inline(__always)
    func check(_ result: Int32, _ function: @autoclosure () -> String) throws(LMDBError) {
        if result != MDB_SUCCESS {
            let error = LMDBError(code: LMDBError.Code(rawValue: result), function: function())
            if failure == nil { failure = error }
            throw error
        }
    }
}
