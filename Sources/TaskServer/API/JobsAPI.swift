import NIOCore
import NIOHTTP1
import Synchronization
import TaskCore
import TaskGraph

/// `/v1/jobs`: submit, read, list, cancel, delete, draw (SPEC §3.1, §3.2, §3.5, §3.7).
struct JobsAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.POST, "/v1/jobs", self.submit)
        router.add(.POST, "/v1/jobs/batch", self.submitBatch)
        router.add(.GET, "/v1/jobs", self.list)
        router.add(.GET, "/v1/jobs/{id}", self.get)
        router.add(.DELETE, "/v1/jobs/{id}", self.delete)
        router.add(.POST, "/v1/jobs/{id}/cancel", self.cancel)
        router.add(.POST, "/v1/jobs/{id}/redrive", self.redrive)
        router.add(.GET, "/v1/jobs/{id}/graph", self.graph)
        router.add(.POST, "/v1/graphs/validate", self.validate)
    }

    // MARK: submit

    @Sendable func submit(_ request: Request) throws -> Future<Response> {
        let waitMs = try request.integerQuery("waitMs", in: 0...self.app.configuration.maxWaitMs)
        try self.refuseWhileDraining()
        let json = try self.app.jsonBody(request)
        let idempotency: IdempotencyKey?
        if let key = request.headers.first(name: "idempotency-key") {
            guard Self.isIdempotencyKey(key) else {
                throw HTTPProblem(
                    .badRequest,
                    code: "query.invalid",
                    detail: "Idempotency-Key must be 1 to 255 visible ASCII characters"
                )
            }
            // The hash covers the canonical (compact) JSON, so whitespace does not matter.
            idempotency = IdempotencyKey(key: key, bodyHash: fnv1a64(json.jsonBytes))
        } else {
            idempotency = nil
        }
        if Definitions.isStart(json) {
            // A definition's name: its version's graph and defaults make the job's document.
            return self.app.definitions.jobDocument(json).flatMap { document in
                try self.submit(
                    document,
                    bytes: ByteBuffer(bytes: document.jsonBytes),
                    idempotency,
                    waitMs: waitMs,
                    trace: request.trace
                )
            }
        }
        return try self.submit(
            json,
            bytes: request.body ?? ByteBuffer(),
            idempotency,
            waitMs: waitMs,
            trace: request.trace
        )
    }

    /// Submits the job `document` (its bytes as stored: what a restart decodes again).
    private func submit(
        _ document: JSONValue,
        bytes: ByteBuffer,
        _ idempotency: IdempotencyKey?,
        waitMs: Int?,
        trace: SpanContext?
    ) throws -> Future<Response> {
        let spec = try self.app.decodeJob(document)
        if spec.graph.startsChildJobs {
            let app = self.app
            // The definitions its job nodes start must exist (and start no endless chain).
            let graph = document["graph"] ?? .null
            return app.definitions.checkChildStarts(graph, at: "/graph", closing: nil, code: "graph.invalid").flatMap {
                app.jobs.submit(spec, document: bytes, idempotency: idempotency, trace: trace)
            }.flatMap { submitted in try self.answer(submitted, idempotency, waitMs: waitMs) }
        }
        return self.app.jobs.submit(spec, document: bytes, idempotency: idempotency, trace: trace).flatMap {
            submitted in
            try self.answer(submitted, idempotency, waitMs: waitMs)
        }
    }

    /// The answer to a submission: `201` created, `200` an idempotent repeat, `422` a key used
    /// with another body.
    private func answer(
        _ submitted: JobService.Submitted,
        _ idempotency: IdempotencyKey?,
        waitMs: Int?
    ) throws
        -> Future<Response>
    {
        switch submitted {
        case .mismatch:
            throw HTTPProblem(
                .unprocessableEntity,
                code: "idempotency.mismatch",
                detail: "Idempotency-Key \"\(idempotency?.key ?? "")\" was used before with a different body"
            )
        case .existing(let existing):
            return self.app.respond(with: existing, status: .ok, waitMs: waitMs, location: true)
        case .created(let run):
            self.app.metrics.jobSubmitted()
            return self.app.respond(with: run, status: .created, waitMs: waitMs, location: true)
        }
    }

    private func refuseWhileDraining() throws(HTTPProblem) {
        if self.app.isDraining {
            throw HTTPProblem(
                .serviceUnavailable,
                code: "server.draining",
                detail: "the server is shutting down and accepts no new jobs"
            )
        }
    }

    static func isIdempotencyKey(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.count <= 255 && key.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    // MARK: batch

    /// The most jobs one `POST /v1/jobs/batch` may carry.
    static let maxBatchJobs = 1000

    /// `POST /v1/jobs/batch` (SPEC §8): each job judged on its own, as `POST /v1/jobs` would judge
    /// it (its problem's pointers are the job's own); the accepted ones are all submitted before
    /// any is waited for, so the store commits them together (a group commit takes what is queued:
    /// one transaction for a batch, or two when a commit was under way), and the answer follows
    /// the last commit. `200` with one item per job, in order.
    @Sendable func submitBatch(_ request: Request) throws -> Future<Response> {
        try self.refuseWhileDraining()
        // A header that did nothing would make a retried batch a duplicate: refused, pointing to
        // where a batch's keys go.
        if request.headers.first(name: "idempotency-key") != nil {
            throw Self.batchInvalid([
                ValidationProblem(
                    pointer: "/jobs/0/idempotencyKey",
                    message:
                        "the Idempotency-Key header does not apply to a batch; give each job its own idempotencyKey"
                )
            ])
        }
        let json = try self.app.jsonBody(request)
        guard case .object(let object) = json else {
            throw Self.batchInvalid([ValidationProblem(pointer: "", message: "must be an object with jobs")])
        }
        var problems: [ValidationProblem] = []
        for member in object.members where member.key != "jobs" {
            problems.append(
                ValidationProblem(
                    pointer: "/" + JSONValue.escapePointerToken(member.key),
                    message: "unknown field \"\(member.key)\"; a batch has only jobs"
                )
            )
        }
        guard case .array(let jobs)? = object["jobs"], (1...Self.maxBatchJobs).contains(jobs.count) else {
            problems.append(
                ValidationProblem(pointer: "/jobs", message: "must be an array of 1 to \(Self.maxBatchJobs) jobs")
            )
            throw Self.batchInvalid(problems)
        }
        if !problems.isEmpty { throw Self.batchInvalid(problems) }
        let lean = try Self.leanAnswer(request)
        var items: [Future<BatchItem>] = []
        items.reserveCapacity(jobs.count)
        for job in jobs { items.append(self.submitItem(job, lean: lean, trace: request.trace)) }
        let app = self.app
        return Future.whenAll(items).map { items in
            var body: [UInt8] = []
            body.reserveCapacity(items.count * 400)
            body += Array(#"{"items":["#.utf8)
            var created = 0
            for (index, item) in items.enumerated() {
                if index > 0 { body.append(UInt8(ascii: ",")) }
                switch item {
                case .job(let status, let snapshot):
                    if status == 201 { created += 1 }
                    body += Array(#"{"status":\#(status),"job":"#.utf8)
                    body += snapshot.jsonBytes()
                case .id(let status, let id):
                    if status == 201 { created += 1 }
                    body += Array(#"{"status":\#(status),"id":"\#(id)""#.utf8)
                case .problem(let problem):
                    body += Array(#"{"status":\#(problem.status.code),"problem":"#.utf8)
                    body += problem.response.body
                }
                body.append(UInt8(ascii: "}"))
            }
            body += Array("]}".utf8)
            app.metrics.jobSubmitted(count: created)
            return .json(bytes: body)
        }
    }

    private enum BatchItem: Sendable {
        case job(status: Int, JobSnapshot)
        /// `?answer=ids`: the job's id only.
        case id(status: Int, String)
        case problem(HTTPProblem)
    }

    /// Whether a batch is answered with ids only (`?answer=ids`; `answer=jobs`, the default, gives
    /// each job's representation). Measured with `Benchmarks/batch-bench.py`: encoding 500 job
    /// representations (~200 KB) and the client's parsing them took ~25 % of a batch's busy time.
    private static func leanAnswer(_ request: Request) throws(HTTPProblem) -> Bool {
        switch request.query["answer"] {
        case nil, "jobs": return false
        case "ids": return true
        default: throw HTTPProblem.badQuery("answer must be jobs (the default) or ids")
        }
    }

    private static func batchInvalid(_ problems: [ValidationProblem]) -> HTTPProblem {
        HTTPProblem(
            .unprocessableEntity,
            code: "batch.invalid",
            detail: "the batch is invalid: \(problems[0])",
            errors: problems
        )
    }

    /// One job of a batch: its `idempotencyKey` (in place of the header) taken out, the rest
    /// decoded and submitted as by `POST /v1/jobs`.
    private func submitItem(_ job: JSONValue, lean: Bool, trace: SpanContext?) -> Future<BatchItem> {
        guard case .object(var object) = job else {
            return Future(
                value: .problem(
                    HTTPProblem(
                        .unprocessableEntity,
                        code: "graph.invalid",
                        detail: "the job is invalid: the batch item must be an object",
                        errors: [ValidationProblem(pointer: "", message: "must be an object")]
                    )
                )
            )
        }
        var key: String?
        let keyValue = object["idempotencyKey"]
        object["idempotencyKey"] = nil
        if let value = keyValue, !value.isNull {
            guard case .string(let text) = value, Self.isIdempotencyKey(text) else {
                let problem = ValidationProblem(
                    pointer: "/idempotencyKey",
                    message: "must be 1 to 255 visible ASCII characters"
                )
                return Future(
                    value: .problem(
                        HTTPProblem(
                            .unprocessableEntity,
                            code: "graph.invalid",
                            detail: "the job is invalid: \(problem)",
                            errors: [problem]
                        )
                    )
                )
            }
            key = text
        }
        let document = JSONValue.object(object)
        let bytes = document.jsonBytes
        let itemKey = key
        let idempotency = key.map { IdempotencyKey(key: $0, bodyHash: fnv1a64(bytes)) }
        if Definitions.isStart(document) {
            return self.app.definitions.jobDocument(document).continueWithTask(on: .immediate) { resolved in
                switch resolved.outcome! {
                case .success(let job):
                    return self.submitItem(
                        job,
                        bytes: job.jsonBytes,
                        idempotency: idempotency,
                        key: itemKey,
                        lean: lean,
                        trace: trace
                    )
                case .failure(let error as any HTTPResponseError): return Future(value: .problem(error.problem))
                case .failure, .cancelled: return Future(value: .problem(StoreError.readFailed.problem))
                }
            }
        }
        return self.submitItem(document, bytes: bytes, idempotency: idempotency, key: key, lean: lean, trace: trace)
    }

    /// A batch item's job `document` (`bytes`: as stored) decoded and submitted.
    private func submitItem(
        _ document: JSONValue,
        bytes: [UInt8],
        idempotency: IdempotencyKey?,
        key: String?,
        lean: Bool,
        trace: SpanContext?
    ) -> Future<BatchItem> {
        let spec: JobSpec
        do {
            spec = try self.app.decodeJob(document)
        } catch {
            return Future(value: .problem(error))
        }
        let itemKey = key
        let app = self.app
        let checked =
            spec.graph.startsChildJobs
            ? app.definitions.checkChildStarts(
                document["graph"] ?? .null,
                at: "/graph",
                closing: nil,
                code: "graph.invalid"
            )
            : Future(value: ())
        return checked.flatMap {
            app.jobs.submit(spec, document: ByteBuffer(bytes: bytes), idempotency: idempotency, trace: trace)
        }.continueWith(on: .immediate) { submitted -> BatchItem in
            switch submitted.outcome! {
            case .success(.created(let run)): return lean ? .id(status: 201, run.id) : .job(status: 201, run.snapshot)
            case .success(.existing(let view)):
                return lean ? .id(status: 200, view.id) : .job(status: 200, view.snapshot)
            case .success(.mismatch):
                return .problem(
                    HTTPProblem(
                        .unprocessableEntity,
                        code: "idempotency.mismatch",
                        detail: "idempotencyKey \"\(itemKey ?? "")\" was used before with a different job"
                    )
                )
            case .failure(let error as any HTTPResponseError): return .problem(error.problem)
            case .failure: return .problem(StoreError.writeFailed.problem)
            case .cancelled: return .problem(StoreError.writeFailed.problem)
            }
        }
    }

    // MARK: read

    @Sendable func get(_ request: Request) throws -> Future<Response> {
        let waitMs = try request.integerQuery("waitMs", in: 0...self.app.configuration.maxWaitMs)
        let app = self.app
        return self.app.withJob(request) { job in app.respond(with: job, status: .ok, waitMs: waitMs, location: false) }
    }

    @Sendable func list(_ request: Request) throws -> Future<Response> {
        let limit = try request.integerQuery("limit", in: 1...self.app.configuration.maxListLimit) ?? 100
        let query = try Self.query(request, limit: limit)
        return self.app.jobs.list(query).map { page -> Response in
            var json = JSONWriter(capacity: 64 + 320 * page.items.count)
            json.beginObject()
            json.key("items")
            json.beginArray()
            for item in page.items { item.write(to: &json, includePayloads: false) }
            json.endArray()
            json.key("nextCursor")
            if let next = page.next { json.string(Cursor.encode(next)) } else { json.null() }
            json.endObject()
            return .json(bytes: json.bytes)
        }
    }

    /// The filters of `GET /v1/jobs` (and of the bulk commands, which act on what it would list):
    /// `state`, `label` (repeatable), `definition`, `parent`, `createdAfter` / `createdBefore`,
    /// `finishedAfter` / `finishedBefore` (RFC 3339; after ≤ time < before), and `cursor`.
    static func query(_ request: Request, limit: Int) throws(HTTPProblem) -> JobQuery {
        var query = JobQuery(limit: limit)
        if let state = request.query["state"] {
            guard let parsed = JobState(rawValue: state) else {
                throw HTTPProblem.badQuery("state must be one of pending, running, succeeded, failed, cancelled")
            }
            query.state = parsed
        }
        for label in request.queryValues["label"] ?? [] {
            let parts = label.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty else { throw HTTPProblem.badQuery("label must be key:value") }
            query.labels.append((String(parts[0]), String(parts[1])))
        }
        if let parent = request.query["parent"] {
            // A child job carries the label parent=<id> (issue #45): the same filter.
            guard !parent.isEmpty else { throw HTTPProblem.badQuery("parent must be a job id") }
            query.labels.append(("parent", parent))
        }
        if let definition = request.query["definition"] {
            guard DefinitionRef.isValidName(definition) else {
                throw HTTPProblem.badQuery("definition must be a definition's name")
            }
            query.definition = definition
        }
        func time(_ name: String) throws(HTTPProblem) -> Timestamp? {
            guard let text = request.query[name] else { return nil }
            guard let time = Timestamp(rfc3339: text) else {
                throw HTTPProblem.badQuery("\(name) must be an RFC 3339 date-time such as 2026-12-02T00:00:00Z")
            }
            return time
        }
        query.createdAfter = try time("createdAfter")
        query.createdBefore = try time("createdBefore")
        query.finishedAfter = try time("finishedAfter")
        query.finishedBefore = try time("finishedBefore")
        if let cursor = request.query["cursor"] {
            guard let position = Cursor.decode(cursor) else {
                throw HTTPProblem.badQuery("cursor is not one this server issued")
            }
            query.before = position
        }
        return query
    }

    // MARK: change

    @Sendable func cancel(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        return self.app.jobs.cancel(id).map { outcome -> Response in
            let (status, snapshot) = try Self.cancelled(outcome, id: id).get()
            return .json(bytes: snapshot.jsonBytes(), status: status)
        }
    }

    /// What a cancel of job `id` answers: `202` (cancelling) or `200` (cancelled already) with the
    /// job, or the problem (`409 job.terminal`, `404 job.notFound`).
    static func cancelled(
        _ outcome: JobService.CancelOutcome,
        id: String
    ) -> Result<(HTTPResponseStatus, JobSnapshot), HTTPProblem> {
        switch outcome {
        case .cancelling(let snapshot): .success((.accepted, snapshot))
        case .alreadyCancelled(let snapshot): .success((.ok, snapshot))
        case .terminal(let state): .failure(.conflict("job.terminal", "the job already \(state.rawValue)"))
        case .notFound: .failure(.notFound("job.notFound", "no job \(id)"))
        }
    }

    @Sendable func redrive(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        try self.refuseRedriveWhileDraining()
        return self.app.jobs.redrive(id).map { outcome -> Response in
            .json(bytes: try Self.redriven(outcome, id: id).get().jsonBytes(), status: .accepted)
        }
    }

    func refuseRedriveWhileDraining() throws(HTTPProblem) {
        if self.app.isDraining {
            throw HTTPProblem(
                .serviceUnavailable,
                code: "server.draining",
                detail: "the server is shutting down and starts no job"
            )
        }
    }

    /// What a redrive of job `id` answers: `202` with the job, or the problem (`409
    /// job.notRedrivable` saying why, `404 job.notFound`).
    static func redriven(_ outcome: JobService.RedriveOutcome, id: String) -> Result<JobSnapshot, HTTPProblem> {
        switch outcome {
        case .redriven(let snapshot): .success(snapshot)
        case .notRedrivable(let state):
            .failure(
                .conflict(
                    "job.notRedrivable",
                    state.isTerminal
                        ? "the job \(state.rawValue); only a failed or cancelled job can be redriven"
                        : "the job is \(state.rawValue); only a failed or cancelled job can be redriven"
                )
            )
        case .notFound: .failure(.notFound("job.notFound", "no job \(id)"))
        }
    }

    @Sendable func delete(_ request: Request) throws -> Future<Response> {
        let id = request.parameter("id")
        return self.app.jobs.delete(id).map { result -> Response in
            switch result {
            case .deleted: return Response(status: .noContent)
            case .notFound: throw HTTPProblem.notFound("job.notFound", "no job \(id)")
            case .notTerminal:
                throw HTTPProblem.conflict("job.notTerminal", "the job is still running; cancel it first")
            }
        }
    }

    // MARK: validate and draw

    @Sendable func validate(_ request: Request) throws -> Future<Response> {
        let json = try self.app.jsonBody(request)
        let spec = try self.app.decodeJob(json)
        return Future(value: .json(["valid": true, "nodes": .int(spec.nodeCount), "depth": .int(spec.depth)]))
    }

    @Sendable func graph(_ request: Request) throws -> Future<Response> {
        let format = request.query["format"] ?? "mermaid"
        guard format == "mermaid" || format == "dot" || format == "svg" else {
            throw HTTPProblem.badQuery("format must be mermaid, dot or svg")
        }
        return self.app.withJob(request) { job in
            let nodes = job.nodes
            switch format {
            case "dot": return .text(GraphPicture.dot(nodes, name: job.id))
            case "svg":
                var response = Response.text(GraphSVG(nodes).render(), contentType: "image/svg+xml; charset=utf-8")
                // Opened on its own, an SVG is a document: it may run no script, whatever it says.
                response.headers.add(
                    name: "content-security-policy",
                    value: "default-src 'none'; style-src 'unsafe-inline'"
                )
                response.headers.add(name: "x-content-type-options", value: "nosniff")
                return response
            default: return .text(GraphPicture.mermaid(nodes))
            }
        }
    }
}

/// List cursors: an opaque token for a position in the store's insertion order.
enum Cursor {
    static func encode(_ position: UInt64) -> String { "p" + String(position, radix: 36) }

    static func decode(_ cursor: String) -> UInt64? {
        guard cursor.hasPrefix("p"), cursor.utf8.count <= 14, let value = UInt64(cursor.dropFirst(), radix: 36),
            value > 0
        else { return nil }
        return value
    }
}
