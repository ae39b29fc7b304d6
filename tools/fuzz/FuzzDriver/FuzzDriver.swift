// What every fuzz target of tools/fuzz shares: libFuzzer's driver, for programs that keep their own main.

#if canImport(Glibc)
    import Glibc
#endif

/// libFuzzer's per-input callback: `(data, size) -> 0`.
public typealias FuzzCallback = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt

// libFuzzer's entry point for a program with its own main (linked from clang_rt.fuzzer).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: FuzzCallback
) -> CInt

/// Runs libFuzzer with the process's arguments and `callback`, and exits with its status.
public func runFuzzer(_ callback: FuzzCallback) -> Never {
    var argc = CommandLine.argc
    var argv = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv, callback))
}
