import NIOHTTP1
import Synchronization
import TaskCore
import TaskGraph

/// The owner of workflow definitions (issue #45): stores their versions, reads them, and turns a
/// start request that names one into the document of the job it starts.
///
/// The store is the only state that matters (a cluster's servers share it). What is kept here is
/// a cache of parsed versions — a version never changes, so a cached one is never stale; which
/// version is the latest is read from the store at each start.
public final class Definitions: Sendable {
    let store: any DefinitionStore
    let decoder: JobDecoder
    let clock: any ServerClock
    private let parsed = Mutex<[DefinitionRef: WorkflowDefinition]>([:])
    /// The latest version of each name as this server last stored or read it — kept only when
    /// the store is this server's alone (`definitionsAreShared` false), where no one else changes
    /// it: a start then reads no store. Measured with Benchmarks/definition-bench.sh (SQLite):
    /// a store read per start cost 16 % of a one-task job's CPU.
    private let latest = Mutex<[String: StoredDefinition?]>([:])
    /// Parsed versions kept at most (then the cache starts over: rare, and only costs parsing).
    static let maxParsed = 512

    init(store: any DefinitionStore, decoder: JobDecoder, clock: any ServerClock) {
        self.store = store
        self.decoder = decoder
        self.clock = clock
    }

    static func notFound(_ name: String) -> HTTPProblem {
        .notFound("definition.notFound", "no definition \(name.prefix(100))")
    }

    static func checkName(_ name: String) throws(HTTPProblem) {
        guard DefinitionRef.isValidName(name) else {
            throw HTTPProblem(
                .unprocessableEntity,
                code: "definition.invalid",
                detail:
                    "a definition's name is 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit",
                errors: [ValidationProblem(pointer: "", message: "the name in the path is not a valid definition name")]
            )
        }
    }

    /// Stores `json` as the next version of `name` (none when it equals the latest).
    func put(_ name: String, _ json: JSONValue) throws(HTTPProblem) -> Future<DefinitionPut> {
        try Self.checkName(name)
        let definition = try WorkflowDefinition(json, decoder: self.decoder)
        let checked = self.checkChildStarts(
            definition.body["graph"] ?? .null,
            at: "/graph",
            closing: name,
            code: "definition.invalid"
        )
        return checked.flatMap { self.store.putDefinition(name, body: definition.body, at: self.clock.now()) }.map {
            put in
            switch put {
            case .created(let stored), .unchanged(let stored): self.remember(name, stored)
            }
            return put
        }
    }

    // MARK: - Cycles of child jobs

    /// A `job` node of a definition's graph: where it is, and the definition it starts.
    struct ChildStart {
        var pointer: String
        var name: String
        var version: Int?
    }

    /// The `job` nodes of `graph` (a graph as JSON, valid), in document order.
    static func childStarts(_ graph: JSONValue, at pointer: String) -> [ChildStart] {
        var starts: [ChildStart] = []
        func walk(_ value: JSONValue, _ pointer: String) {
            switch value {
            case .object(let object):
                if object["type"] == "job", let name = object["definition"]?.stringValue {
                    starts.append(ChildStart(pointer: pointer, name: name, version: object["version"]?.intValue))
                }
                for member in object.members where member.key != "input" && member.key != "params" {
                    walk(member.value, pointer + "/" + member.key)
                }
            case .array(let items):
                for (index, item) in items.enumerated() { walk(item, pointer + "/\(index)") }
            default:
                break
            }
        }
        walk(graph, pointer)
        return starts
    }

    /// How many stored versions a check of child starts reads at most: past it the check gives
    /// up, and the depth bound of child jobs (`ChildJobs.maxDepth`) still stops a runaway chain.
    static let maxCheckReads = 200

    /// Checks the `job` nodes of `graph` (JSON, at `pointer`) before it is stored or started:
    /// each names a definition that starts (a version that exists; unpinned, a name not retired);
    /// none starts `closing` (the definition being put) again through the definitions below it
    /// (their latest versions, or the pinned ones) — a chain of children that would never end;
    /// and no chain of children below goes deeper than `ChildJobs.maxDepth`. Fails with a `422`
    /// of `code` and a pointer per problem. (A definition changed later can still make a chain
    /// fail when it runs: the node then fails with `definition.unknown` or `job.tooDeep`.)
    func checkChildStarts(_ graph: JSONValue, at pointer: String, closing name: String?, code: String) -> Future<Void> {
        let starts = Self.childStarts(graph, at: pointer)
        guard !starts.isEmpty else { return Future(value: ()) }
        let initial = Future(value: (reads: 0, problems: [ValidationProblem]()))
        let done = starts.reduce(initial) { previous, start in
            previous.flatMap { sofar in
                self.walk(closing: name, [(start.name, start.version, [start.name])], Walk(reads: sofar.reads)).map {
                    walk in
                    var problems = sofar.problems
                    let at = start.pointer + "/definition"
                    if walk.missing {
                        let message =
                            start.version.map { "definition \"\(start.name)\" has no version \($0)" }
                            ?? "no definition named \"\(start.name)\" (or it is retired)"
                        problems.append(ValidationProblem(pointer: at, message: message))
                    } else if let path = walk.cycle {
                        let chain = path.joined(separator: ", which starts ")
                        problems.append(ValidationProblem(pointer: at, message: "starts \(chain): a cycle"))
                    } else if walk.deepest > ChildJobs.maxDepth {
                        problems.append(
                            ValidationProblem(
                                pointer: at,
                                message: "starts \(walk.deepest) levels of child jobs; at most \(ChildJobs.maxDepth)"
                            )
                        )
                    }
                    return (walk.reads, problems)
                }
            }
        }
        return done.map { result in
            let problems = result.problems
            guard problems.isEmpty else {
                throw HTTPProblem(
                    .unprocessableEntity,
                    code: code,
                    detail: problems.count == 1
                        ? "a job node does not start: \(problems[0])"
                        : "job nodes do not start (\(problems.count) problems)",
                    errors: problems
                )
            }
        }
    }

    /// What a walk of the definitions below a `job` node found.
    struct Walk {
        var reads: Int
        /// The node's own definition does not start.
        var missing = false
        /// The chain that starts the definition being put again.
        var cycle: [String]?
        /// The most levels of child jobs below the node.
        var deepest = 0
    }

    /// Walks the definitions `stack` names, depth first (each version once): until one of them
    /// is `closing` (a cycle), or the node's own definition is missing, or nothing is left.
    private func walk(
        closing name: String?,
        _ stack: [(name: String, version: Int?, path: [String])],
        _ walk: Walk,
        visited: Set<String> = []
    ) -> Future<Walk> {
        var stack = stack
        var walk = walk
        guard let next = stack.popLast(), walk.reads < Self.maxCheckReads else { return Future(value: walk) }
        if next.name == name {
            walk.cycle = next.path
            return Future(value: walk)
        }
        let key = "\(next.name)@\(next.version ?? 0)"
        if visited.contains(key) { return self.walk(closing: name, stack, walk, visited: visited) }
        let read = next.version.map { self.store.storedDefinition(next.name, version: $0) } ?? self.latest(next.name)
        let rest = stack
        let sofar = walk
        return read.flatMap { stored in
            var stack = rest
            var walk = sofar
            walk.reads += 1
            guard let stored, stored.retiredAt == nil || next.version != nil else {
                // Below the node's own definition, a missing one fails only its own node, when
                // it runs; the node's own is this check's to refuse.
                if next.path.count == 1 { walk.missing = true }
                return self.walk(closing: name, next.path.count == 1 ? [] : stack, walk, visited: visited.union([key]))
            }
            walk.deepest = max(walk.deepest, next.path.count)
            for start in Self.childStarts(stored.body["graph"] ?? .null, at: "").reversed() {
                stack.append((start.name, start.version, next.path + [start.name]))
            }
            return self.walk(closing: name, stack, walk, visited: visited.union([key]))
        }
    }

    func retire(_ name: String) -> Future<Bool> {
        self.store.retireDefinition(name, at: self.clock.now()).map { retired in
            self.remember(name, nil)
            return retired
        }
    }

    /// The latest version of `name` that is not retired.
    func latest(_ name: String) -> Future<StoredDefinition?> {
        if !self.store.definitionsAreShared, let known = self.latest.withLock({ $0[name] }) {
            return Future(value: known)
        }
        return self.store.storedDefinition(name, version: nil).map { stored in
            self.remember(name, stored)
            return stored
        }
    }

    private func remember(_ name: String, _ stored: StoredDefinition?) {
        guard !self.store.definitionsAreShared else { return }
        self.latest.withLock { latest in
            if latest.count >= Self.maxParsed, latest[name] == nil { latest.removeAll(keepingCapacity: true) }
            latest[name] = .some(stored)
        }
    }

    func version(_ name: String, _ version: Int) -> Future<StoredDefinition?> {
        self.store.storedDefinition(name, version: version)
    }

    func list(limit: Int, after: String?) -> Future<[StoredDefinition]> {
        self.store.storedDefinitions(limit: limit, after: after)
    }

    func versions(_ name: String, limit: Int, before: Int?) -> Future<[StoredDefinition]> {
        self.store.storedDefinitionVersions(name, limit: limit, before: before)
    }

    // MARK: - Starting a job

    /// Whether `json` is a start request naming a definition (`{"definition": "name", …}`).
    static func isStart(_ json: JSONValue) -> Bool {
        if case .object(let object) = json, let definition = object["definition"], !definition.isNull { return true }
        return false
    }

    /// The job document that the start request `json` makes (see `WorkflowDefinition.jobDocument`);
    /// fails with a `422` that points at what is wrong: an unknown or retired name, a version that
    /// does not exist, an input that breaks the schema.
    func jobDocument(_ json: JSONValue) -> Future<JSONValue> {
        guard case .object(let request) = json else { return Future(error: Self.startInvalid("", "must be an object")) }
        guard case .string(let name)? = request["definition"], DefinitionRef.isValidName(name) else {
            return Future(error: Self.startInvalid("/definition", "must be the name of a definition"))
        }
        if request["graph"] != nil {
            return Future(error: Self.startInvalid("/graph", "give graph or definition, not both"))
        }
        let pinned: Int?
        if let value = request["version"], !value.isNull {
            guard let version = value.intValue, version >= 1 else {
                return Future(error: Self.startInvalid("/version", "must be a version number: an integer from 1"))
            }
            pinned = version
        } else {
            pinned = nil
        }
        let read = pinned.map { self.store.storedDefinition(name, version: $0) } ?? self.latest(name)
        return read.map { stored -> JSONValue in
            guard let stored else {
                if let pinned {
                    throw Self.startInvalid(
                        "/version",
                        "definition \"\(name)\" has no version \(pinned)",
                        code: "definition.unknown"
                    )
                }
                throw Self.startInvalid("/definition", "no definition named \"\(name)\"", code: "definition.unknown")
            }
            if stored.retiredAt != nil {
                throw Self.startInvalid(
                    "/definition",
                    "definition \"\(name)\" is retired",
                    code: "definition.unknown"
                )
            }
            let ref = DefinitionRef(name: name, version: stored.version)
            return try self.definition(ref, stored).jobDocument(request, ref: ref)
        }
    }

    /// The job the start request `json` makes, decoded, with its document: what a schedule's
    /// fire submits. Fails with the `422` of `jobDocument`, or one for a job that does not decode.
    func job(_ json: JSONValue) -> Future<(JobSpec, [UInt8])> {
        self.jobDocument(json).map { document in
            do throws(ValidationError) {
                return (try self.decoder.decodeJob(document), document.jsonBytes)
            } catch {
                throw HTTPProblem(
                    .unprocessableEntity,
                    code: "graph.invalid",
                    detail: "the job is invalid: \(error.problems.first.map { "\($0)" } ?? "")",
                    errors: error.problems
                )
            }
        }
    }

    /// Version `ref` parsed, from the cache or from `stored`.
    private func definition(_ ref: DefinitionRef, _ stored: StoredDefinition) -> WorkflowDefinition {
        if let cached = self.parsed.withLock({ $0[ref] }) { return cached }
        let definition = WorkflowDefinition(stored: stored.body)
        self.parsed.withLock { cache in
            if cache.count >= Self.maxParsed { cache.removeAll(keepingCapacity: true) }
            cache[ref] = definition
        }
        return definition
    }

    /// A start request's `422`: `definition.unknown` for a name or version the store does not
    /// have (or a retired name), `graph.invalid` for a request that is malformed.
    static func startInvalid(_ pointer: String, _ message: String, code: String = "graph.invalid") -> HTTPProblem {
        let problem = ValidationProblem(pointer: pointer, message: message)
        return HTTPProblem(
            .unprocessableEntity,
            code: code,
            detail: "the job is invalid: \(problem)",
            errors: [problem]
        )
    }
}
