import TaskGraph

/// The rule for the name of an action run by external workers: `^[A-Za-z0-9_.:-]{1,100}$`.
///
/// Job validation (`JobDecoder`, in TaskGraph, which cannot depend on this module) owns the one
/// implementation; claims (`actions`) and `taskserver worker --action` check names through here.
public enum WorkerActionName {
    /// What an action name must be, as a problem's message.
    public static let requirement = "must be 1 to 100 characters of A-Z a-z 0-9 _ . : -"

    /// Whether `name` matches `^[A-Za-z0-9_.:-]{1,100}$`.
    public static func isValid(_ name: some StringProtocol) -> Bool {
        JobDecoder.isWorkerActionName(name)
    }
}
