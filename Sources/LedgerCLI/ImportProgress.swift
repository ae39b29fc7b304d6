import Foundation

/// The progress bar of `ledger import` on standard error: a bar and percentage when the file's size is
/// known, the operations read and the rate, redrawn at most ten times a second. Draws nothing unless
/// `enabled` (standard error is a terminal), so logs and pipes get only the final report.
final class ImportProgress {
    private let enabled: Bool
    private let totalBytes: Int?
    private let clock = ContinuousClock()
    private var phaseStart: ContinuousClock.Instant
    private var lastDraw: ContinuousClock.Instant
    private var phase = ""

    init(enabled: Bool, totalBytes: Int?) {
        self.enabled = enabled
        self.totalBytes = totalBytes
        phaseStart = clock.now
        lastDraw = phaseStart
    }

    /// Redraws the bar if a tenth of a second has passed since the last time.
    func update(_ phase: String, bytes: Int, operations: Int) {
        guard enabled else { return }
        if phase != self.phase {
            self.phase = phase
            phaseStart = clock.now
        }
        let now = clock.now
        guard now - lastDraw >= .milliseconds(100) else { return }
        lastDraw = now
        draw(phase, bytes: bytes, operations: operations, end: "")
    }

    /// Draws the phase's final state and ends its line.
    func finish(_ phase: String, bytes: Int, operations: Int) {
        guard enabled else { return }
        draw(phase, bytes: bytes, operations: operations, end: "\n")
        self.phase = ""
        phaseStart = clock.now
    }

    private func draw(_ phase: String, bytes: Int, operations: Int, end: String) {
        let elapsed = clock.now - phaseStart
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        var line = "\r\u{1B}[K" + phase.padding(toLength: 10, withPad: " ", startingAt: 0)
        line += Self.bar(bytes: bytes, of: totalBytes)
        line += " \(operations) operations"
        // A rate over the first instants of a phase says nothing (the operations were counted before it).
        if seconds >= 0.5 { line += ", \(Int(Double(operations) / seconds))/s" }
        line += end
        FileHandle.standardError.write(Data(line.utf8))
    }

    /// `[#####---------------]  25%`, or nothing when the total is unknown (standard input).
    static func bar(bytes: Int, of total: Int?, width: Int = 30) -> String {
        guard let total, total > 0 else { return "" }
        let fraction = min(max(Double(bytes) / Double(total), 0), 1)
        let filled = Int(fraction * Double(width))
        let percent = Int(fraction * 100)
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] "
            + String(repeating: " ", count: percent < 10 ? 2 : percent < 100 ? 1 : 0) + "\(percent)%"
    }
}
