import Synchronization

// MARK: - Combinators: whenAll, whenAllSettled, whenAny, whenFirst

extension Future {
    /// A future of every value, in input order, once all `futures` have completed (Bolts' `whenAll`).
    ///
    /// It waits for every input. If any failed it fails — with that error when only one failed,
    /// otherwise with an `AggregateError` of all of them in input order; errors win over
    /// cancellation. Otherwise, if any was cancelled, it is cancelled. An empty input succeeds with `[]`.
    public static func whenAll(_ futures: [Future<Value>]) -> Future<[Value]> {
        let gather = Gather<Value, [Value]>(count: futures.count, finish: Self.allOutcome)
        Self.observe(futures, gather)
        return gather.promise.future
    }

    /// `whenAll` over `count` futures created lazily by `make(index)`, at most `maxConcurrency` of
    /// them pending at once: the next one is created when an earlier one completes.
    public static func whenAll(
        count: Int,
        maxConcurrency: Int,
        _ make: @escaping @Sendable (Int) -> Future<Value>
    ) -> Future<[Value]> {
        let gather = Gather<Value, [Value]>(count: count, finish: Self.allOutcome)
        Self.drive(count: count, maxConcurrency: maxConcurrency, make: make, gather)
        return gather.promise.future
    }

    /// A future of every input's outcome, in input order, once all have completed; it always succeeds.
    public static func whenAllSettled(_ futures: [Future<Value>]) -> Future<[Outcome<Value>]> {
        let gather = Gather<Value, [Outcome<Value>]>(count: futures.count) { .success($0) }
        Self.observe(futures, gather)
        return gather.promise.future
    }

    /// `whenAllSettled` over lazily created futures, at most `maxConcurrency` pending at once.
    public static func whenAllSettled(
        count: Int,
        maxConcurrency: Int,
        _ make: @escaping @Sendable (Int) -> Future<Value>
    ) -> Future<[Outcome<Value>]> {
        let gather = Gather<Value, [Outcome<Value>]>(count: count) { .success($0) }
        Self.drive(count: count, maxConcurrency: maxConcurrency, make: make, gather)
        return gather.promise.future
    }

    /// A future of the first input to **succeed**, with its index (Bolts'
    /// `taskForCompletionOfAnyTask`, keeping only successes).
    ///
    /// It fails with an `AggregateError` of every error (in input order) only when every input failed
    /// or was cancelled; an empty input fails at once with an empty `AggregateError`. The other
    /// inputs are not cancelled here: the caller owns their tokens.
    public static func whenAny(_ futures: [Future<Value>]) -> Future<(index: Int, value: Value)> {
        let gather = Gather<Value, (index: Int, value: Value)>(count: futures.count, decide: Self.firstSuccess) {
            .failure(Self.aggregate($0))
        }
        Self.observe(futures, gather)
        return gather.promise.future
    }

    /// `whenAny` over lazily created futures, at most `maxConcurrency` pending at once; no further
    /// future is created once one has succeeded.
    public static func whenAny(
        count: Int,
        maxConcurrency: Int,
        _ make: @escaping @Sendable (Int) -> Future<Value>
    ) -> Future<(index: Int, value: Value)> {
        let gather = Gather<Value, (index: Int, value: Value)>(count: count, decide: Self.firstSuccess) {
            .failure(Self.aggregate($0))
        }
        Self.drive(count: count, maxConcurrency: maxConcurrency, make: make, gather)
        return gather.promise.future
    }

    /// A future of the first input to complete in any state, with its index and outcome; it succeeds
    /// as soon as one input completes. An empty input gives a cancelled future.
    public static func whenFirst(_ futures: [Future<Value>]) -> Future<(index: Int, outcome: Outcome<Value>)> {
        let gather = Gather<Value, (index: Int, outcome: Outcome<Value>)>(
            count: futures.count,
            decide: { index, outcome in .success((index, outcome)) },
            finish: { _ in .cancelled }
        )
        Self.observe(futures, gather)
        return gather.promise.future
    }

    // MARK: Outcome rules

    private static func allOutcome(_ outcomes: [Outcome<Value>]) -> Outcome<[Value]> {
        var values: [Value] = []
        values.reserveCapacity(outcomes.count)
        var errors: [(index: Int, error: any Error)] = []
        var cancelled = 0
        for (index, outcome) in outcomes.enumerated() {
            switch outcome {
            case .success(let value): values.append(value)
            case .failure(let error): errors.append((index, error))
            case .cancelled: cancelled += 1
            }
        }
        if errors.count == 1 { return .failure(errors[0].error) }
        if errors.count > 1 { return .failure(AggregateError(errors: errors, cancelledCount: cancelled)) }
        if cancelled > 0 { return .cancelled }
        return .success(values)
    }

    private static func firstSuccess(_ index: Int, _ outcome: Outcome<Value>) -> Outcome<(index: Int, value: Value)>? {
        if case .success(let value) = outcome { return .success((index, value)) }
        return nil
    }

    private static func aggregate(_ outcomes: [Outcome<Value>]) -> AggregateError {
        var errors: [(index: Int, error: any Error)] = []
        var cancelled = 0
        for (index, outcome) in outcomes.enumerated() {
            if case .failure(let error) = outcome { errors.append((index, error)) }
            if case .cancelled = outcome { cancelled += 1 }
        }
        return AggregateError(errors: errors, cancelledCount: cancelled)
    }

    // MARK: Drivers

    private static func observe<Result>(_ futures: [Future<Value>], _ gather: Gather<Value, Result>) {
        if futures.isEmpty { gather.finishEmpty() }
        for (index, future) in futures.enumerated() {
            future.whenComplete { outcome in _ = gather.record(index, outcome) }
        }
    }

    /// Creates futures `0..<count` lazily, at most `maxConcurrency` pending, until the gather decides.
    ///
    /// One thread at a time is the launcher; completions that arrive while it launches only return a
    /// credit, so futures that complete inline do not recurse.
    private static func drive<Result>(
        count: Int,
        maxConcurrency: Int,
        make: @escaping @Sendable (Int) -> Future<Value>,
        _ gather: Gather<Value, Result>
    ) {
        if count == 0 {
            gather.finishEmpty()
            return
        }
        let limit = Swift.max(1, maxConcurrency)
        let launcher = Launcher(count: count, limit: limit)
        @Sendable func launch() {
            while let index = launcher.nextIndex() {
                make(index).whenComplete { outcome in
                    let stop = gather.record(index, outcome)
                    if launcher.finished(stop: stop) { launch() }
                }
            }
        }
        launch()
    }
}

/// Launch bookkeeping of a bounded lazy combinator.
private final class Launcher: Sendable {
    private struct State {
        var next = 0
        var running = 0
        var stopped = false
        var isLaunching = true
    }

    private let state = Mutex(State())
    private let count: Int
    private let limit: Int

    init(count: Int, limit: Int) {
        self.count = count
        self.limit = limit
    }

    /// The next index to start, or `nil` (and the caller stops being the launcher).
    func nextIndex() -> Int? {
        self.state.withLock { state in
            if state.stopped || state.next >= self.count || state.running >= self.limit {
                state.isLaunching = false
                return nil
            }
            state.running += 1
            defer { state.next += 1 }
            return state.next
        }
    }

    /// Records a completion; returns `true` when the caller must become the launcher.
    func finished(stop: Bool) -> Bool {
        self.state.withLock { state in
            state.running -= 1
            if stop { state.stopped = true }
            if state.isLaunching || state.stopped || state.next >= self.count { return false }
            state.isLaunching = true
            return true
        }
    }
}

/// Collects the outcomes of `count` futures and completes `promise` once: early, when `decide`
/// returns an outcome for one input, or with `finish` of all outcomes when every input completed.
final class Gather<Value: Sendable, Result: Sendable>: Sendable {
    private struct State {
        var outcomes: [Outcome<Value>?]
        var remaining: Int
        var isDecided = false
    }

    let promise = Promise<Result>()
    private let state: Mutex<State>
    private let decide: @Sendable (Int, Outcome<Value>) -> Outcome<Result>?
    private let finish: @Sendable ([Outcome<Value>]) -> Outcome<Result>

    init(
        count: Int,
        decide: @escaping @Sendable (Int, Outcome<Value>) -> Outcome<Result>? = { _, _ in nil },
        finish: @escaping @Sendable ([Outcome<Value>]) -> Outcome<Result>
    ) {
        self.state = Mutex(State(outcomes: Array(repeating: nil, count: count), remaining: count))
        self.decide = decide
        self.finish = finish
    }

    func finishEmpty() {
        self.promise.tryComplete(with: self.finish([]))
    }

    /// Records the outcome of input `index`; returns `true` once the result is decided (no more
    /// inputs need to be started).
    func record(_ index: Int, _ outcome: Outcome<Value>) -> Bool {
        if let early = self.decide(index, outcome) {
            let first = self.state.withLock { state in
                defer { state.isDecided = true }
                return !state.isDecided
            }
            if first { self.promise.tryComplete(with: early) }
            return true
        }
        let (all, isDecided): ([Outcome<Value>]?, Bool) = self.state.withLock { state in
            state.outcomes[index] = outcome
            state.remaining -= 1
            guard state.remaining == 0, !state.isDecided else { return (nil, state.isDecided) }
            state.isDecided = true
            return (state.outcomes.map { $0! }, true)
        }
        if let all { self.promise.tryComplete(with: self.finish(all)) }
        return isDecided
    }
}
