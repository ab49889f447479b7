import Foundation
import NIOHTTP1
import TaskCore
import TaskGraph
import TaskSchedule
import TaskWorkerProtocol

/// A cron schedule as its client defines it (SPEC §8), checked field by field: every problem with
/// its pointer, in one `422`.
struct ScheduleDefinition: Sendable, Equatable {
    /// What a fire does while the previous run is unfinished.
    enum Overlap: String, Sendable, CaseIterable {
        /// Nothing: the fire is skipped (recorded as handled).
        case skip
        /// A new run starts beside the previous one.
        case allow
        /// The previous run is cancelled, then a new one starts.
        case cancelPrevious
    }

    /// What happens to fire times missed while the server was down.
    enum CatchUp: String, Sendable, CaseIterable {
        /// They are dropped; the schedule goes on from now.
        case none
        /// The latest of them fires once, at once.
        case last
        /// Each fires, oldest first (at most `Scheduler.maxCatchUp`).
        case all
    }

    static let fields: Set<String> = ["id", "cron", "timezone", "job", "overlap", "catchUp", "paused"]
    static let maxIDLength = 100

    var id: String
    var cron: String
    var timezone: String
    /// The job each fire submits, as given.
    var job: JSONValue
    var overlap: Overlap
    var catchUp: CatchUp
    var paused: Bool
    var schedule: CronSchedule
    /// The job as each fire submits it: `job` with the label `schedule` = `id` (decoded once);
    /// nil when `job` names a definition, which each fire resolves anew (`Definitions`).
    var spec: JobSpec?
    /// The document of that job (what a restart rebuilds a run from), or the start request of
    /// the definition it names.
    var document: [UInt8]
    /// The labelled job: the start request of a definition (`spec` nil).
    var labelledJob: JSONValue

    static func == (lhs: Self, rhs: Self) -> Bool { lhs.json == rhs.json }

    /// Reads a definition from a request body (`id`: the path's, or nil to take the body's or
    /// make one).
    init(_ body: JSONValue, id fixedID: String?, decoder: JobDecoder) throws(HTTPProblem) {
        var reader = BodyReader(body, allowed: Self.fields)
        var id = fixedID ?? JobID.make()
        if let given = reader.object["id"] {
            if let fixedID {
                if given != .string(fixedID) { reader.report("id", "is the schedule's; it cannot change") }
            } else if case .string(let text) = given, Self.reservedIDs.contains(text) {
                reader.report(
                    "id",
                    "\"\(text)\" is reserved (POST /v1/schedules/\(text) is another route); choose another id"
                )
            } else if case .string(let text) = given, Self.isValidID(text) {
                id = text
            } else {
                reader.report(
                    "id",
                    "must be 1 to \(Self.maxIDLength) letters, digits, '.', '_' or '-', starting with a letter or digit"
                )
            }
        }
        let expression = reader.cron("cron")
        let (timezone, zone) = reader.timeZone("timezone")
        var overlap = Overlap.skip
        switch reader.object["overlap"] {
        case nil: break
        case .string(let text) where Overlap(rawValue: text) != nil: overlap = Overlap(rawValue: text)!
        default: reader.report("overlap", "must be one of: skip, allow, cancelPrevious")
        }
        var catchUp = CatchUp.last
        switch reader.object["catchUp"] {
        case nil: break
        case .string(let text) where CatchUp(rawValue: text) != nil: catchUp = CatchUp(rawValue: text)!
        default: reader.report("catchUp", "must be one of: none, last, all")
        }
        let paused = reader.boolean("paused", default: false)
        var job: JSONValue = .null
        var spec: JobSpec?
        var document: [UInt8] = []
        var labelledJob: JSONValue = .null
        switch reader.object["job"] {
        case nil:
            reader.report("job", "is required: the job each fire submits")
        case .object(var object):
            job = .object(object)
            if object["runAt"].map({ !$0.isNull }) == true {
                reader.report("job", "runAt is not for a scheduled job: the schedule says when it runs")
                break
            }
            var labels: JSONObject = [:]
            if case .object(let given)? = object["labels"] { labels = given }
            labels["schedule"] = .string(id)
            object["labels"] = .object(labels)
            let labelled = JSONValue.object(object)
            labelledJob = labelled
            if Definitions.isStart(labelled) {
                // Resolved by each fire (the latest version then, or the pinned one); the API
                // checks that it starts now (`SchedulesAPI`).
                if case .string(let name)? = object["definition"], DefinitionRef.isValidName(name) {
                    if object["graph"] != nil { reader.report("job", "give graph or definition, not both") }
                } else {
                    reader.report("job", "definition must be the name of a definition")
                }
                document = labelled.jsonBytes
                break
            }
            do throws(ValidationError) {
                spec = try decoder.decodeJob(labelled)
                document = labelled.jsonBytes
            } catch {
                for problem in error.problems {
                    reader.problems.append(
                        ValidationProblem(pointer: reader.pointer("job") + problem.pointer, message: problem.message)
                    )
                }
            }
        default:
            reader.report("job", "must be an object: a job, as POST /v1/jobs takes it")
        }
        try reader.check("schedule")
        self.id = id
        self.cron = reader.object["cron"]?.stringValue ?? ""
        self.timezone = timezone
        self.job = job
        self.overlap = overlap
        self.catchUp = catchUp
        self.paused = paused
        self.schedule = CronSchedule(expression!, timeZone: zone)
        self.spec = spec
        self.document = document
        self.labelledJob = labelledJob
    }

    /// Ids that name a route under `/v1/schedules/` (`preview`): a schedule under one could be
    /// created but never read, changed or deleted.
    static let reservedIDs: Set<String> = ["preview"]

    static func isValidID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard (1...Self.maxIDLength).contains(bytes.count) else { return false }
        func ok(_ byte: UInt8, first: Bool) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            case UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"): return !first
            default: return false
            }
        }
        return bytes.enumerated().allSatisfy { ok($1, first: $0 == 0) }
    }

    /// The definition as stored and shown (without what the scheduler adds).
    var json: JSONValue {
        [
            "id": .string(self.id), "cron": .string(self.cron), "timezone": .string(self.timezone), "job": self.job,
            "overlap": .string(self.overlap.rawValue), "catchUp": .string(self.catchUp.rawValue),
            "paused": .bool(self.paused),
        ]
    }

    /// The definition with `patch`'s fields over it (`PATCH`), checked again as a whole.
    func patched(_ patch: JSONValue, decoder: JobDecoder) throws(HTTPProblem) -> ScheduleDefinition {
        guard case .object(let changes) = patch, case .object(var merged) = self.json else {
            throw HTTPProblem(
                .unprocessableEntity,
                code: "request.invalid",
                detail: "the schedule is invalid: a patch must be an object",
                errors: [ValidationProblem(pointer: "", message: "must be an object")]
            )
        }
        for (key, value) in changes { merged[key] = value }
        return try ScheduleDefinition(.object(merged), id: self.id, decoder: decoder)
    }
}

extension BodyReader {
    /// A five-field cron expression or a shorthand at `key` (required).
    mutating func cron(_ key: String) -> CronExpression? {
        guard self.isObject else { return nil }
        switch self.object[key] {
        case .string(let text) where text.utf8.count > 1000:
            self.report(key, "must be at most 1000 characters")
        case .string(let text):
            do throws(CronError) {
                return try CronExpression(parsing: text)
            } catch {
                self.report(key, error.description)
            }
        case nil: self.report(key, "is required: a five-field cron expression or a shorthand like @daily")
        default: self.report(key, "must be a string")
        }
        return nil
    }

    /// An IANA time zone name at `key` (default `UTC`).
    mutating func timeZone(_ key: String) -> (name: String, zone: TimeZone) {
        let utc = ("UTC", TimeZone(identifier: "UTC")!)
        switch self.object[key] {
        case .string(let name) where name.utf8.count > 100:
            self.report(key, "must be at most 100 characters")
        case .string(let name):
            do throws(CronError) {
                return (name, try CronSchedule.timeZone(named: name))
            } catch {
                self.report(key, error.description)
            }
        case nil: break
        default: self.report(key, "must be a string: an IANA time zone name like \"Europe/Paris\"")
        }
        return utc
    }
}
