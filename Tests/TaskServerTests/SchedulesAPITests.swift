import TaskSchedule
import TestSupport
import Testing

@testable import TaskGraph
@testable import TaskServer

/// `POST /v1/schedules/preview` (SPEC §8): when an expression fires, on the rules schedules use.
struct SchedulesAPITests {
    @Test func aPreviewListsTheNextFiresInUTCWholeSeconds() async throws {
        try await withServer { server in
            // Paris springs forward at 02:00 on 29 March 2026: 02:30 does not exist that day, and a
            // fixed-time expression fires at the first instant after the gap (03:00 CEST).
            let paris = try await server.post(
                "/v1/schedules/preview",
                json: ["cron": "30 2 * * *", "timezone": "Europe/Paris", "from": "2026-03-28T12:00:00Z", "count": 3]
            )
            #expect(paris.status == 200, "\(paris)")
            #expect(
                paris.json == ["times": ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"]]
            )
            // Strictly after `from`; an offset in `from` is honoured.
            let hourly = try await server.post(
                "/v1/schedules/preview",
                json: ["cron": "@hourly", "from": "2026-11-27T05:00:00+02:00", "count": 2]
            )
            #expect(hourly.json == ["times": ["2026-11-27T04:00:00Z", "2026-11-27T05:00:00Z"]])
            // New York falls back on 1 November 2026: an hourly job fires at both 01:00s.
            let fallBack = try await server.post(
                "/v1/schedules/preview",
                json: ["cron": "0 * * * *", "timezone": "America/New_York", "from": "2026-11-01T04:30:00Z", "count": 3]
            )
            #expect(
                fallBack.json == ["times": ["2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"]]
            )
        }
    }

    /// `preview` names the route beside `/v1/schedules/{id}`: a schedule under it could be
    /// created but never read, changed or deleted (it would fire forever) — refused (#43).
    @Test func theIdPreviewIsReserved() async throws {
        try await withServer { server in
            let created = try await server.post(
                "/v1/schedules",
                json: ["id": "preview", "cron": "* * * * *", "job": Jobs.value(1)]
            )
            #expect(created.status == 422, "\(created)")
            #expect(created.json["errors"]?.arrayValue?.first?["pointer"] == "/id", "\(created)")
            #expect(try await server.get("/v1/schedules").json["items"] == [])
        }
    }

    @Test func withoutFromAndCountItGivesFiveFiresFromNow() async throws {
        try await withServer { server in
            let before = Timestamp.now()
            let response = try await server.post("/v1/schedules/preview", json: ["cron": "*/5 * * * *"])
            let times = response.json["times"]?.arrayValue?.compactMap { $0.stringValue } ?? []
            #expect(times.count == 5)
            let stamps = times.compactMap { Timestamp(rfc3339: $0) }
            #expect(stamps.count == 5 && stamps == stamps.sorted() && Set(stamps).count == 5)
            #expect(stamps.allSatisfy { $0.milliseconds % 300_000 == 0 && $0 > before })
            #expect(times.allSatisfy { $0.count == 20 && $0.hasSuffix("Z") }, "whole seconds: \(times)")
        }
    }

    @Test func badFieldsAreAll422WithTheirPointers() async throws {
        try await withServer { server in
            expectProblem(
                try await server.post(
                    "/v1/schedules/preview",
                    json: ["cron": "61 * * * *", "timezone": "Mars/Olympus", "from": "yesterday", "count": 101, "x": 1]
                ),
                422,
                "request.invalid",
                errors: [
                    ["pointer": "/x", "message": "unknown field \"x\"; expected one of: count, cron, from, timezone"],
                    ["pointer": "/cron", "message": "minute \"61\" is out of range 0–59"],
                    [
                        "pointer": "/timezone",
                        "message": .string(Self.message(timeZone: "Mars/Olympus")),
                    ],
                    ["pointer": "/from", "message": "must be an RFC 3339 date-time like \"2026-03-29T00:00:00Z\""],
                    ["pointer": "/count", "message": "must be an integer from 1 to 100"],
                ]
            )
            for (body, pointer) in [
                (JSONValue.object([:]), "/cron"), (["cron": 5], "/cron"), (["cron": "0 0 30 2 *"], "/cron"),
                (["cron": "@reboot"], "/cron"), (["cron": "* * * * * *"], "/cron"), (["cron": "0 0 L * *"], "/cron"),
                (["cron": "@daily", "timezone": 1], "/timezone"),
                (["cron": "@daily", "timezone": "GMT+2"], "/timezone"),
                (["cron": "@daily", "from": "2026-02-30T00:00:00Z"], "/from"),
                (["cron": "@daily", "count": 0], "/count"),
                (["cron": "@daily", "count": "5"], "/count"), ([1, 2], ""),
            ] {
                let response = try await server.post("/v1/schedules/preview", json: body)
                expectProblem(response, 422, "request.invalid")
                #expect(
                    response.json["errors"]?.arrayValue?.first?["pointer"] == .string(pointer),
                    "\(body): \(response)"
                )
            }
            expectProblem(try await server.post("/v1/schedules/preview", text: "{"), 400, "json.malformed")
        }
    }

    /// What `CronSchedule.timeZone(named:)` says of an unknown name (the engine's wording).
    static func message(timeZone name: String) -> String {
        do throws(CronError) {
            _ = try CronSchedule.timeZone(named: name)
            return ""
        } catch {
            return error.description
        }
    }
}
