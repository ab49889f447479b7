import TaskCore

/// Follows task attempts for a tracer (issue #46): the engine asks it for an `AttemptTrace` as each
/// attempt begins — before it waits for a concurrency key, a rate token or a slot — and reports
/// the waits and the end to it.
///
/// TaskGraph knows nothing of spans or exporters: the server implements this protocol
/// (`JobTracing`). Without one (`EngineConfiguration.attemptTracer == nil`) an attempt costs one
/// nil check more.
public protocol AttemptTracer: Sendable {
    /// An attempt of task `taskID` of `run` begins; nil when the job is not traced (unsampled).
    func attemptBegan(
        _ run: JobRun,
        taskID: String,
        attempt: Int,
        executor: String,
        action: String
    )
        -> (any AttemptTrace)?
}

/// One attempt as a tracer follows it. Calls for one attempt never overlap.
public protocol AttemptTrace: Sendable {
    /// The W3C `traceparent` of the attempt's span: what its outbound calls and its worker carry.
    var traceparent: String { get }
    /// The job's W3C `tracestate`, if it has one.
    var tracestate: String? { get }
    /// The attempt holds concurrency key `key` (SPEC §8), evaluated.
    func heldKey(_ key: String)
    /// The attempt began to wait for `reason`.
    func waitBegan(_ reason: WaitReason)
    /// The attempt's wait for `reason` ended (granted, or the attempt ended while waiting).
    func waitEnded(_ reason: WaitReason)
    /// A worker of an external pool claimed the attempt (SPEC §6).
    func claimed(by workerId: String)
    /// The attempt ended with `outcome`.
    func ended(_ outcome: Outcome<JSONValue>)
}
