import Synchronization

/// A countdown shared by the benchmark's pool jobs.
final class ManagedAtomicCounter: Sendable {
    private let value: Atomic<Int>
    init(_ value: Int) { self.value = Atomic(value) }
    /// Decrements and returns the new value.
    func decrement() -> Int { self.value.subtract(1, ordering: .acquiringAndReleasing).newValue }
}
