/// The rule for a worker's name (`workerId` in claims): 1…200 printable ASCII characters without
/// spaces. The server checks claims with it; `taskserver worker` checks `--worker-id` with it.
public enum WorkerID {
    /// The most bytes of a worker id.
    public static let maxLength = 200

    /// What a worker id must be, as a problem's message.
    public static let requirement = "must be 1 to 200 printable ASCII characters without spaces"

    /// Whether `id` is 1…200 characters of `!`…`~`.
    public static func isValid(_ id: some StringProtocol) -> Bool {
        (1...Self.maxLength).contains(id.utf8.count) && id.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }
}
