/// Several errors reported as one, in the order of the futures they came from.
///
/// `whenAll` fails with an `AggregateError` when more than one of its futures failed, and `whenAny`
/// when none succeeded. Each entry keeps the index of the future that produced it.
public struct AggregateError: Error, Sendable, CustomStringConvertible {
    /// The errors with the index of the input future each came from, in input order.
    public let errors: [(index: Int, error: any Error)]
    /// How many of the inputs were cancelled (cancellations carry no error).
    public let cancelledCount: Int

    public init(errors: [(index: Int, error: any Error)], cancelledCount: Int = 0) {
        self.errors = errors
        self.cancelledCount = cancelledCount
    }

    public var description: String {
        let list = self.errors.map { "[\($0.index)] \($0.error)" }.joined(separator: "; ")
        return "AggregateError(\(self.errors.count) errors, \(self.cancelledCount) cancelled: \(list))"
    }
}

/// The error of a future that did not complete within its time limit (`Future.timeout(_:)`).
public struct TimeoutError: Error, Sendable, Equatable, CustomStringConvertible {
    public let duration: Duration
    public init(duration: Duration) { self.duration = duration }
    public var description: String { "timed out after \(self.duration)" }
}
