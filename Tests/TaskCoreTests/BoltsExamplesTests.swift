import TestSupport
import Testing

@testable import TaskCore

/// The examples of the Bolts documentation (BFTask introduction, Bolts notes, Bolts-Swift README,
/// AsyncTask README), translated to TaskCore against an in-memory stand-in for Parse.
struct BoltsExamplesTests {
    // MARK: - A fake Parse backend

    struct Student: Equatable, Sendable {
        var name: String
        var gpa: Double
        var valedictorian = false
        var salutatorian = false
    }

    struct Comment: Equatable, Sendable {
        var id: Int
        var post: Int
    }

    /// Asynchronous, callback-style storage: every call answers later on another thread, like
    /// Parse's `...InBackgroundWithBlock` methods, and the `...Async` wrappers turn the callbacks
    /// into futures with a `Promise` (Bolts' `BFTaskCompletionSource`).
    final class Backend: Sendable {
        let students: Locked<[Student]>
        let comments: Locked<[Comment]>
        let log = Locked<[String]>([])
        let deleteGauge = ConcurrencyGauge()
        let failSaves: Bool

        init(students: [Student] = [], comments: [Comment] = [], failSaves: Bool = false) {
            self.students = Locked(students)
            self.comments = Locked(comments)
            self.failSaves = failSaves
        }

        // Callback APIs, answering on a pool thread.

        func findStudentsInBackground(_ callback: @escaping @Sendable ([Student]?, (any Error)?) -> Void) {
            TestPools.shared.execute {
                self.log.append("find")
                callback(self.students.value.sorted { $0.gpa > $1.gpa }, nil)
            }
        }

        func saveInBackground(_ student: Student, _ callback: @escaping @Sendable (Student?, (any Error)?) -> Void) {
            TestPools.shared.execute {
                if self.failSaves {
                    callback(nil, TestError.code(-1))
                    return
                }
                self.log.append("save \(student.name)")
                self.students.withLock { students in
                    if let index = students.firstIndex(where: { $0.name == student.name }) { students[index] = student }
                }
                callback(student, nil)
            }
        }

        func deleteInBackground(_ comment: Comment, _ callback: @escaping @Sendable ((any Error)?) -> Void) {
            TestPools.shared.execute {
                self.deleteGauge.enter()
                self.log.append("delete \(comment.id)")
                self.comments.withLock { $0.removeAll { $0 == comment } }
                self.deleteGauge.leave()
                callback(nil)
            }
        }

        // Task-based wrappers (the documentation's "Creating Tasks").

        func findAsync() -> Future<[Student]> {
            let promise = Promise<[Student]>()
            self.findStudentsInBackground { students, error in
                if let error {
                    promise.fail(error)
                } else if let students {
                    promise.succeed(students)
                } else {
                    promise.cancel()
                }
            }
            return promise.future
        }

        func saveAsync(_ student: Student) -> Future<Student> {
            let promise = Promise<Student>()
            self.saveInBackground(student) { saved, error in
                if let error {
                    promise.fail(error)
                } else if let saved {
                    promise.succeed(saved)
                } else {
                    promise.cancel()
                }
            }
            return promise.future
        }

        func deleteAsync(_ comment: Comment) -> Future<Void> {
            let promise = Promise<Void>()
            self.deleteInBackground(comment) { error in
                if let error { promise.fail(error) } else { promise.succeed(()) }
            }
            return promise.future
        }

        func findCommentsAsync(post: Int) -> Future<[Comment]> {
            TestPools.shared.submit { self.comments.value.filter { $0.post == post } }
        }
    }

    static let classOf2014 = [
        Student(name: "Ada", gpa: 3.9),
        Student(name: "Grace", gpa: 4.0),
        Student(name: "Alan", gpa: 3.7),
    ]

    // MARK: - continueWithBlock: inspecting a completed task

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)), arguments: AntecedentOutcome.allCases)
    func continueWithInspectsHowTheSaveEnded(ending: AntecedentOutcome) async throws {
        let save = Promise<Int>()
        let report = save.future.continueWith { task -> String in
            if task.isCancelled {
                return "the save was cancelled"
            } else if let error = task.error {
                return "the save failed: \(error)"
            } else {
                return "saved object \(task.result!)"
            }
        }
        runOnThread { save.complete(with: ending.outcome) }
        let expected = [
            AntecedentOutcome.success: "saved object 7",
            .failure: "the save failed: code(7)",
            .cancelled: "the save was cancelled",
        ]
        #expect(try await report.value == expected[ending])
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func getStringAsyncTurnsANumberTaskIntoAStringTask() async throws {
        func getNumberAsync() -> Future<Int> { TestPools.shared.submit { 42 } }
        func getStringAsync() -> Future<String> {
            getNumberAsync().continueWith { task in "\(task.result!)" }
        }
        #expect(try await getStringAsync().value == "42")
    }

    // MARK: - Chaining tasks together

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func chainingFindsAndSavesWithoutNesting() async throws {
        let backend = Backend(students: Self.classOf2014)
        let done = backend.findAsync()
            .continueOnSuccessWithTask { students -> Future<Student> in
                var valedictorian = students[0]
                valedictorian.valedictorian = true
                return backend.saveAsync(valedictorian)
            }
            .continueOnSuccessWithTask { _ in backend.findAsync() }
            .continueOnSuccessWithTask { students -> Future<Student> in
                var salutatorian = students[1]
                salutatorian.salutatorian = true
                return backend.saveAsync(salutatorian)
            }
            .continueOnSuccessWith { saved in "everything is done: \(saved.name)" }
        #expect(try await done.value == "everything is done: Ada")
        #expect(backend.log.value == ["find", "save Grace", "find", "save Ada"])
        let students = backend.students.value
        #expect(students.filter(\.valedictorian).map(\.name) == ["Grace"])
        #expect(students.filter(\.salutatorian).map(\.name) == ["Ada"])
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func chainOfTasksReturningTasksRunsInOrder() async throws {
        // The Bolts notes' testAsync → testAsync1 → testAsync2 → testAsync3 chain.
        let log = Locked<[String]>([])
        @Sendable func testAsync(_ name: String) -> Future<String> {
            let source = Promise<String>()
            log.append(name)
            source.succeed("\(name) complete")
            return source.future
        }
        let chain = testAsync("testAsync")
            .continueWithTask { task in
                log.append(task.result!)
                return testAsync("testAsync1")
            }
            .continueWithTask { task in
                log.append(task.result!)
                return testAsync("testAsync2")
            }
            .continueWithTask { task in
                log.append(task.result!)
                return testAsync("testAsync3")
            }
            .continueWith { task in
                log.append("task in chain complete")
                return task.result!
            }
        #expect(try await chain.value == "testAsync3 complete")
        #expect(
            log.value == [
                "testAsync", "testAsync complete", "testAsync1", "testAsync1 complete", "testAsync2",
                "testAsync2 complete", "testAsync3", "task in chain complete",
            ]
        )
    }

    // MARK: - Error handling

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func failureSkipsSuccessContinuationsAndAHandlerRecovers() async throws {
        let backend = Backend(students: Self.classOf2014)
        let skipped = Counter()
        let handled = Locked<[TestError]>([])
        let final = backend.findAsync()
            .continueOnSuccessWithTask { students -> Future<Student?> in
                var valedictorian = students[0]
                valedictorian.valedictorian = true
                // Force this callback to fail.
                return Future(error: TestError.code(-1))
            }
            .continueOnSuccessWithTask { _ -> Future<Student?> in
                // Now this continuation will be skipped.
                skipped.increment()
                return backend.findAsync().map { $0.first }
            }
            .continueWithTask { task -> Future<Student?> in
                if let error = task.error {
                    // This error handler WILL be called; handle the error by returning a value.
                    handled.append(error as! TestError)
                    return Future(value: nil)
                }
                // This will also be skipped.
                skipped.increment()
                return Future(value: task.result!)
            }
            .continueOnSuccessWith { result in
                // Everything is done! This gets called, with the recovered (nil) result.
                result == nil ? "done with nil" : "done with a student"
            }
        #expect(try await final.value == "done with nil")
        #expect(skipped.value == 0)
        #expect(handled.value == [.code(-1)])
        #expect(backend.log.value == ["find"])
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func oneErrorHandlerAtTheEndOfAChainCatchesAFailedSave() async throws {
        let backend = Backend(students: Self.classOf2014, failSaves: true)
        let outcome = backend.findAsync()
            .continueOnSuccessWithTask { students in backend.saveAsync(students[0]) }
            .continueOnSuccessWith { $0.name }
            .continueOnErrorWith { error in "recovered from \(error)" }
        #expect(try await outcome.value == "recovered from code(-1)")
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func profileImageFallsBackToAPlaceholder() async throws {
        // Bolts-Swift README: fetchProfile → fetchProfileImage, placeholder when either fails.
        func fetchProfile(_ user: String) -> Future<String> {
            user == "ghost" ? Future(error: TestError.code(404)) : TestPools.shared.submit { "profile:\(user)" }
        }
        @Sendable func fetchProfileImage(_ profile: String) -> Future<String> {
            TestPools.shared.submit { "image(\(profile))" }
        }
        func image(for user: String) -> Future<String> {
            fetchProfile(user)
                .continueOnSuccessWithTask { fetchProfileImage($0) }
                .continueWith { task in task.result ?? "placeholder" }
        }
        #expect(try await image(for: "ada").value == "image(profile:ada)")
        #expect(try await image(for: "ghost").value == "placeholder")
    }

    // MARK: - Creating tasks: a completion source completed from a callback

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func completionSourceIsCompletedFromACallbackOnAnotherThread() async throws {
        func fetchInBackground(_ id: Int, _ callback: @escaping @Sendable (String?, (any Error)?) -> Void) {
            runOnThread {
                switch id {
                case 1: callback("object 1", nil)
                case 2: callback(nil, TestError.code(2))
                default: callback(nil, nil)
                }
            }
        }
        func fetchAsync(_ id: Int) -> Future<String> {
            let source = Promise<String>()
            fetchInBackground(id) { object, error in
                if let error {
                    source.fail(error)
                } else if let object {
                    source.succeed(object)
                } else {
                    source.cancel()
                }
            }
            return source.future
        }
        #expect(try await fetchAsync(1).value == "object 1")
        #expect((await fetchAsync(2).settled().error as? TestError) == .code(2))
        #expect(await fetchAsync(3).settled().isCancelled)
    }

    // MARK: - Tasks in series

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func commentsAreDeletedOneAfterAnother() async throws {
        let comments = (1...20).map { Comment(id: $0, post: $0 <= 15 ? 123 : 7) }
        let backend = Backend(comments: comments)
        let done = backend.findCommentsAsync(post: 123)
            .continueOnSuccessWithTask { results -> Future<Void> in
                // Create a trivial completed task as a base case.
                var task = Future(value: ())
                for result in results {
                    // For each item, extend the task with a function to delete the item.
                    task = task.continueOnSuccessWithTask { backend.deleteAsync(result) }
                }
                return task
            }
            .continueOnSuccessWith { "every comment was deleted" }
        #expect(try await done.value == "every comment was deleted")
        #expect(backend.log.value == (1...15).map { "delete \($0)" })
        #expect(backend.deleteGauge.maximum == 1)
        #expect(backend.comments.value.map(\.id) == Array(16...20))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func aFailureInTheMiddleOfASeriesStopsTheRest() async {
        let deleted = Locked<[Int]>([])
        var task = Future(value: ())
        for id in 1...5 {
            task = task.continueOnSuccessWithTask { () -> Future<Void> in
                if id == 3 { return Future(error: TestError.code(3)) }
                return TestPools.shared.submit { deleted.append(id) }
            }
        }
        #expect((await task.settled().error as? TestError) == .code(3))
        #expect(deleted.value == [1, 2])
    }

    // MARK: - Tasks in parallel

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func commentsAreDeletedInParallel() async throws {
        let comments = (1...40).map { Comment(id: $0, post: 123) }
        let backend = Backend(comments: comments)
        let done = backend.findCommentsAsync(post: 123)
            .continueOnSuccessWithTask { results -> Future<[Void]> in
                // Start every delete at once and wait for all of them.
                Future.whenAll(results.map { backend.deleteAsync($0) })
            }
            .continueOnSuccessWith { deleted in "deleted \(deleted.count) comments" }
        #expect(try await done.value == "deleted 40 comments")
        #expect(backend.comments.value.isEmpty)
        #expect(Set(backend.log.value) == Set((1...40).map { "delete \($0)" }))
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func awaitFirstAndAwaitAllOverACollection() async throws {
        // AsyncTask README: replicatedURLs.map(get).awaitFirst(), messages.map(encrypt).awaitAll().
        func get(_ url: String) -> Future<String> {
            url.contains("down") ? Future(error: TestError.code(503)) : TestPools.shared.submit { "page from \(url)" }
        }
        func encrypt(_ message: String) -> Future<String> { TestPools.shared.submit { String(message.reversed()) } }
        let first = try await Future.whenAny(["https://down.swift.org", "https://web2.swift.org"].map(get)).value
        #expect(first.index == 1)
        #expect(first.value == "page from https://web2.swift.org")
        #expect(try await Future.whenAll(["ab", "cd", "ef"].map(encrypt)).value == ["ba", "dc", "fe"])
    }

    // MARK: - Executors

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func continuationOnACustomExecutorRunsThere() async throws {
        // BFExecutor executorWithBlock: a "main thread" executor, here a serial queue that marks itself.
        let mainThread = MarkingExecutor(name: "main", target: SerialQueue())
        let backend = Backend(students: Self.classOf2014)
        let shown = backend.findAsync().continueWith(on: mainThread) { task -> String in
            "\(MarkingExecutor.current ?? "?") shows \(task.result!.first!.name)"
        }
        #expect(try await shown.value == "main shows Grace")
        #expect(mainThread.executed == 1)
    }

    // MARK: - Cancellation

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func cancelledTokenStopsAComplicatedOperation() async throws {
        func doSomethingAsync(_ token: CancellationToken, taking duration: Duration) -> Future<Int> {
            Future.delay(duration, token: token).map { 1 }
        }
        let longSteps = Counter()
        func doSomethingComplicatedAsync(_ token: CancellationToken, taking duration: Duration) -> Future<Int> {
            doSomethingAsync(token, taking: duration).continueWithTask { task -> Future<Int> in
                if token.isCancellationRequested { return .cancelled() }
                // Do something that takes a while.
                longSteps.increment()
                return Future(value: task.result! + 1)
            }
        }
        let live = CancellationTokenSource()
        #expect(try await doSomethingComplicatedAsync(live.token, taking: .milliseconds(1)).value == 2)

        // "When you get bored…"
        let bored = CancellationTokenSource()
        let cancelled = doSomethingComplicatedAsync(bored.token, taking: .seconds(3600))
        bored.cancel()
        #expect(await cancelled.settled().isCancelled)
        #expect(longSteps.value == 1)
    }

    @Test(.timeLimit(.minutes(1 * TestTiming.slowdown)))
    func cancelledTokenStopsTheChainItIsPassedTo() async {
        let source = CancellationTokenSource()
        let first = Promise<Int>()
        let ran = Locked<[String]>([])
        let chain = first.future
            .continueOnSuccessWith(cancellationToken: source.token) { value -> Int in
                ran.append("step 1")
                return value + 1
            }
            .continueOnSuccessWith(cancellationToken: source.token) { value -> Int in
                ran.append("step 2")
                return value + 1
            }
        source.cancel()
        first.succeed(1)
        #expect(await chain.settled().isCancelled)
        #expect(ran.value.isEmpty)
    }
}
