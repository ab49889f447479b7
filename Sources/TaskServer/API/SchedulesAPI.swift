import Foundation
import NIOHTTP1
import TaskCore
import TaskGraph
import TaskSchedule
import TaskWorkerProtocol

/// `/v1/schedules` (SPEC §8). So far the preview: when an expression would fire, by the same rules
/// (and the same code) that will decide when a schedule fires.
struct SchedulesAPI: Sendable {
    let app: Application

    func register(in router: inout Router) {
        router.add(.POST, "/v1/schedules/preview", self.preview)
    }

    // MARK: preview

    /// `{"cron", "timezone"?, "from"?, "count"?}` → `{"times": [...]}`: the next `count` fire
    /// instants strictly after `from`.
    @Sendable func preview(_ request: Request) throws -> Future<Response> {
        let preview = try SchedulePreview(self.app.jsonBody(request), now: self.app.clock.now())
        let times = preview.schedule.nextFires(after: preview.from, count: preview.count)
        return Future(value: .json(["times": .array(times.map { .string(SchedulePreview.format($0)) })]))
    }
}

/// A preview request, checked field by field (every problem with its pointer, in one `422`).
struct SchedulePreview: Sendable {
    static let maxCount = 100

    var schedule: CronSchedule
    var from: Date
    var count: Int

    init(_ body: JSONValue, now: Timestamp) throws(HTTPProblem) {
        var reader = BodyReader(body, allowed: ["cron", "timezone", "from", "count"])
        var expression: CronExpression?
        if reader.isObject {
            switch reader.object["cron"] {
            case .string(let text) where text.utf8.count > 1000:
                reader.report("cron", "must be at most 1000 characters")
            case .string(let text):
                do throws(CronError) {
                    expression = try CronExpression(parsing: text)
                } catch {
                    reader.report("cron", error.description)
                }
            case nil: reader.report("cron", "is required: a five-field cron expression or a shorthand like @daily")
            default: reader.report("cron", "must be a string")
            }
        }
        var timeZone = TimeZone(identifier: "UTC")!
        switch reader.object["timezone"] {
        case .string(let name) where name.utf8.count > 100:
            reader.report("timezone", "must be at most 100 characters")
        case .string(let name):
            do throws(CronError) {
                timeZone = try CronSchedule.timeZone(named: name)
            } catch {
                reader.report("timezone", error.description)
            }
        case nil: break
        default: reader.report("timezone", "must be a string: an IANA time zone name like \"Europe/Paris\"")
        }
        var from = Date(timeIntervalSince1970: Double(now.milliseconds) / 1000)
        switch reader.object["from"] {
        case .string(let text):
            if let timestamp = Timestamp(rfc3339: text) {
                from = Date(timeIntervalSince1970: Double(timestamp.milliseconds) / 1000)
            } else {
                reader.report("from", "must be an RFC 3339 date-time like \"2026-03-29T00:00:00Z\"")
            }
        case nil: break
        default: reader.report("from", "must be a string: an RFC 3339 date-time")
        }
        self.count = reader.integer("count", in: 1...Self.maxCount, default: 5)
        try reader.check("preview")
        self.schedule = CronSchedule(expression!, timeZone: timeZone)
        self.from = from
    }

    /// A fire time as SPEC §8 shows it: UTC, whole seconds, `Z`.
    static func format(_ date: Date) -> String {
        let seconds = Int64((date.timeIntervalSince1970).rounded(.down))
        return String(Timestamp(milliseconds: seconds * 1000).rfc3339.prefix(19)) + "Z"
    }
}
