import NIOHTTP1
import TaskCore
import TaskGraph
import TaskWorkerProtocol

/// A named workflow (issue #45) as `PUT /v1/definitions/{name}` defines it, checked: its graph, an
/// optional input schema, defaults for the jobs it starts, and a description.
///
/// A job started from a definition is an ordinary job: its document is the start request with the
/// version's graph and defaults filled in and `definition: {name, version}` added
/// (`jobDocument`), so everything after — restarts, redrive, takeover — runs the version it started
/// with, whatever the definition became since.
struct WorkflowDefinition: Sendable {
    static let fields: Set<String> = ["graph", "inputSchema", "defaults", "description"]
    /// The job fields a definition may give defaults for; a start request's own value wins
    /// (`labels`: key by key).
    static let defaultFields: Set<String> = ["priority", "concurrency", "webhook", "labels", "timeoutMs"]
    static let maxDescriptionCharacters = 2000

    /// The definition as stored: `graph`, `inputSchema`?, `defaults`?, `description`?, in that
    /// order (the members of each as given).
    let body: JSONValue
    let schema: InputSchema?

    /// Reads and checks a request body: every problem with its pointer, in one `422`.
    init(_ json: JSONValue, decoder: JobDecoder) throws(HTTPProblem) {
        var reader = BodyReader(json, allowed: Self.fields)
        var body = JSONObject()
        var schema: InputSchema?
        var job = JSONObject()
        if let graph = reader.object["graph"], !graph.isNull {
            body["graph"] = graph
            job["graph"] = graph
        } else if reader.isObject {
            reader.report("graph", "required")
        }
        if let value = reader.object["inputSchema"], !value.isNull {
            schema = InputSchema.parse(value, at: "/inputSchema", problems: &reader.problems)
            body["inputSchema"] = value
        }
        var defaultKeys: [String] = []
        if let value = reader.object["defaults"], !value.isNull {
            var defaults = BodyReader(value, at: "/defaults", allowed: Self.defaultFields)
            reader.problems += defaults.problems
            defaults.problems = []
            for member in defaults.object.members where Self.defaultFields.contains(member.key) {
                job[member.key] = member.value
                defaultKeys.append(member.key)
            }
            body["defaults"] = value
        }
        if let value = reader.object["description"], !value.isNull {
            if case .string(let text) = value, text.unicodeScalars.count <= Self.maxDescriptionCharacters {
                body["description"] = value
            } else {
                reader.report("description", "must be a string of at most \(Self.maxDescriptionCharacters) characters")
            }
        }
        // The graph and the defaults are checked as the job they make would be (input unknown).
        if job["graph"] != nil {
            do {
                _ = try decoder.decodeJob(.object(job))
            } catch {
                for problem in error.problems {
                    var pointer = problem.pointer
                    if defaultKeys.contains(where: { pointer == "/" + $0 || pointer.hasPrefix("/" + $0 + "/") }) {
                        pointer = "/defaults" + pointer
                    }
                    reader.problems.append(ValidationProblem(pointer: pointer, message: problem.message))
                }
            }
        }
        if !reader.problems.isEmpty { throw Self.invalid(reader.problems) }
        self.body = .object(body)
        self.schema = schema
    }

    /// A version read back from the store (checked when it was stored).
    init(stored body: JSONValue) {
        var ignored: [ValidationProblem] = []
        self.body = body
        self.schema = body["inputSchema"].map { InputSchema.parse($0, at: "/inputSchema", problems: &ignored) }
    }

    static func invalid(_ problems: [ValidationProblem]) -> HTTPProblem {
        HTTPProblem(
            .unprocessableEntity,
            code: "definition.invalid",
            detail: problems.count == 1
                ? "the definition is invalid: \(problems[0])"
                : "the definition is invalid (\(problems.count) problems)",
            errors: problems
        )
    }

    // MARK: - Starting a job

    /// The fields of a start request besides the job fields it may set.
    static let startFields: Set<String> = ["definition", "version"]

    /// The document of the job that `request` (a `POST /v1/jobs` body naming this definition)
    /// starts from version `ref`: the request's fields over the definition's defaults, its graph,
    /// and `definition`. Throws a `422` when the input breaks the schema (pointers under `/input`).
    func jobDocument(_ request: JSONObject, ref: DefinitionRef) throws(HTTPProblem) -> JSONValue {
        if let schema {
            let problems = schema.problems(request["input"] ?? .null, at: "/input")
            guard problems.isEmpty else {
                throw HTTPProblem(
                    .unprocessableEntity,
                    code: "input.invalid",
                    detail: problems.count == 1
                        ? "the job is invalid: \(problems[0])" : "the job is invalid (\(problems.count) problems)",
                    errors: problems
                )
            }
        }
        var document = JSONObject()
        if case .object(let defaults)? = self.body["defaults"] {
            for member in defaults.members { document[member.key] = member.value }
        }
        for member in request.members where !Self.startFields.contains(member.key) {
            if member.key == "labels", case .object(var labels)? = document["labels"],
                case .object(let own) = member.value
            {
                for label in own.members { labels[label.key] = label.value }
                document["labels"] = .object(labels)
            } else {
                document[member.key] = member.value
            }
        }
        document["graph"] = self.body["graph"]
        document["definition"] = ref.json
        return .object(document)
    }

    // MARK: - Showing one

    /// A stored version as the API shows it; a webhook secret among the defaults is left out (it
    /// is never shown: `hasSecret` says there is one).
    static func representation(_ stored: StoredDefinition) -> JSONValue {
        var object = JSONObject()
        object["name"] = .string(stored.name)
        object["version"] = .int(stored.version)
        object["latestVersion"] = .int(stored.latest)
        if case .object(let body) = stored.body {
            for member in body.members {
                if member.key == "defaults", case .object(var defaults) = member.value,
                    case .object(var webhook)? = defaults["webhook"], webhook["secret"] != nil
                {
                    webhook["secret"] = nil
                    webhook["hasSecret"] = .bool(true)
                    defaults["webhook"] = .object(webhook)
                    object["defaults"] = .object(defaults)
                } else {
                    object[member.key] = member.value
                }
            }
        }
        object["createdAt"] = .string(stored.createdAt.rfc3339)
        if let retiredAt = stored.retiredAt { object["retiredAt"] = .string(retiredAt.rfc3339) }
        return .object(object)
    }
}
