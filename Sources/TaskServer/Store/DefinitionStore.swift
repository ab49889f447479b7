import TaskCore
import TaskGraph

/// Where workflow definitions (issue #45) are kept: every version of every name, immutable once
/// written, and which version of each name is the latest and whether the name is retired.
///
/// Nothing is cached above it: every server of a cluster reads the shared store, so a change made
/// through one server is what the next start on any server runs. A version never changes, which is
/// what lets a job name one (`DefinitionRef`) for good.
public protocol DefinitionStore: Sendable {
    /// Whether other servers may change the definitions too (a shared database): then a reader
    /// must ask the store which version is the latest; otherwise this server's own changes are
    /// the only ones, and it may remember them.
    var definitionsAreShared: Bool { get }
    /// Makes `body` version latest + 1 of `name` — unless it is the same definition as the latest
    /// version (`StoredDefinition.sameDefinition`), when no version is made and a retired name is
    /// brought back. Completes once durable.
    func putDefinition(_ name: String, body: JSONValue, at: Timestamp) -> Future<DefinitionPut>
    /// Retires `name` (its versions stay readable, its runs untouched); `false` when it is
    /// unknown or retired already.
    func retireDefinition(_ name: String, at: Timestamp) -> Future<Bool>
    /// Version `version` of `name`, retired or not; with `version` nil, the latest version of a
    /// name that is not retired. Nil when there is none.
    func storedDefinition(_ name: String, version: Int?) -> Future<StoredDefinition?>
    /// The latest version of each name that is not retired, by name, after `after`; at most
    /// `limit`.
    func storedDefinitions(limit: Int, after: String?) -> Future<[StoredDefinition]>
    /// The versions of `name` newest first, below `before` when given; at most `limit`.
    func storedDefinitionVersions(_ name: String, limit: Int, before: Int?) -> Future<[StoredDefinition]>
}

extension DefinitionStore {
    public var definitionsAreShared: Bool { false }
}

/// One version of a definition as the store keeps it.
public struct StoredDefinition: Sendable, Equatable {
    public var name: String
    public var version: Int
    /// The definition as `WorkflowDefinition.body` writes it: `graph`, `inputSchema`?,
    /// `defaults`?, `description`?.
    public var body: JSONValue
    public var createdAt: Timestamp
    /// The name's latest version (when read).
    public var latest: Int
    /// When the name was retired, if it is.
    public var retiredAt: Timestamp?

    public init(
        name: String,
        version: Int,
        body: JSONValue,
        createdAt: Timestamp,
        latest: Int,
        retiredAt: Timestamp? = nil
    ) {
        self.name = name
        self.version = version
        self.body = body
        self.createdAt = createdAt
        self.latest = latest
        self.retiredAt = retiredAt
    }

    /// Whether two bodies define the same workflow: equal once every object's members are put in
    /// key order (member order means nothing in a definition, so reordering is not a change).
    public static func sameDefinition(_ a: JSONValue, _ b: JSONValue) -> Bool {
        a.sortingKeys == b.sortingKeys
    }
}

/// What a `putDefinition` did.
public enum DefinitionPut: Sendable, Equatable {
    /// A new version was made (the first one: the name is new).
    case created(StoredDefinition)
    /// The body is the latest version's: that version, unchanged.
    case unchanged(StoredDefinition)
}

extension JSONValue {
    /// The value with every object's members in key order.
    var sortingKeys: JSONValue {
        switch self {
        case .array(let items): return .array(items.map(\.sortingKeys))
        case .object(let object):
            return .object(
                JSONObject(object.members.sorted { $0.key < $1.key }.map { (key: $0.key, value: $0.value.sortingKeys) })
            )
        default: return self
        }
    }
}

/// The definitions of a store that keeps them in memory (`MemoryJobRepository`), and the rules
/// every store follows, written once.
struct DefinitionTable: Sendable {
    private struct Name: Sendable {
        var versions: [StoredDefinition] = []
        var retiredAt: Timestamp?
    }

    private var names: [String: Name] = [:]

    mutating func put(_ name: String, body: JSONValue, at: Timestamp) -> DefinitionPut {
        var entry = self.names[name] ?? Name()
        defer { self.names[name] = entry }
        if let latest = entry.versions.last, StoredDefinition.sameDefinition(latest.body, body) {
            entry.retiredAt = nil
            return .unchanged(self.stamped(latest, entry))
        }
        let version = StoredDefinition(
            name: name,
            version: entry.versions.count + 1,
            body: body,
            createdAt: at,
            latest: entry.versions.count + 1
        )
        entry.versions.append(version)
        entry.retiredAt = nil
        return .created(version)
    }

    mutating func retire(_ name: String, at: Timestamp) -> Bool {
        guard self.names[name] != nil, self.names[name]?.retiredAt == nil else { return false }
        self.names[name]?.retiredAt = at
        return true
    }

    func definition(_ name: String, version: Int?) -> StoredDefinition? {
        guard let entry = self.names[name] else { return nil }
        guard let version else {
            guard entry.retiredAt == nil, let latest = entry.versions.last else { return nil }
            return self.stamped(latest, entry)
        }
        guard (1...entry.versions.count).contains(version) else { return nil }
        return self.stamped(entry.versions[version - 1], entry)
    }

    func definitions(limit: Int, after: String?) -> [StoredDefinition] {
        self.names.keys.sorted().lazy
            .filter { after == nil || $0 > after! }
            .compactMap { self.definition($0, version: nil) }
            .prefix(limit)
            .map { $0 }
    }

    func versions(_ name: String, limit: Int, before: Int?) -> [StoredDefinition] {
        guard let entry = self.names[name] else { return [] }
        return entry.versions.reversed().lazy
            .filter { before == nil || $0.version < before! }
            .prefix(limit)
            .map { self.stamped($0, entry) }
    }

    private func stamped(_ definition: StoredDefinition, _ entry: Name) -> StoredDefinition {
        var definition = definition
        definition.latest = entry.versions.count
        definition.retiredAt = entry.retiredAt
        return definition
    }
}
