import Foundation
import TaskCore

/// `taskserver submit --watch`: follows a job until it ends, showing its progress.
///
/// On a terminal it redraws one line (`running  ✔ 3 succeeded  ▶ 2 running  ✘ 0 failed  of 7  4.2s`)
/// at every event and once a second for the clock; otherwise it prints a plain line each time the
/// progress changes. It waits on the events long-poll (`waitMs`), so it never polls busily.
struct JobWatcher {
    let client: TaskServerClient
    let id: String
    var isTerminal = isatty(STDOUT_FILENO) == 1
    var output: (String) -> Void = { FileHandle.standardOutput.write(Data($0.utf8)) }

    /// Returns the job's final state.
    func run() throws(ClientError) -> String {
        let start = ContinuousClock.now
        var after = 0
        var lastLine = ""
        while true {
            let job = try self.client.job(self.id)
            let snapshot = Progress(job: job.json ?? [:])
            let elapsed = ContinuousClock.now - start
            let line = snapshot.line(elapsed: self.isTerminal ? elapsed : nil)
            if self.isTerminal {
                self.output("\r\u{1B}[2K\(self.id)  \(line)")
            } else if line != lastLine {
                self.output("\(Self.seconds(elapsed))  \(self.id)  \(line)\n")
            }
            lastLine = line
            if terminalJobStates.contains(snapshot.state) {
                if self.isTerminal { self.output("\n") }
                if snapshot.state == "failed", let error = snapshot.error { self.output("error: \(error)\n") }
                return snapshot.state
            }
            // A terminal redraws the clock every second; a log only needs the next event.
            let waitMs = self.isTerminal ? 1000 : 30_000
            let response = try self.client.send(
                "GET",
                "/v1/jobs/\(TaskServerClient.escape(self.id))/events?after=\(after)&waitMs=\(waitMs)",
                timeout: waitMs / 1000 + 30
            )
            guard response.status == 200 else { throw ClientError(problem: response) }
            for item in response.json?["items"] as? [[String: Any]] ?? [] {
                if let seq = item["seq"] as? Int { after = max(after, seq) }
            }
        }
    }

    static func seconds(_ duration: Duration) -> String {
        String(format: "%.1fs", Double(duration.wholeMilliseconds) / 1000)
    }

    /// The parts of a job representation the progress line shows.
    struct Progress {
        var state: String
        var total = 0
        var succeeded = 0
        var running = 0
        var failed = 0
        var error: String?

        init(job: [String: Any]) {
            self.state = job["state"] as? String ?? "unknown"
            if let progress = job["progress"] as? [String: Any] {
                self.total = progress["total"] as? Int ?? 0
                self.succeeded = progress["succeeded"] as? Int ?? 0
                self.running = progress["running"] as? Int ?? 0
                self.failed = progress["failed"] as? Int ?? 0
            }
            if let error = job["error"] as? [String: Any] {
                let code = error["code"] as? String ?? "error"
                let task = (error["taskId"] as? String).map { " (task \($0))" } ?? ""
                self.error = "\(code)\(task): \(error["message"] as? String ?? "")"
            }
        }

        /// `running  3 succeeded  2 running  0 failed  of 7`, then the elapsed time when given.
        func line(elapsed: Duration?) -> String {
            var text = "\(self.state)  \(self.succeeded) succeeded  \(self.running) running  \(self.failed) failed  of \(self.total)"
            if let elapsed { text += "  \(JobWatcher.seconds(elapsed))" }
            return text
        }
    }
}
