import Logging
import TaskGraph

/// Logs every job and task event at `debug`, with `job.id` and `task.id` as metadata, so one job
/// can be followed through the log (`--log-level debug`, best with `--log-format json`); a traced
/// job's lines carry its `trace.id` (issue #46), so a log search leads to the trace.
///
/// Registered only when the log level lets debug lines through: at `info` it costs nothing. Inputs,
/// results and webhook secrets are never logged; failures carry their error code.
struct JobLog: JobObserver {
    let logger: Logger

    func job(_ run: JobRun, appended events: ArraySlice<JobEvent>) {
        for event in events {
            var metadata: Logger.Metadata = ["job.id": .string(run.id), "event.seq": .stringConvertible(event.seq)]
            if let taskId = event.taskId { metadata["task.id"] = .string(taskId) }
            if let traceId = run.traceId { metadata["trace.id"] = .string(traceId) }
            if let code = event.data?["code"]?.stringValue { metadata["error.code"] = .string(code) }
            self.logger.debug("\(event.type.rawValue)", metadata: metadata)
        }
    }
}
