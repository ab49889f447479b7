import Testing

@testable import TaskGraph
@testable import TaskServer

// The job's `webhook` (SPEC §4) as TaskGraph's decoder reads it through `WebhookField`. (These tests
// were JobDecoderTests' until the webhook moved out of TaskGraph; they assert the same.)

private let decoder = JobDecoder(actions: .builtins, executors: ["default"], fields: [WebhookField()])

/// `{"type": "task", "action": "value"}`.
private func task() -> JSONValue { ["type": "task", "action": "value"] }

/// A job around `graph`.
private func job(_ graph: JSONValue, _ extra: JSONObject = [:]) -> JSONValue {
    var object: JSONObject = ["graph": graph]
    for member in extra { object[member.key] = member.value }
    return .object(object)
}

/// The problems `decoder` reports for `json`, as `pointer: message` lines; empty when it is valid.
private func problems(_ json: JSONValue) -> [String] {
    do {
        _ = try decoder.decodeJob(json)
        return []
    } catch {
        return error.problems.map { "\($0.pointer): \($0.message)" }
    }
}

/// A named document and the problems expected for it.
struct WebhookProblemCase: Sendable, CustomTestStringConvertible {
    let name: String
    let json: JSONValue
    let expected: [String]

    init(_ name: String, _ json: JSONValue, _ expected: [String]) {
        self.name = name
        self.json = json
        self.expected = expected
    }

    var testDescription: String { self.name }
}

struct WebhookFieldTests {
    @Test
    func aFloodOfWebhookProblemsIsCappedAndCountedLikeTheDecodersOwn() {
        // 300 unknown event types: 100 rendered, the rest only counted, as for any other field
        // (rendering all of a 1 MiB body's worth would format tens of megabytes per request).
        let events = JSONValue.array(Array(repeating: "job.nope", count: 300))
        let found = problems(job(task(), ["webhook": ["url": "http://a", "events": events]]))
        #expect(found.count == 101)
        #expect(found.first?.hasPrefix("/webhook/events/0: unknown event type") == true)
        #expect(found.last == ": … and 200 more problems")
    }

    @Test
    func aJobWithAWebhookKeepsItOnTheSpec() throws {
        let json: JSONValue = [
            "name": "import-comments",
            "graph": task(),
            "labels": ["team": "data"],
            "webhook": ["url": "https://hooks.example/x", "secret": "s3cret", "events": ["job.*"]],
        ]
        let spec = try decoder.decodeJob(json)
        #expect(spec.webhook == WebhookSpec(url: "https://hooks.example/x", secret: "s3cret", events: ["job.*"]))
        #expect(spec.labels == ["team": "data"])
        #expect(try decoder.decodeJob(job(task())).webhook == nil)
    }

    @Test
    func nullIsTheWrongTypeForAWebhook() {
        #expect(problems(job(task(), ["webhook": nil])) == ["/webhook: must be an object"])
    }

    @Test
    func webhookProblemsComeAfterTheLabelsAndBeforeTheGraph() {
        let json: JSONValue = [
            "name": 1,
            "labels": ["ok": "x", "bad key": "y"],
            "graph": ["type": "task", "action": "nope"],
            "webhook": ["url": "ftp://x"],
            "extra": true,
        ]
        #expect(
            problems(json) == [
                #"/extra: unknown field "extra""#,
                "/name: must be a string",
                #"/labels/bad key: invalid label name "bad key": use 1 to 63 letters, digits, '_', '.' or '-'"#,
                "/webhook/url: must be an absolute http or https URL with a host",
                #"/graph/action: unknown action "nope"; known: await, delay, fail, value"#,
            ]
        )
    }

    @Test
    func aMisspeltWebhookFieldIsSuggested() {
        #expect(
            problems(job(task(), ["webhok": ["url": "https://h.example"]])) == [
                #"/webhok: unknown field "webhok"; did you mean "webhook"?"#
            ]
        )
    }

    @Test
    func aWebhookDecodesEveryField() throws {
        let webhook: JSONValue = [
            "url": "https://hooks.example:8443/x?y=1",
            "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "events": ["job.*", "task.failed", "*"],
            "headers": ["X-Team": "data", "Authorization": "Bearer t"],
            "retry": ["maxAttempts": 3, "delayMs": 100, "backoff": 1.5, "maxDelayMs": 1000, "jitter": false],
        ]
        let spec = try decoder.decodeJob(job(task(), ["webhook": webhook]))
        #expect(
            spec.webhook
                == WebhookSpec(
                    url: "https://hooks.example:8443/x?y=1",
                    secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                    events: ["job.*", "task.failed", "*"],
                    headers: ["X-Team": "data", "Authorization": "Bearer t"],
                    retry: RetrySpec(maxAttempts: 3, delayMs: 100, backoff: 1.5, maxDelayMs: 1000, jitter: false)
                )
        )
    }

    @Test
    func aWebhookWithOnlyAURLGetsTheDefaults() throws {
        let spec = try decoder.decodeJob(job(task(), ["webhook": ["url": "http://localhost:9000/hook"]]))
        #expect(spec.webhook == WebhookSpec(url: "http://localhost:9000/hook"))
        #expect(spec.webhook?.events == ["job.*"])
        #expect(
            spec.webhook?.retry == RetrySpec(maxAttempts: 8, delayMs: 500, backoff: 2, maxDelayMs: 60_000, jitter: true)
        )
    }

    static let validURLs = [
        "http://a", "https://example.com:8443/x?y#z", "http://[::1]:8080/", "HTTPS://Example.COM",
        "http://user:pw@host/p",
        "https://hooks.example/x", "http://10.0.0.1:65535",
    ]

    @Test(arguments: validURLs)
    func absoluteHTTPURLsWithAHostAreAccepted(url: String) throws {
        #expect(try decoder.decodeJob(job(task(), ["webhook": ["url": .string(url)]])).webhook?.url == url)
    }

    static let invalidURLs = [
        "", "example.com", "ftp://example.com", "http://", "http:///path", "http://host:0", "http://host:99999",
        "http://host:abc",
        "http://exa mple.com", "https://[::1", "/relative", "http:/x", "http://ho<st/", "mailto:a@b.c", "http://:80",
    ]

    @Test(arguments: invalidURLs)
    func otherURLsAreRejected(url: String) {
        #expect(
            problems(job(task(), ["webhook": ["url": .string(url)]])) == [
                "/webhook/url: must be an absolute http or https URL with a host"
            ]
        )
    }

    static let secretCases: [(String, Bool)] = [
        ("s3cret", true),
        (String(repeating: "x", count: 256), true),
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true),
        ("whsec_AQ==", true),
        ("whsec_AQ", true),
        ("whsec_" + String(repeating: "A", count: 84) + "AA==", true),  // 64 bytes
        ("whsec_" + String(repeating: "A", count: 88), false),  // 66 bytes
        ("whsec_", false),
        ("whsec_!!!!", false),
        ("whsec_A", false),
        ("whsec_AQ=", false),
        ("whsec_A=Q=", false),
    ]

    @Test(arguments: secretCases)
    func webhookSecretsAreStandardWebhooksBase64OrRawText(secret: String, valid: Bool) {
        let found = problems(job(task(), ["webhook": ["url": "https://h.example", "secret": .string(secret)]]))
        if valid {
            #expect(found == [])
        } else {
            #expect(
                found == [
                    #"/webhook/secret: a secret starting with "whsec_" must continue with base64 that decodes to 1 to 64 bytes"#
                ]
            )
        }
    }

    static let webhookProblemCases: [WebhookProblemCase] = [
        WebhookProblemCase(
            "the webhook is not an object",
            job(task(), ["webhook": "https://h.example"]),
            ["/webhook: must be an object"]
        ),
        WebhookProblemCase(
            "the url is missing",
            job(task(), ["webhook": ["events": ["job.*"]]]),
            ["/webhook/url: required"]
        ),
        WebhookProblemCase(
            "the url is not a string",
            job(task(), ["webhook": ["url": 1]]),
            ["/webhook/url: must be a string"]
        ),
        WebhookProblemCase(
            "the url is over 2048 characters",
            job(task(), ["webhook": ["url": .string("https://h.example/" + String(repeating: "a", count: 2040))]]),
            ["/webhook/url: must be at most 2048 characters"]
        ),
        WebhookProblemCase(
            "a misspelt webhook field",
            job(task(), ["webhook": ["url": "https://h.example", "secrets": "x"]]),
            [#"/webhook/secrets: unknown field "secrets"; did you mean "secret"?"#]
        ),
        WebhookProblemCase(
            "an empty raw secret",
            job(task(), ["webhook": ["url": "https://h.example", "secret": ""]]),
            ["/webhook/secret: must be a non-empty string of at most 256 characters"]
        ),
        WebhookProblemCase(
            "a raw secret over 256 characters",
            job(
                task(),
                ["webhook": ["url": "https://h.example", "secret": .string(String(repeating: "x", count: 257))]]
            ),
            ["/webhook/secret: must be a non-empty string of at most 256 characters"]
        ),
        WebhookProblemCase(
            "a numeric secret",
            job(task(), ["webhook": ["url": "https://h.example", "secret": 5]]),
            ["/webhook/secret: must be a string"]
        ),
        WebhookProblemCase(
            "no events",
            job(task(), ["webhook": ["url": "https://h.example", "events": []]]),
            ["/webhook/events: must not be empty"]
        ),
        WebhookProblemCase(
            "events that are not an array",
            job(task(), ["webhook": ["url": "https://h.example", "events": "job.*"]]),
            ["/webhook/events: must be an array of event types"]
        ),
        WebhookProblemCase(
            "unknown events",
            job(
                task(),
                ["webhook": ["url": "https://h.example", "events": ["job.finished", "jbo.*", 3, "job.*.x", "job*s"]]]
            ),
            [
                #"/webhook/events/0: unknown event type "job.finished"; expected one of job.created, job.started, job.succeeded, job.failed, job.cancelled, task.started, task.succeeded, task.failed, task.cancelled, task.skipped, task.retrying, or a pattern such as "job.*""#,
                #"/webhook/events/1: unknown event type "jbo.*"; expected one of job.created, job.started, job.succeeded, job.failed, job.cancelled, task.started, task.succeeded, task.failed, task.cancelled, task.skipped, task.retrying, or a pattern such as "job.*""#,
                "/webhook/events/2: must be a string",
                #"/webhook/events/3: unknown event type "job.*.x"; expected one of job.created, job.started, job.succeeded, job.failed, job.cancelled, task.started, task.succeeded, task.failed, task.cancelled, task.skipped, task.retrying, or a pattern such as "job.*""#,
                #"/webhook/events/4: unknown event type "job*s"; expected one of job.created, job.started, job.succeeded, job.failed, job.cancelled, task.started, task.succeeded, task.failed, task.cancelled, task.skipped, task.retrying, or a pattern such as "job.*""#,
            ]
        ),
        WebhookProblemCase(
            "headers that are not an object",
            job(task(), ["webhook": ["url": "https://h.example", "headers": ["X-A"]]]),
            ["/webhook/headers: must be an object"]
        ),
        WebhookProblemCase(
            "headers the server sets",
            job(
                task(),
                [
                    "webhook": [
                        "url": "https://h.example",
                        "headers": [
                            "Content-Type": "text/plain", "WEBHOOK-ID": "1", "host": "x", "Webhook-Signature": "v1,x",
                            "webhook-timestamp": "1", "Content-Length": "3",
                        ],
                    ]
                ]
            ),
            [
                #"/webhook/headers/Content-Type: header "Content-Type" is set by the server and cannot be overridden"#,
                #"/webhook/headers/WEBHOOK-ID: header "WEBHOOK-ID" is set by the server and cannot be overridden"#,
                #"/webhook/headers/host: header "host" is set by the server and cannot be overridden"#,
                #"/webhook/headers/Webhook-Signature: header "Webhook-Signature" is set by the server and cannot be overridden"#,
                #"/webhook/headers/webhook-timestamp: header "webhook-timestamp" is set by the server and cannot be overridden"#,
                #"/webhook/headers/Content-Length: header "Content-Length" is set by the server and cannot be overridden"#,
            ]
        ),
        WebhookProblemCase(
            "header names that are not tokens",
            job(task(), ["webhook": ["url": "https://h.example", "headers": ["X Team": "a", "": "b", "a/b": "c"]]]),
            [
                #"/webhook/headers/X Team: invalid header name "X Team": use letters, digits and !#$%&'*+-.^_`|~"#,
                #"/webhook/headers/: invalid header name "": use letters, digits and !#$%&'*+-.^_`|~"#,
                #"/webhook/headers/a~1b: invalid header name "a/b": use letters, digits and !#$%&'*+-.^_`|~"#,
            ]
        ),
        WebhookProblemCase(
            "header values with line breaks or not strings",
            job(
                task(),
                ["webhook": ["url": "https://h.example", "headers": ["X-A": "a\r\nX-B: b", "X-C": 1, "X-D": "a\nb"]]]
            ),
            [
                "/webhook/headers/X-A: must not contain CR, LF or NUL", "/webhook/headers/X-C: must be a string",
                "/webhook/headers/X-D: must not contain CR, LF or NUL",
            ]
        ),
        WebhookProblemCase(
            "headers that differ only in case",
            job(task(), ["webhook": ["url": "https://h.example", "headers": ["X-Team": "a", "x-team": "b"]]]),
            [
                #"/webhook/headers/x-team: duplicate header "x-team" (header names are case-insensitive; first given as "X-Team")"#
            ]
        ),
        WebhookProblemCase(
            "a retry that is not an object",
            job(task(), ["webhook": ["url": "https://h.example", "retry": true]]),
            ["/webhook/retry: must be an object"]
        ),
        WebhookProblemCase(
            "webhook retry values out of range",
            job(
                task(),
                [
                    "webhook": [
                        "url": "https://h.example",
                        "retry": [
                            "maxAttempts": 101, "delayMs": 3_600_001, "backoff": 0, "maxDelayMs": 86_400_001,
                            "jitter": 1,
                        ],
                    ]
                ]
            ),
            [
                "/webhook/retry/maxAttempts: must be an integer from 1 to 100",
                "/webhook/retry/delayMs: must be an integer from 0 to 3600000",
                "/webhook/retry/backoff: must be a number from 1 to 100",
                "/webhook/retry/maxDelayMs: must be an integer from 0 to 86400000",
                "/webhook/retry/jitter: must be a boolean",
            ]
        ),
        WebhookProblemCase(
            "retry codes on a webhook",
            job(task(), ["webhook": ["url": "https://h.example", "retry": ["on": ["x"]]]]),
            [#"/webhook/retry/on: unknown field "on""#]
        ),
    ]

    @Test(arguments: webhookProblemCases)
    func webhookProblemsAreReportedAtTheirPointer(_ testCase: WebhookProblemCase) {
        #expect(problems(testCase.json) == testCase.expected)
    }
}
