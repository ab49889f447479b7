import Dispatch
import TestSupport
import Testing

@testable import TaskCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The six members of the `continueWith` family, so one table can test them all.
enum ContinuationKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case continueWith
    case continueWithTask
    case continueOnSuccessWith
    case continueOnSuccessWithTask
    case continueOnErrorWith
    case continueOnErrorWithTask

    var testDescription: String { self.rawValue }

    /// Attaches this continuation to `future`; its body counts its runs in `ran` and returns 100.
    func attach(
        to future: Future<Int>,
        on executor: some Executor,
        token: CancellationToken?,
        ran: Counter
    ) -> Future<Int> {
        switch self {
        case .continueWith:
            return future.continueWith(on: executor, cancellationToken: token) { _ in
                ran.increment()
                return 100
            }
        case .continueWithTask:
            return future.continueWithTask(on: executor, cancellationToken: token) { _ in
                ran.increment()
                return Future(value: 100)
            }
        case .continueOnSuccessWith:
            return future.continueOnSuccessWith(on: executor, cancellationToken: token) { _ in
                ran.increment()
                return 100
            }
        case .continueOnSuccessWithTask:
            return future.continueOnSuccessWithTask(on: executor, cancellationToken: token) { _ in
                ran.increment()
                return Future(value: 100)
            }
        case .continueOnErrorWith:
            return future.continueOnErrorWith(on: executor, cancellationToken: token) { _ in
                ran.increment()
                return 100
            }
        case .continueOnErrorWithTask:
            return future.continueOnErrorWithTask(on: executor, cancellationToken: token) { _ in
                ran.increment()
                return Future(value: 100)
            }
        }
    }

    /// Whether the body runs for an antecedent that ended with `outcome`.
    func runs(for outcome: Outcome<Int>) -> Bool {
        switch (self, outcome) {
        case (.continueWith, _), (.continueWithTask, _): return true
        case (.continueOnSuccessWith, .success), (.continueOnSuccessWithTask, .success): return true
        case (.continueOnErrorWith, .failure), (.continueOnErrorWithTask, .failure): return true
        default: return false
        }
    }
}

/// The antecedent outcomes the continuation tables run over.
enum AntecedentOutcome: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case success, failure, cancelled
    var testDescription: String { self.rawValue }
    var outcome: Outcome<Int> {
        switch self {
        case .success: return .success(7)
        case .failure: return .failure(TestError.code(7))
        case .cancelled: return .cancelled
        }
    }
}

struct ContinuationTests {
    // MARK: - The whole family, on every executor, on completed and pending futures

    @Test(
        .timeLimit(.minutes(1 * TestTiming.slowdown)),
        arguments: ContinuationKind.allCases,
        ExecutorKind.allCases
    )
    func continuationRunsOrPassesThroughByOutcome(kind: ContinuationKind, executorKind: ExecutorKind) async {
        for antecedent in AntecedentOutcome.allCases {
            for completedFirst in [true, false] {
                let ran = Counter()
                let promise = Promise<Int>()
                if completedFirst { promise.complete(with: antecedent.outcome) }
                let next = kind.attach(to: promise.future, on: executorKind.make(), token: nil, ran: ran)
                if !completedFirst {
                    #expect(!next.isCompleted)
                    promise.complete(with: antecedent.outcome)
                }
                let outcome = await next.settled()
                let expected: Outcome<Int> = kind.runs(for: antecedent.outcome) ? .success(100) : antecedent.outcome
                #expect(outcome.isSame(as: expected), "\(antecedent) completedFirst=\(completedFirst): \(outcome)")
                #expect(ran.value == (kind.runs(for: antecedent.outcome) ? 1 : 0))
            }
        }
    }

    // MARK: - Tokens checked again after a future-returning body (Bolts parity)

    /// The cancellation is remembered even when nothing keeps the source or its token once it was
    /// requested: by the body itself, or by a caller that cancels and drops its source while the
    /// body's future runs (issue #27, 10).
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func aCancellationIsKeptWhenItsSourceIsReleased(executorKind: ExecutorKind) async {
        // The body cancels, and returns a future that completes later.
        let inner = Promise<Int>()
        let byBody: Future<Int> = {
            let source = CancellationTokenSource()
            return Future(value: 1).continueWithTask(on: executorKind.make(), cancellationToken: source.token) { _ in
                source.cancel()
                return inner.future
            }
        }()
        // A caller cancels while the body's future runs, then lets its source go.
        let running = Promise<Int>()
        let started = Promise<Void>()
        var source: CancellationTokenSource? = CancellationTokenSource()
        let byCaller = Future(value: 1).continueWithTask(on: executorKind.make(), cancellationToken: source!.token) {
            _ in
            started.succeed(())
            return running.future
        }
        _ = await started.future.settled()
        source!.cancel()
        source = nil
        // Give an executor's thread the time to drop what it held of the body.
        try? await Task.sleep(for: .milliseconds(20))
        inner.succeed(5)
        running.succeed(5)
        #expect(await byBody.settled().isSame(as: .cancelled))
        #expect(await byCaller.settled().isSame(as: .cancelled))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func aTaskBodyThatCancelsItsTokenEndsCancelled(executorKind: ExecutorKind) async {
        // BFTask's continueWithExecutor:block:cancellationToken: checks the token again when the
        // body's task completes; so does TaskCore, for each future-returning form.
        for antecedent in [Outcome<Int>.success(1), .failure(TestError.boom)] {
            let bodies: [(Future<Int>, CancellationTokenSource) -> Future<Int>] = [
                { future, source in
                    future.continueWithTask(on: executorKind.make(), cancellationToken: source.token) { _ in
                        source.cancel()
                        return Future(value: 100)
                    }
                },
                { future, source in
                    future.continueOnSuccessWithTask(on: executorKind.make(), cancellationToken: source.token) { _ in
                        source.cancel()
                        return Future(value: 100)
                    }
                },
                { future, source in
                    future.continueOnErrorWithTask(on: executorKind.make(), cancellationToken: source.token) { _ in
                        source.cancel()
                        return Future(value: 100)
                    }
                },
            ]
            for (index, attach) in bodies.enumerated() {
                let source = CancellationTokenSource()
                let next = attach(Future(outcome: antecedent), source)
                let outcome = await next.settled()
                // A body that does not run (success into an error handler, failure into a success
                // handler) passes the antecedent through, as before.
                let succeeded = if case .success = antecedent { true } else { false }
                let runs = index == 0 || (index == 1) == succeeded
                if runs {
                    #expect(outcome.isSame(as: .cancelled), "body \(index) after \(antecedent): \(outcome)")
                } else {
                    #expect(outcome.isSame(as: antecedent), "body \(index) after \(antecedent): \(outcome)")
                }
            }
        }
    }

    /// The body hands its token to work whose own cancel handler completes the work's future at
    /// once (`delay(_:token:)`, its handler registered before the continuation's): the
    /// continuation still ends cancelled — and so it does when the work's handler comes after the
    /// continuation's (#43: with the first order it ended with the work's outcome).
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func workCancelledByTheTokenItWasGivenEndsTheContinuationCancelled(executorKind: ExecutorKind) async {
        for workHandlerFirst in [true, false] {
            let source = CancellationTokenSource()
            let started = Promise<Void>()
            let later = Promise<Int>()
            let next = Future(value: 1).continueWithTask(on: executorKind.make(), cancellationToken: source.token) {
                _ in
                defer { started.succeed(()) }
                return workHandlerFirst ? Future.delay(.seconds(3600), token: source.token).map { 7 } : later.future
            }
            _ = await started.future.settled()
            // The continuation registers its handler as its body returns, on the executor's thread.
            try? await Task.sleep(for: .milliseconds(20))
            // Registered after the continuation's handler: fails the work when the token is cancelled.
            if !workHandlerFirst { _ = source.token.register { later.tryFail(TestError.boom) } }
            source.cancel()
            #expect(await next.settled().isSame(as: .cancelled), "the work's handler first: \(workHandlerFirst)")
        }
    }

    /// A body's future that nobody completes and everybody drops (its promise gone) takes the
    /// continuation's handler on a long-lived token with it (#43: 100,000 continuations left
    /// 100,000 handlers behind).
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func droppedFuturesOfBodiesLeaveNoHandlersOnALongLivedToken() {
        let source = CancellationTokenSource()
        for _ in 0..<100_000 {
            _ = Future(value: 1).continueWithTask(on: .immediate, cancellationToken: source.token) { _ in
                Promise<Int>().future
            }
        }
        #expect(source.token.registeredHandlerCount == 0)
        // A future still pending and kept keeps its handler: a cancel still reaches it.
        let kept = Promise<Int>()
        let next = Future(value: 1).continueWithTask(on: .immediate, cancellationToken: source.token) { _ in
            kept.future
        }
        #expect(source.token.registeredHandlerCount == 1)
        source.cancel()
        kept.succeed(1)
        #expect(next.isCancelled)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func aTokenCancelledWhileTheBodysFutureRunsEndsCancelled() async {
        let source = CancellationTokenSource()
        let inner = Promise<Int>()
        let next = Future(value: 1).continueWithTask(on: .immediate, cancellationToken: source.token) { _ in
            inner.future
        }
        #expect(!next.isCompleted)
        source.cancel()
        #expect(!next.isCompleted)
        inner.succeed(5)
        #expect(await next.settled().isSame(as: .cancelled))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func aTaskBodyWithAnUncancelledTokenEndsWithItsFuture() async {
        let source = CancellationTokenSource()
        let next = Future(value: 1).continueWithTask(on: .immediate, cancellationToken: source.token) { _ in
            Future(value: 7)
        }
        #expect(await next.settled().isSame(as: .success(7)))
    }

    // MARK: - continueWith

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func continueWithReceivesTheCompletedAntecedent(executorKind: ExecutorKind) async throws {
        let promise = Promise<Int>()
        let described = promise.future.continueWith(on: executorKind.make()) { future -> String in
            #expect(future === promise.future)
            #expect(future.isCompleted)
            if future.isCancelled { return "cancelled" }
            if let error = future.error { return "error \(error)" }
            return "value \(future.result!)"
        }
        promise.succeed(5)
        #expect(try await described.value == "value 5")
        let describedError = Future<Int>(error: TestError.boom).continueWith(on: executorKind.make()) { "\($0.error!)" }
        #expect(try await describedError.value == "boom")
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func aThrowingBodyFailsTheNewFuture(executorKind: ExecutorKind) async {
        let executor = executorKind.make()
        let source = Future(value: 1)
        let futures: [Future<Int>] = [
            source.continueWith(on: executor) { _ in throw TestError.code(1) },
            source.continueWithTask(on: executor) { _ in throw TestError.code(1) },
            source.continueOnSuccessWith(on: executor) { _ in throw TestError.code(1) },
            source.continueOnSuccessWithTask(on: executor) { _ in throw TestError.code(1) },
            Future<Int>(error: TestError.boom).continueOnErrorWith(on: executor) { _ in throw TestError.code(1) },
            Future<Int>(error: TestError.boom).continueOnErrorWithTask(on: executor) { _ in throw TestError.code(1) },
        ]
        for future in futures {
            let outcome = await future.settled()
            #expect((outcome.error as? TestError) == .code(1))
        }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func aBodyThrowingCancellationErrorCancelsTheNewFuture(executorKind: ExecutorKind) async {
        let executor = executorKind.make()
        let promise = Promise<Int>()
        let futures: [Future<Int>] = [
            promise.future.continueWith(on: executor) { _ in throw CancellationError() },
            promise.future.continueWithTask(on: executor) { _ in throw CancellationError() },
            promise.future.continueOnSuccessWith(on: executor) { _ in throw CancellationError() },
            promise.future.continueOnSuccessWithTask(on: executor) { _ in throw CancellationError() },
            Future<Int>(error: TestError.boom).continueOnErrorWith(on: executor) { _ in throw CancellationError() },
            Future<Int>(error: TestError.boom).continueOnErrorWithTask(on: executor) { _ in throw CancellationError() },
        ]
        promise.succeed(1)
        for future in futures {
            #expect(await future.settled().isCancelled)
        }
    }

    // MARK: - Task-returning continuations are flattened

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases, AntecedentOutcome.allCases)
    func continueWithTaskCompletesWithTheInnerFuture(executorKind: ExecutorKind, inner: AntecedentOutcome) async {
        let innerPromise = Promise<Int>()
        let started = Promise<Void>()
        let flattened = Future(value: "go").continueWithTask(on: executorKind.make()) { _ in
            started.succeed(())
            return innerPromise.future
        }
        _ = await started.future.settled()
        #expect(!flattened.isCompleted)
        innerPromise.complete(with: inner.outcome)
        #expect(await flattened.settled().isSame(as: inner.outcome))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func continueOnSuccessWithTaskChainsDependentWork(executorKind: ExecutorKind) async throws {
        let executor = executorKind.make()
        let result = Future(value: 2)
            .continueOnSuccessWithTask(on: executor) { value in Future(value: value * 10) }
            .continueOnSuccessWithTask(on: executor) { value in
                TestPools.shared.submit { "\(value + 1)" }
            }
        #expect(try await result.value == "21")
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func continueOnErrorWithTaskRecoversWithAnotherFuture() async throws {
        let fallback = Promise<String>()
        let recovered = Future<String>(error: TestError.boom).continueOnErrorWithTask { error in
            #expect((error as? TestError) == .boom)
            return fallback.future
        }
        #expect(!recovered.isCompleted)
        fallback.succeed("fallback")
        #expect(try await recovered.value == "fallback")
    }

    // MARK: - Error continuations

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ExecutorKind.allCases)
    func continueOnErrorWithRecoversTheError(executorKind: ExecutorKind) async throws {
        let promise = Promise<Int>()
        let seen = Locked<TestError?>(nil)
        let recovered = promise.future.continueOnErrorWith(on: executorKind.make()) { error in
            seen.withLock { $0 = error as? TestError }
            return -1
        }
        promise.fail(TestError.code(3))
        #expect(try await recovered.value == -1)
        #expect(seen.value == .code(3))
    }

    @Test func continueOnErrorWithOnASucceededOrCancelledFutureReturnsItAsIs() {
        let succeeded = Future(value: 1)
        let cancelled = Future<Int>.cancelled()
        let ran = Counter()
        // On the immediate executor the pass-through is the antecedent itself: no new future.
        #expect(succeeded.continueOnErrorWith(on: .immediate) { _ in ran.increment() } === succeeded)
        #expect(cancelled.continueOnErrorWith(on: .immediate) { _ in ran.increment() } === cancelled)
        #expect(succeeded.continueOnErrorWithTask(on: .immediate) { _ in Future(value: ran.increment()) } === succeeded)
        #expect(ran.value == 0)
    }

    @Test func errorHandlerThatRethrowsKeepsTheChainFailed() {
        let result = Future<Int>(error: TestError.code(1))
            .continueOnErrorWith(on: .immediate) { error in throw TestError.code(2) }
            .continueOnSuccessWith(on: .immediate) { $0 + 1 }
        #expect(result.testError == .code(2))
    }

    // MARK: - map, flatMap, asVoid

    @Test func mapTransformsValuesAndPassesFailuresThrough() {
        #expect(Future(value: 3).map { $0 * 2 }.result == 6)
        #expect(Future<Int>(error: TestError.boom).map { $0 * 2 }.testError == .boom)
        #expect(Future<Int>.cancelled().map { $0 * 2 }.isCancelled)
        #expect(Future(value: 3).map { _ -> Int in throw TestError.code(4) }.testError == .code(4))
        #expect(Future(value: 3).map { _ -> Int in throw CancellationError() }.isCancelled)
    }

    @Test func mapOnAPendingFutureRunsInlineOnTheCompletingThread() {
        let promise = Promise<Int>()
        let thread = Locked<pthread_t?>(nil)
        let mapped = promise.future.map { value -> Int in
            thread.withLock { $0 = currentThread() }
            return value + 1
        }
        let completer = Promise<pthread_t>()
        runOnThread {
            promise.succeed(1)
            completer.succeed(currentThread())
        }
        let completingThread = blockingOutcome(of: completer.future)?.value
        #expect(mapped.result == 2)
        #expect(completingThread.map { isSameThread($0, thread.value!) } == true)
    }

    @Test func flatMapFlattens() {
        let inner = Promise<String>()
        let flat = Future(value: 1).flatMap { _ in inner.future }
        #expect(!flat.isCompleted)
        inner.succeed("x")
        #expect(flat.result == "x")
        #expect(Future<Int>(error: TestError.boom).flatMap { _ in Future(value: "y") }.testError == .boom)
        #expect(Future(value: 1).flatMap { _ -> Future<String> in throw TestError.code(5) }.testError == .code(5))
    }

    @Test func asVoidKeepsTheOutcomeKind() {
        #expect(Future(value: "a").asVoid().isSucceeded)
        #expect(Future<String>(error: TestError.boom).asVoid().testError == .boom)
        #expect(Future<String>.cancelled().asVoid().isCancelled)
    }

    // MARK: - Cancellation tokens

    /// The token is cancelled while the antecedent is still pending; when the antecedent completes,
    /// the body must not run and the continuation's future is cancelled.
    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ContinuationKind.allCases, ExecutorKind.allCases)
    func tokenCancelledBeforeTheContinuationRunsSkipsTheBody(kind: ContinuationKind, executorKind: ExecutorKind) async {
        for antecedent in AntecedentOutcome.allCases where kind.runs(for: antecedent.outcome) {
            let source = CancellationTokenSource()
            let promise = Promise<Int>()
            let ran = Counter()
            let next = kind.attach(to: promise.future, on: executorKind.make(), token: source.token, ran: ran)
            source.cancel()
            #expect(!next.isCompleted)
            promise.complete(with: antecedent.outcome)
            #expect(await next.settled().isCancelled, "\(antecedent)")
            #expect(ran.value == 0)
        }
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ContinuationKind.allCases, ExecutorKind.allCases)
    func alreadyCancelledTokenOnACompletedFutureSkipsTheBody(kind: ContinuationKind, executorKind: ExecutorKind) async {
        let source = CancellationTokenSource()
        source.cancel()
        let ran = Counter()
        let antecedent = Future<Int>(error: TestError.boom)
        let next = kind.attach(to: antecedent, on: executorKind.make(), token: source.token, ran: ran)
        #expect(await next.settled().isCancelled)
        #expect(ran.value == 0)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: ContinuationKind.allCases)
    func uncancelledTokenLetsTheBodyRun(kind: ContinuationKind) async {
        let source = CancellationTokenSource()
        let ran = Counter()
        let antecedent = AntecedentOutcome.allCases.first { kind.runs(for: $0.outcome) }!
        let next = kind.attach(to: Future(outcome: antecedent.outcome), on: .default, token: source.token, ran: ran)
        #expect(await next.settled().isSame(as: .success(100)))
        #expect(ran.value == 1)
        source.cancel()
        #expect(next.result == 100)
    }

    /// A token cancelled while the continuation waits on its executor still stops it: the check
    /// happens just before the body runs.
    @Test func tokenCancelledWhileQueuedOnTheExecutorSkipsTheBody() {
        let executor = ManualExecutor()
        let source = CancellationTokenSource()
        let ran = Counter()
        let next = Future(value: 1).continueWith(on: executor, cancellationToken: source.token) { _ in ran.increment() }
        #expect(executor.pendingCount == 1)
        source.cancel()
        executor.runAll()
        #expect(next.isCancelled)
        #expect(ran.value == 0)
    }

    @Test func cancellationStopsTheRestOfAChainButNotItsCleanup() {
        let source = CancellationTokenSource()
        let promise = Promise<Int>()
        let steps = Locked<[String]>([])
        let chain = promise.future
            .continueOnSuccessWith(on: .immediate, cancellationToken: source.token) { value -> Int in
                steps.append("first")
                source.cancel()
                return value + 1
            }
            .continueOnSuccessWith(on: .immediate, cancellationToken: source.token) { value -> Int in
                steps.append("second")
                return value + 1
            }
            .continueWith(on: .immediate) { future -> String in
                steps.append("cleanup")
                return future.isCancelled ? "cancelled" : "finished"
            }
        promise.succeed(1)
        #expect(steps.value == ["first", "cleanup"])
        #expect(chain.result == "cancelled")
    }

    // MARK: - Where continuations run

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func continuationRunsOnItsExecutor() async throws {
        let executor = MarkingExecutor(name: "custom")
        let pending = Promise<Int>()
        let onPending = pending.future.continueWith(on: executor) { _ in MarkingExecutor.current }
        let onCompleted = Future(value: 1).continueOnSuccessWith(on: executor) { _ in MarkingExecutor.current }
        pending.succeed(1)
        #expect(try await onPending.value == "custom")
        #expect(try await onCompleted.value == "custom")
        #expect(executor.executed == 2)
        #expect(try await Future(value: 1).continueWith(on: .immediate) { _ in MarkingExecutor.current }.value == nil)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func dispatchQueueExecutorRunsTheBodyOnThatQueue() async throws {
        let queue = DispatchQueue(label: "tests.continuation.queue")
        let key = DispatchSpecificKey<String>()
        queue.setSpecific(key: key, value: "mine")
        let label = Future(value: 1).continueWith(on: queue) { _ in DispatchQueue.getSpecific(key: key) }
        #expect(try await label.value == "mine")
        #expect(DispatchQueue.getSpecific(key: key) == nil)
    }

    @Test func immediateExecutorRunsAtOnceOnTheCallingThread() {
        let thread = currentThread()
        let ranOn = Locked<pthread_t?>(nil)
        let next = Future(value: 1).continueWith(on: .immediate) { _ in
            ranOn.withLock { $0 = currentThread() }
            return 2
        }
        #expect(next.result == 2)
        #expect(isSameThread(ranOn.value!, thread))
    }

    @Test func immediateContinuationsOfOneFutureRunInRegistrationOrder() {
        let promise = Promise<Int>()
        let order = Locked<[Int]>([])
        for index in 0..<50 {
            promise.future.continueWith(on: .immediate) { _ in order.append(index) }
        }
        promise.succeed(0)
        #expect(order.value == Array(0..<50))
    }

    /// The first immediate continuation of a pending future is stored without a closure; callbacks
    /// added after it (and continuations added after a callback) still run once, in order, each
    /// with the outcome.
    @Test func continuationStoredFirstAndCallbacksAddedLaterRunInOrder() {
        for first in ["continuation", "callback"] {
            let promise = Promise<Int>()
            let order = Locked<[String]>([])
            var continued: [Future<Int>] = []
            if first == "callback" { promise.future.whenComplete { _ in order.append("callback") } }
            continued.append(
                promise.future.continueWith(on: .immediate) { future in
                    order.append("c0")
                    return future.result! + 1
                }
            )
            if first == "continuation" { promise.future.whenComplete { _ in order.append("callback") } }
            continued.append(
                promise.future.continueWith(on: .immediate) { future in
                    order.append("c1")
                    return future.result! + 2
                }
            )
            #expect(order.value.isEmpty)
            promise.succeed(10)
            let expected = first == "callback" ? ["callback", "c0", "c1"] : ["c0", "callback", "c1"]
            #expect(order.value == expected, "\(first)")
            #expect(continued.map(\.result) == [11, 12], "\(first)")
        }
    }

    /// Futures completed while a completion is already running have their callbacks deferred to the
    /// thread's trampoline; the trampoline runs them in completion order (first completed, first
    /// run), also when its queue spills from its single fast slot into the ring buffer.
    @Test func deferredCompletionsRunInCompletionOrder() {
        let trigger = Promise<Void>()
        let order = Locked<[String]>([])
        let inner = (0..<5).map { _ in Promise<Int>() }
        let late = Promise<Int>()
        for (index, promise) in inner.enumerated() {
            promise.future.continueWith(on: .immediate) { _ in
                order.append("inner\(index)")
                if index == 0 { late.succeed(0) }  // queued behind inner1...inner4
            }
        }
        late.future.continueWith(on: .immediate) { _ in order.append("late") }
        trigger.future.continueWith(on: .immediate) { _ in
            order.append("trigger")
            for promise in inner { promise.succeed(0) }
        }
        trigger.succeed(())
        #expect(order.value == ["trigger", "inner0", "inner1", "inner2", "inner3", "inner4", "late"])
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func continuationsOnASerialQueueRunInOrder() async throws {
        let queue = SerialQueue()
        let promise = Promise<Int>()
        let order = Locked<[Int]>([])
        let futures = (0..<200).map { index in
            promise.future.continueWith(on: queue) { _ in order.append(index) }
        }
        promise.succeed(0)
        _ = try await Future.whenAll(futures).value
        #expect(order.value == Array(0..<200))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func continuationOnAWorkerPoolRunsOnAPoolThread() async throws {
        let pool = WorkerPool(name: "continuation", size: 1)
        defer { pool.shutdown() }
        let poolThread = try await pool.submit { currentThread() }.value
        let testThread = currentThread()
        let ranOn = try await Future(value: 1).continueWith(on: pool) { _ in currentThread() }.value
        #expect(isSameThread(ranOn, poolThread))
        #expect(!isSameThread(ranOn, testThread))
    }

    // MARK: - Chains

    @Test func chainsPassValuesAlong() {
        let promise = Promise<Int>()
        let chain = promise.future
            .continueWith(on: .immediate) { $0.result! + 1 }
            .continueOnSuccessWith(on: .default) { $0 * 10 }
            .continueOnSuccessWithTask(on: .immediate) { Future(value: "\($0)") }
            .continueWith { $0.result! + "!" }
        promise.succeed(1)
        #expect(chain.result == "20!")
    }

    @Test func aFailureSkipsSuccessContinuationsUntilAnErrorHandler() {
        let ran = Counter()
        let result = Future<Int>(error: TestError.boom)
            .continueOnSuccessWith { value -> Int in
                ran.increment()
                return value
            }
            .continueOnSuccessWithTask { value -> Future<Int> in
                ran.increment()
                return Future(value: value)
            }
            .continueOnErrorWith { _ in 0 }
            .continueOnSuccessWith { $0 + 1 }
        #expect(result.result == 1)
        #expect(ran.value == 0)
    }
}
