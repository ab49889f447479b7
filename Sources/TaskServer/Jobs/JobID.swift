import CCrypto
import Synchronization
import TaskCore
import TaskGraph

/// Job ids: 26 characters of Crockford base32 — 48 bits of milliseconds then 80 random bits —
/// so ids sort by creation time and never collide in practice (a ULID).
enum JobID {
    private static let alphabet = Array("0123456789abcdefghjkmnpqrstvwxyz".utf8)
    private static let random = Mutex(RandomBytes())

    /// Which strings can be job ids at all (saves a store lookup for obvious garbage). Ids made
    /// elsewhere (an older version's) are accepted as long as they are URL-safe and short.
    static func isPlausible(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64
            && id.utf8.allSatisfy {
                (0x30...0x39).contains($0) || (0x61...0x7A).contains($0) || (0x41...0x5A).contains($0)
                    || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            }
    }

    static func make() -> String {
        let (randomHigh, randomLow) = Self.random.withLock { $0.next() }
        return Self.encode(time: UInt64(Timestamp.now().milliseconds), randomHigh, randomLow)
    }

    /// The id of the child job that attempt `attempt` of node `task` of job `parent` starts
    /// (issue #45): the same every time it is asked, so an attempt resumed after a restart or a
    /// takeover finds its child. The parent's time, then 80 bits of a hash of the three.
    static func child(of parent: String, task: String, attempt: Int) -> String {
        let name = Array("\(parent)/\(task)/\(attempt)".utf8)
        let high = fnv1a64(name)
        let low = fnv1a64(name + [0x2F]) ^ 0x9E37_79B9_7F4A_7C15
        return Self.encode(time: Self.time(of: parent) ?? 0, high, UInt16(truncatingIfNeeded: low))
    }

    /// The milliseconds an id made here begins with; nil for an id of another form.
    static func time(of id: String) -> UInt64? {
        let utf8 = Array(id.utf8)
        guard utf8.count == 26 else { return nil }
        var time: UInt64 = 0
        for byte in utf8.prefix(10) {
            guard let digit = alphabet.firstIndex(of: byte) else { return nil }
            time = time << 5 | UInt64(digit)
        }
        return time
    }

    private static func encode(time milliseconds: UInt64, _ randomHigh: UInt64, _ randomLow: UInt16) -> String {
        let time = milliseconds & 0xFFFF_FFFF_FFFF
        // 128 bits: time (48) | random (64) | random (16)
        let high: UInt64 = (time << 16) | (randomHigh >> 48)
        let low: UInt64 = (randomHigh << 16) | UInt64(randomLow)
        return String(unsafeUninitializedCapacity: 26) { out in
            var value = (high: high, low: low)
            for i in stride(from: 25, through: 0, by: -1) {
                out[i] = alphabet[Int(value.low & 31)]
                value.low = (value.low >> 5) | ((value.high & 31) << 59)
                value.high >>= 5
            }
            return 26
        }
    }
}
