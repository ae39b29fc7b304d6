import LedgerCore

/// The recipients of one send taken so far, in instance order, and which of them have an outcome: the
/// pushes finish out of order, the progress the ledger records is the first recipient without an outcome.
///
/// A recipient is taken when its push starts, or — one without an APNs token at the send — done at once.
struct PushWindow {
    private var taken: [(instance: InstanceID, token: RegistrationToken)] = []
    private var done: Set<InstanceID> = []
    /// Index of the first entry of `taken` still in the window (entries before it are passed).
    private var start = 0
    /// The last recipient whose push and those of every recipient before it have an outcome.
    private(set) var through: (instance: InstanceID, token: RegistrationToken)?
    /// How many recipients ``through`` has passed so far.
    private(set) var passed = 0

    /// Takes `instance`, which must follow every instance taken before.
    mutating func take(_ instance: InstanceID, token: RegistrationToken, done isDone: Bool = false) {
        precondition(taken.last.map { $0.instance < instance } ?? true, "recipients are taken in instance order")
        taken.append((instance, token))
        if isDone { finish(instance) }
    }

    /// Marks `instance` as having an outcome and moves ``through`` past every recipient that now has one.
    mutating func finish(_ instance: InstanceID) {
        done.insert(instance)
        while start < taken.count, done.remove(taken[start].instance) != nil {
            through = taken[start]
            start += 1
            passed += 1
        }
        // Drop what the window has passed now and then, not on every step.
        if start > 4096 && start * 2 > taken.count {
            taken.removeFirst(start)
            start = 0
        }
    }

    /// Recipients taken and not passed yet (in flight, or waiting for one before them).
    var open: Int { taken.count - start }
}
