/// A notification on the cluster's channel (`NOTIFY taskserver`), parsed once into what it says.
///
/// The payloads are words separated by spaces; job ids and server names have none. Most are
/// made by SQL in the statement that commits what they announce (so a notice never precedes its
/// commit); `payload` is their one description here, and the statements build the same strings.
enum ClusterNotice: Equatable, Sendable {
    /// `cancel <job>`: another server recorded a cancellation of the job.
    case cancel(job: String)
    /// `command <id> <job>` or `command <id> @<server>`: a relayed command for the server that
    /// runs the job, or for the named server (a claim).
    case command(id: Int64, target: CommandTarget)
    /// `answered <id>`: relayed command `id` has its answer.
    case answered(id: Int64)
    /// `ended <job>…`: jobs that ended (waits on their stored records read them again).
    case ended(jobs: [String])
    /// `changed <job>…`: finished jobs redriven or deleted: a copy of their record is stale.
    case changed(jobs: [String])
    /// `schedule <id>`: a schedule was created, changed, deleted or fired.
    case schedule(id: String)
    /// `queued <server> <count> <pool>`: attempts of the pool were queued on the server with
    /// nobody there waiting for them (`count` queued then): claims waiting elsewhere are relayed
    /// there now, not at the next heartbeat. Last, the pool: its name is the rest of the payload.
    case queued(server: String, count: Int, pool: String)
    /// `left <server>`: a server left the cluster (shut down): its unfinished jobs are ownerless.
    case left(server: String)
    /// `freed <key>`: a slot of the concurrency key was given back while a server waited for one
    /// (`PostgresKeySlots`). The key is the rest of the payload (it may hold spaces).
    case freed(key: String)

    enum CommandTarget: Equatable, Sendable {
        case job(String)
        case server(String)
    }

    /// The payloads PostgreSQL takes (8,000 bytes at most); lists are split below that.
    static let maxPayloadBytes = 7900

    init?(payload: String) {
        if payload.hasPrefix("queued ") {
            let words = payload.split(separator: " ", maxSplits: 3).map(String.init)
            guard words.count == 4, let count = Int(words[2]), count >= 0 else { return nil }
            self = .queued(server: words[1], count: count, pool: words[3])
            return
        }
        if payload.hasPrefix("freed "), payload.utf8.count > 6 {
            self = .freed(key: String(payload.dropFirst(6)))
            return
        }
        let words = payload.split(separator: " ").map(String.init)
        guard let kind = words.first else { return nil }
        switch kind {
        case "cancel" where words.count == 2:
            self = .cancel(job: words[1])
        case "command" where words.count == 3:
            guard let id = Int64(words[1]) else { return nil }
            let target = words[2]
            self = .command(
                id: id,
                target: target.hasPrefix("@") ? .server(String(target.dropFirst())) : .job(target)
            )
        case "answered" where words.count == 2:
            guard let id = Int64(words[1]) else { return nil }
            self = .answered(id: id)
        case "ended" where words.count >= 2:
            self = .ended(jobs: Array(words.dropFirst()))
        case "changed" where words.count >= 2:
            self = .changed(jobs: Array(words.dropFirst()))
        case "schedule" where words.count == 2:
            self = .schedule(id: words[1])
        case "left" where words.count == 2:
            self = .left(server: words[1])
        default:
            return nil
        }
    }

    var payload: String {
        switch self {
        case .cancel(let job): "cancel \(job)"
        case .command(let id, .job(let job)): "command \(id) \(job)"
        case .command(let id, .server(let server)): "command \(id) @\(server)"
        case .answered(let id): "answered \(id)"
        case .ended(let jobs): (["ended"] + jobs).joined(separator: " ")
        case .changed(let jobs): (["changed"] + jobs).joined(separator: " ")
        case .schedule(let id): "schedule \(id)"
        case .queued(let server, let count, let pool): "queued \(server) \(count) \(pool)"
        case .freed(let key): "freed \(key)"
        case .left(let server): "left \(server)"
        }
    }

    /// The payloads of `kind` (`ended`, `changed`) listing `ids`, each within `maxPayloadBytes`.
    static func listPayloads(_ kind: String, _ ids: [String]) -> [String] {
        var payloads: [String] = []
        var payload = kind
        for id in ids {
            if payload.utf8.count + id.utf8.count + 1 > Self.maxPayloadBytes {
                payloads.append(payload)
                payload = kind
            }
            payload += " " + id
        }
        if payload.utf8.count > kind.utf8.count { payloads.append(payload) }
        return payloads
    }
}
