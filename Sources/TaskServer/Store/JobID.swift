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
        let time = UInt64(Timestamp.now().milliseconds) & 0xFFFF_FFFF_FFFF
        let (randomHigh, randomLow) = Self.random.withLock { $0.next() }
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

    /// Bytes from OpenSSL's CSPRNG (libcrypto, linked for HMAC already), drawn 4 KiB at a time:
    /// `RAND_bytes` checks the process id with a system call on every call, and
    /// `SystemRandomNumberGenerator` makes one `getrandom` call per number (each ~1–2% of a
    /// submission's CPU when made per id).
    private struct RandomBytes {
        private var buffer = [UInt8](repeating: 0, count: 4096)
        private var offset = 4096

        /// 80 random bits.
        mutating func next() -> (UInt64, UInt16) {
            if self.offset + 10 > self.buffer.count {
                let filled = self.buffer.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress!, Int32($0.count)) }
                if filled != 1 {
                    var generator = SystemRandomNumberGenerator()
                    for index in self.buffer.indices {
                        self.buffer[index] = UInt8(truncatingIfNeeded: generator.next())
                    }
                }
                self.offset = 0
            }
            defer { self.offset += 10 }
            return self.buffer.withUnsafeBytes { raw in
                (
                    raw.loadUnaligned(fromByteOffset: self.offset, as: UInt64.self),
                    raw.loadUnaligned(fromByteOffset: self.offset + 8, as: UInt16.self)
                )
            }
        }
    }
}
