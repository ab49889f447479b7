/// How a future ended: with a value, with an error, or cancelled.
///
/// Cancelled is a third outcome, not an error, as in Bolts (`BFTask.cancelled`): code that handles
/// failures does not have to recognise cancellation as a special error.
public enum Outcome<Value: Sendable>: Sendable {
    case success(Value)
    case failure(any Error)
    case cancelled

    /// The value, when the outcome is a success.
    public var value: Value? {
        if case .success(let value) = self { return value }
        return nil
    }

    /// The error, when the outcome is a failure.
    public var error: (any Error)? {
        if case .failure(let error) = self { return error }
        return nil
    }

    /// `true` when the outcome is `.cancelled`.
    public var isCancelled: Bool {
        if case .cancelled = self { return true }
        return false
    }

    /// The value, or the error (`CancellationError` for `.cancelled`) thrown.
    public func get() throws -> Value {
        switch self {
        case .success(let value): return value
        case .failure(let error): throw error
        case .cancelled: throw CancellationError()
        }
    }

    /// The same outcome with its value transformed; failures and cancellation pass through.
    public func map<New: Sendable>(_ transform: (Value) throws -> New) -> Outcome<New> {
        switch self {
        case .success(let value):
            do { return .success(try transform(value)) } catch is CancellationError { return .cancelled } catch {
                return .failure(error)
            }
        case .failure(let error): return .failure(error)
        case .cancelled: return .cancelled
        }
    }

    /// Runs `body` and captures how it ended; a thrown `CancellationError` becomes `.cancelled`.
    public init(catching body: () throws -> Value) {
        do { self = .success(try body()) } catch is CancellationError { self = .cancelled } catch {
            self = .failure(error)
        }
    }
}
