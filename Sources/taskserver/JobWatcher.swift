import Foundation
import TaskCore
import TaskGraph
import TaskServerWorker

/// `taskserver submit --watch`: follows a job until it ends, showing its progress.
///
/// On a terminal it redraws one line (`ID  running  3 succeeded  2 running  0 failed  1 pending  of 6  4.2s`)
/// at every event and once a second for the clock; otherwise it prints the same line, plainly, each
/// time the progress changes. It waits on the events long-poll (`waitMs`), so it never polls busily.
struct JobWatcher {
    let client: CommandClient
    let id: String
    var isTerminal = isatty(STDOUT_FILENO) == 1
    var output: (String) -> Void = { FileHandle.standardOutput.write(Data($0.utf8)) }

    /// Returns the job's final state.
    func run() throws(ServerClientError) -> String {
        let start = ContinuousClock.now
        var after = 0
        var lastLine = ""
        while true {
            let job = try self.client.job(self.id)
            let snapshot = Progress(job: job)
            let elapsed = ContinuousClock.now - start
            // The same fields in the same order on a terminal and a pipe; a terminal redraws its
            // one line, a pipe gets a line each time the progress changes.
            let line = snapshot.line
            let shown = "\(self.id)  \(line)  \(Self.seconds(elapsed))"
            if self.isTerminal {
                self.output("\r\u{1B}[2K\(shown)")
            } else if line != lastLine {
                self.output("\(shown)\n")
            }
            lastLine = line
            if terminalJobStates.contains(snapshot.state) {
                if self.isTerminal { self.output("\n") }
                if snapshot.state == "failed", let error = snapshot.error { self.output("error: \(error)\n") }
                return snapshot.state
            }
            // A terminal redraws the clock every second; a log only needs the next event — or, while
            // something waits (a wait starts and ends without an event of its own), a second look.
            let waitMs = self.isTerminal ? 1000 : snapshot.waits.isEmpty ? 30_000 : 2000
            let page = try self.client.expect(
                [200],
                "GET",
                "/v1/jobs/\(escape(self.id))/events?after=\(after)&waitMs=\(waitMs)",
                wait: .milliseconds(waitMs)
            ).json
            for item in page["items"]?.arrayValue ?? [] {
                if let seq = item["seq"]?.intValue { after = max(after, seq) }
            }
        }
    }

    static func seconds(_ duration: Duration) -> String {
        String(format: "%.1fs", Double(duration.wholeMilliseconds) / 1000)
    }

    /// The parts of a job representation the progress line shows.
    struct Progress {
        var state: String
        /// When a delayed job starts (shown while it is pending).
        var runAt: String?
        /// What the job or its tasks wait for: `concurrency key`, `2 waiting for rate`.
        var waits: [String] = []
        var total = 0
        var counts: [(name: String, count: Int)] = []
        var error: String?

        init(job: JSONValue) {
            self.state = job["state"]?.stringValue ?? "unknown"
            self.runAt = job["runAt"]?.stringValue
            if job["waitingFor"]?.stringValue == "concurrency" { self.waits.append("waiting for its concurrency key") }
            let waiting = job["tasksWaiting"]?.objectValue?.members ?? []
            for (reason, count) in waiting.sorted(by: { $0.key < $1.key }) {
                guard let count = count.intValue, count > 0 else { continue }
                self.waits.append(
                    "\(count) waiting for \(reason == "concurrency" ? "a concurrency key" : reason == "rate" ? "the rate limit" : "a slot")"
                )
            }
            if let progress = job["progress"], progress.objectValue != nil {
                self.total = progress["total"]?.intValue ?? 0
                for name in ["succeeded", "running", "failed", "pending", "cancelled", "skipped"] {
                    self.counts.append((name, progress[name]?.intValue ?? 0))
                }
            }
            if let error = job["error"], error.objectValue != nil {
                let code = error["code"]?.stringValue ?? "error"
                let task = error["taskId"]?.stringValue.map { " (task \($0))" } ?? ""
                self.error = "\(code)\(task): \(error["message"]?.stringValue ?? "")"
            }
        }

        /// `running  3 succeeded  2 running  0 failed  1 pending  of 6`: succeeded, running and
        /// failed always, then pending, cancelled and skipped when there are any, so the counts add
        /// up to the total. A delayed job says when it starts: `pending until 2026-12-24T18:00:00.000Z`.
        var line: String {
            var text = self.state
            if self.state == "pending", let runAt { text += " until \(runAt)" }
            for (index, (name, count)) in self.counts.enumerated() where index < 3 || count > 0 {
                text += "  \(count) \(name)"
            }
            text += "  of \(self.total)"
            return self.waits.isEmpty ? text : text + " (" + self.waits.joined(separator: ", ") + ")"
        }
    }
}
