import TestSupport
import Testing

@testable import TaskCore

struct CancellationTokenTests {
    @Test func newSourceIsNotCancelled() {
        let source = CancellationTokenSource()
        #expect(!source.isCancellationRequested)
        #expect(!source.token.isCancellationRequested)
        #expect(throws: Never.self) { try source.token.throwIfCancellationRequested() }
    }

    @Test func cancelRequestsCancellation() {
        let source = CancellationTokenSource()
        source.cancel()
        #expect(source.isCancellationRequested)
        #expect(source.token.isCancellationRequested)
        #expect(throws: CancellationError.self) { try source.token.throwIfCancellationRequested() }
    }

    @Test func noneTokenIsNeverCancelled() {
        #expect(!CancellationToken.none.isCancellationRequested)
        #expect(CancellationToken.none === CancellationToken.none)
    }

    // MARK: - Handlers

    @Test func cancelRunsHandlersOnceInRegistrationOrder() {
        let source = CancellationTokenSource()
        let calls = Locked<[Int]>([])
        for index in 0..<20 { source.token.register { calls.append(index) } }
        #expect(calls.value.isEmpty)
        #expect(source.token.registeredHandlerCount == 20)
        source.cancel()
        source.cancel()
        #expect(calls.value == Array(0..<20))
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test func cancelRunsHandlersOnTheCancellingThreadBeforeReturning() {
        let source = CancellationTokenSource()
        let thread = currentThread()
        let ranOn = Locked<[Bool]>([])
        source.token.register { ranOn.append(isSameThread(currentThread(), thread)) }
        source.cancel()
        #expect(ranOn.value == [true])
    }

    @Test func registeringOnACancelledTokenRunsTheHandlerAtOnce() {
        let source = CancellationTokenSource()
        source.cancel()
        let calls = Counter()
        let registration = source.token.register { calls.increment() }
        #expect(calls.value == 1)
        registration.dispose()
        source.cancel()
        #expect(calls.value == 1)
        #expect(source.token.registeredHandlerCount == 0)
    }

    @Test func disposeRemovesTheHandler() {
        let source = CancellationTokenSource()
        let calls = Locked<[String]>([])
        let removed = source.token.register { calls.append("removed") }
        source.token.register { calls.append("kept") }
        removed.dispose()
        removed.dispose()
        #expect(source.token.registeredHandlerCount == 1)
        source.cancel()
        #expect(calls.value == ["kept"])
    }

    @Test func disposeAfterTheHandlerRanDoesNothing() {
        let source = CancellationTokenSource()
        let calls = Counter()
        let registration = source.token.register { calls.increment() }
        source.cancel()
        registration.dispose()
        #expect(calls.value == 1)
    }

    @Test func handlersSeeTheTokenAlreadyCancelled() {
        let source = CancellationTokenSource()
        let seen = Locked<[Bool]>([])
        source.token.register { seen.append(source.token.isCancellationRequested) }
        source.cancel()
        #expect(seen.value == [true])
    }

    // MARK: - Handlers run outside locks

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func handlerThatRegistersAnotherHandlerDoesNotDeadlock() {
        let source = CancellationTokenSource()
        let calls = Locked<[String]>([])
        source.token.register {
            calls.append("outer")
            // The token is cancelled by now: the new handler runs at once, inside this one.
            source.token.register { calls.append("inner") }
            calls.append("outer end")
        }
        source.cancel()
        #expect(calls.value == ["outer", "inner", "outer end"])
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func handlerThatCancelsAnotherSourceDoesNotDeadlock() {
        let first = CancellationTokenSource()
        let second = CancellationTokenSource()
        let calls = Locked<[String]>([])
        first.token.register {
            calls.append("first")
            second.cancel()
        }
        second.token.register {
            calls.append("second")
            first.cancel()  // already cancelled: does nothing, and must not deadlock
        }
        first.cancel()
        #expect(calls.value == ["first", "second"])
        #expect(second.isCancellationRequested)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func handlerThatDisposesItsOwnOrAnotherRegistrationDoesNotDeadlock() {
        let source = CancellationTokenSource()
        let calls = Counter()
        let other = Locked<CancellationRegistration?>(nil)
        source.token.register {
            calls.increment()
            other.value?.dispose()
        }
        other.withLock { $0 = source.token.register { calls.increment() } }
        source.cancel()
        // Both handlers were taken before the first ran: disposal during cancel() is too late.
        #expect(calls.value == 2)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func handlerThatCancelsItsOwnSourceAgainDoesNotDeadlock() {
        let source = CancellationTokenSource()
        let calls = Counter()
        source.token.register {
            calls.increment()
            source.cancel()
        }
        source.cancel()
        #expect(calls.value == 1)
    }

    // MARK: - cancel(after:)

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func cancelAfterCancelsLater() async throws {
        let source = CancellationTokenSource()
        let cancelled = Promise<Void>()
        source.token.register { cancelled.succeed(()) }
        let start = ContinuousClock.now
        source.cancel(after: .milliseconds(30))
        #expect(!source.isCancellationRequested)
        try await cancelled.future.value
        let waited = ContinuousClock.now - start
        #expect(source.isCancellationRequested)
        #expect(waited >= .milliseconds(30))
        #expect(waited < promptly)
    }

    @Test func cancelAfterAZeroOrNegativeDelayCancelsBeforeReturning() throws {
        // Bolts cancels at once for a zero delay; a negative one is simply already due here.
        for delay in [Duration.zero, .milliseconds(-10)] {
            let source = CancellationTokenSource()
            let calls = Counter()
            source.token.register { calls.increment() }
            source.cancel(after: delay)
            #expect(source.isCancellationRequested)
            #expect(calls.value == 1)
            #expect(source.token.registeredHandlerCount == 0)
        }
    }

    @Test func cancelBeforeTheDeadlineReleasesTheTimer() {
        let source = CancellationTokenSource()
        source.cancel(after: .seconds(3600))
        #expect(source.token.registeredHandlerCount == 1)
        let calls = Counter()
        source.token.register { calls.increment() }
        source.cancel()
        #expect(calls.value == 1)
        #expect(source.token.registeredHandlerCount == 0)
    }

    // MARK: - Linked sources

    @Test func linkedSourceIsCancelledByItsParent() {
        let parent = CancellationTokenSource()
        let child = CancellationTokenSource(linkedTo: [parent.token])
        let calls = Counter()
        child.token.register { calls.increment() }
        #expect(!child.isCancellationRequested)
        parent.cancel()
        #expect(child.isCancellationRequested)
        #expect(calls.value == 1)
    }

    @Test func linkedSourceIsCancelledByAnyOfSeveralParents() {
        let parents = (0..<3).map { _ in CancellationTokenSource() }
        let child = CancellationTokenSource(linkedTo: parents.map(\.token))
        parents[1].cancel()
        #expect(child.isCancellationRequested)
        #expect(!parents[0].isCancellationRequested)
        #expect(!parents[2].isCancellationRequested)
    }

    @Test func cancellingALinkedSourceDoesNotCancelItsParent() {
        let parent = CancellationTokenSource()
        let child = CancellationTokenSource(linkedTo: [parent.token])
        child.cancel()
        #expect(child.isCancellationRequested)
        #expect(!parent.isCancellationRequested)
    }

    @Test func sourceLinkedToACancelledParentStartsCancelled() {
        let parent = CancellationTokenSource()
        parent.cancel()
        let child = CancellationTokenSource(linkedTo: [parent.token])
        #expect(child.isCancellationRequested)
    }

    @Test func linksChainThroughGenerations() {
        let root = CancellationTokenSource()
        let middle = CancellationTokenSource(linkedTo: [root.token])
        let leaf = CancellationTokenSource(linkedTo: [middle.token])
        root.cancel()
        #expect(middle.isCancellationRequested)
        #expect(leaf.isCancellationRequested)
    }

    @Test func droppedLinkedSourceUnregistersFromItsParents() {
        let parent = CancellationTokenSource()
        do {
            let child = CancellationTokenSource(linkedTo: [parent.token])
            #expect(parent.token.registeredHandlerCount == 1)
            _ = child
        }
        #expect(parent.token.registeredHandlerCount == 0)
        parent.cancel()
    }

    @Test func linkedToNothingBehavesLikeAPlainSource() {
        let source = CancellationTokenSource(linkedTo: [])
        #expect(!source.isCancellationRequested)
        source.cancel()
        #expect(source.isCancellationRequested)
    }
}
