#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Which process on which machine boot holds a server's row (`servers.process`), so that a second
/// server started on the same host under the same name — two without `--node-name` take the host
/// name — is refused instead of fencing the first (#41). A predecessor that died (a restart after
/// a crash) no longer runs, so its successor takes its row and its jobs over at once, as before.
///
/// `boot-id/pid/start-time`: the kernel's boot id, the process id, and the process's start time
/// in clock ticks since boot (`/proc/PID/stat`, field 22) — a pid reused by another process after
/// the first one died has another start time. Empty where `/proc` does not tell (then nothing is
/// refused).
struct ProcessIdentity: Equatable, Sendable {
    let bootID: String
    let pid: Int32
    let startTime: UInt64

    /// This process.
    static let current: ProcessIdentity? = {
        guard let boot = Self.bootID() else { return nil }
        let pid = getpid()
        return Self.startTime(of: pid).map { ProcessIdentity(bootID: boot, pid: pid, startTime: $0) }
    }()

    init(bootID: String, pid: Int32, startTime: UInt64) {
        self.bootID = bootID
        self.pid = pid
        self.startTime = startTime
    }

    init?(_ text: String) {
        let parts = text.split(separator: "/")
        guard parts.count == 3, let pid = Int32(parts[1]), let start = UInt64(parts[2]) else { return nil }
        self.init(bootID: String(parts[0]), pid: pid, startTime: start)
    }

    var text: String { "\(self.bootID)/\(self.pid)/\(self.startTime)" }

    /// Whether this identity names a process that runs now on this machine (and is not this one).
    var isAnotherLiveProcessHere: Bool {
        guard let current = Self.current, current.bootID == self.bootID, current != self else { return false }
        return Self.startTime(of: self.pid) == self.startTime
    }

    private static func bootID() -> String? {
        guard let text = Self.read("/proc/sys/kernel/random/boot_id") else { return nil }
        let id = text.filter { !$0.isWhitespace }
        return id.isEmpty || id.contains("/") ? nil : id
    }

    /// Field 22 of `/proc/PID/stat` (after the command name, which is in parentheses and may hold
    /// spaces: counted from the last `)`).
    private static func startTime(of pid: Int32) -> UInt64? {
        guard let stat = Self.read("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state); field 22 is fields[19].
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }

    private static func read(_ path: String) -> String? {
        guard let file = fopen(path, "r") else { return nil }
        defer { fclose(file) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = fread(&buffer, 1, buffer.count, file)
        return count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : nil
    }
}
